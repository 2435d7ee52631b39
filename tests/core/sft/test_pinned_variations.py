"""The pinned 200 test variations (issue 15 item 4): the shipped file, its drawing rule, and its existence in the
installed simulator."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from twinrun.core.sft.agent_eval import (
    PINNED_VARIATIONS_FILE,
    AgentEvalSettings,
    draw_pinned_variations,
    load_pinned_variations,
    pinned_games,
)
from twinrun.core.envs.base import GameRef
from twinrun.core.errors import TwinrunError


def test_the_shipped_list_is_200_distinct_test_pairs_covering_every_task():
    doc = json.loads(PINNED_VARIATIONS_FILE.read_text())
    pairs = load_pinned_variations()
    assert len(pairs) == 200 == len(set(pairs)) and doc["split"] == "test"
    assert "NOT the published" in doc["description"] and doc["simulator"].startswith("scienceworld ")
    per_task = Counter(t for t, _ in pairs)
    assert len(per_task) == 30 and min(per_task.values()) >= 4 and max(per_task.values()) <= 7
    assert pairs == sorted(pairs, key=lambda p: f"{p[0]}/{p[1]}")


def _games(counts):
    return [GameRef(env="sciworld", game_id=f"{t}/{v}", task_type=t, split="test", task_name=t, variation=v)
            for t, n in counts.items() for v in range(n)]


def test_drawing_rule_on_a_hand_case():
    """3 tasks with 2, 10, 10 variations and n = 12: the small task gives both, the others 5 each."""
    pairs = draw_pinned_variations(_games({"a": 2, "b": 10, "c": 10}), n=12, seed=0)
    assert Counter(t for t, _ in pairs) == {"a": 2, "b": 5, "c": 5}
    assert pairs == draw_pinned_variations(list(reversed(_games({"a": 2, "b": 10, "c": 10}))), n=12, seed=0)
    # a remainder goes to the task with the most variations
    assert Counter(t for t, _ in draw_pinned_variations(_games({"a": 9, "b": 10}), n=9)) == {"a": 4, "b": 5}


class _Catalog:
    """A stand-in for ScienceWorldCatalog's games(task) (the real one is exercised in the sciworld test below)."""

    def __init__(self, games):
        self._games = games

    def games(self, task=None):
        return [g for g in self._games if task is None or g.task_name == task]


def test_pinned_games_selects_checks_and_says_so(tmp_path):
    f = tmp_path / "pins.json"
    f.write_text(json.dumps({"variations": [{"task": "a", "variation": 1}, {"task": "b", "variation": 3},
                                            {"task": "b", "variation": 4}]}))
    cat = _Catalog(_games({"a": 2, "b": 5}))
    games, what = pinned_games(cat, AgentEvalSettings(), path=f)
    assert [g.game_id for g in games] == ["a/1", "b/3", "b/4"] and what == "3 pinned test variations (pins.json)"
    games, what = pinned_games(cat, AgentEvalSettings(variations=2, seed=1), path=f)
    assert len(games) == 2 and "2 of the 3 pinned" in what
    games, _ = pinned_games(cat, AgentEvalSettings(tasks=["b"]), path=f)
    assert [g.game_id for g in games] == ["b/3", "b/4"]
    with pytest.raises(TwinrunError, match="b/4 is not a test variation of the installed scienceworld"):
        pinned_games(_Catalog(_games({"a": 2, "b": 4})), AgentEvalSettings(), path=f)
    with pytest.raises(TwinrunError, match="--split"):
        pinned_games(cat, AgentEvalSettings(split="dev"), path=f)


@pytest.mark.sciworld
@pytest.mark.slow
def test_the_shipped_list_is_redrawn_from_and_exists_in_the_installed_simulator():
    pytest.importorskip("scienceworld")
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog

    cat = ScienceWorldCatalog("test")
    try:
        assert draw_pinned_variations(cat.games()) == load_pinned_variations()
        games, what = pinned_games(cat, AgentEvalSettings())
    finally:
        cat.close()
    assert len(games) == 200 and what.startswith("200 pinned test variations")
