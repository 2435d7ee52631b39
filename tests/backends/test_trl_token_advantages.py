"""GiGPO's per-position token spans in TRL completions (pure numpy; hand-computed cases)."""

from __future__ import annotations

import numpy as np
import pytest

from twinrun.core.advantages.token_advantages import model_segments, spread_advantages


def test_segments_are_maximal_runs_of_loss_tokens():
    # turn 1 (3 tokens), tool result (2), turn 2 (2), tool result (1), turn 3 (1), right padding (2)
    mask = np.array([[1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0],
                     [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                     [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    assert model_segments(mask) == [[(0, 3), (5, 7), (8, 9)], [(0, 2)], []]


def test_spread_puts_each_positions_advantage_on_its_tokens_only():
    spans = [[(0, 2), (4, 5), (6, 7)], [(0, 1)]]
    positions = [[[1], [2, 3], [3]], [[1]]]
    per_position = np.array([[0.5, -1.0, 2.0], [0.25, 0.0, 0.0]])
    adv = spread_advantages(spans, positions, per_position, 8)
    expected = np.array([
        [0.5, 0.5, 0, 0, 0.5, 0, 2.0, 0],  # segment 2 averages positions 2 and 3: (-1 + 2) / 2 = 0.5
        [0.25, 0, 0, 0, 0, 0, 0, 0],
    ])
    np.testing.assert_allclose(adv, expected)


def test_spread_rejects_misaligned_positions():
    with pytest.raises(ValueError, match="2 segments but 1"):
        spread_advantages([[(0, 1), (2, 3)]], [[[1]]], np.zeros((1, 2)), 4)
