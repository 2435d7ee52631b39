"""The games a sweep left out of its split, as report lines (issue 53): a reader sees which games were dropped and
why, and which known-broken game an older sweep still plays (why its episodes there are unmeasured)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def excluded_game_notes(plan: Mapping[str, Any]) -> list[str]:
    """Report lines naming the games a sweep (sweep.json) left out of its split, and the known-broken games a
    sweep planned before their exclusion still plays (why its episodes there are unmeasured)."""
    from twinrun.core.envs.alfworld import excluded_games

    sid = plan.get("sweep_id")
    left = plan.get("excluded_games") or {}
    kept = excluded_games([g.get("game_id") for g in plan.get("games", []) if g.get("env") == "alfworld"])
    return ([f"Left out of split `{plan.get('split')}` by sweep `{sid}` before its game list was drawn: `{g}` ({why})."
             for g, why in left.items()]
            + [f"Sweep `{sid}` plays `{g}`, a game twinrun now leaves out of new sweeps ({why}); the episodes it "
               "kills are unmeasured, not failures." for g, why in kept.items()])

