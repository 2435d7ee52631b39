"""Per-token advantages for a multi-turn completion (pure numpy; GiGPO's per-position spans): what TRL's
accumulated shape trains on (backends/trl/trainer.py).

A TRL tool-loop completion is one token sequence: the curator's turn 1, the tool result (chi_2, masked out by
``tool_mask``), turn 2, ... So the curator's turns are the maximal runs of loss-carrying tokens
(``completion_mask * tool_mask == 1``). Segment ``r`` is the ``r``-th assistant message, and the broker logged which
position each ``curate`` call of which segment applied to; core's
:func:`~twinrun.core.curation.policy_input.segment_positions` maps segments to positions and this module turns that
into a ``(B, T)`` advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def model_segments(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """Maximal runs of 1 in each row of ``mask`` [B, T] (0/1): per row a list of half-open ``(start, end)``."""
    m = np.asarray(mask).astype(np.int8)
    if m.ndim != 2:
        raise ValueError(f"mask: shape {m.shape} is not (B, T)")
    padded = np.pad(m, ((0, 0), (1, 1)))
    diff = np.diff(padded, axis=1)  # +1 at a run start, -1 one past its end
    out: list[list[tuple[int, int]]] = []
    for row in diff:
        starts = np.flatnonzero(row == 1)
        ends = np.flatnonzero(row == -1)
        out.append([(int(s), int(e)) for s, e in zip(starts, ends, strict=True)])
    return out


def spread_advantages(
    spans: Sequence[Sequence[tuple[int, int]]],
    positions: Sequence[Sequence[Sequence[int]]],
    per_position: np.ndarray,
    width: int,
) -> np.ndarray:
    """(B, T) advantages: each segment's tokens get the mean of its positions' advantages.

    spans[b]: segments of row b; positions[b][r]: positions of segment r; per_position [B, |G|] (position p at
    column p-1). Tokens outside every segment (prompt padding, tool results, padding) get 0; they carry no loss."""
    adv = np.zeros((len(spans), width), dtype=np.float64)
    for b, (row_spans, row_pos) in enumerate(zip(spans, positions, strict=True)):
        if len(row_spans) != len(row_pos):
            raise ValueError(f"row {b}: {len(row_spans)} segments but {len(row_pos)} position lists")
        for (s, e), ps in zip(row_spans, row_pos, strict=True):
            adv[b, s:e] = float(np.mean([per_position[b, p - 1] for p in ps]))
    return adv
