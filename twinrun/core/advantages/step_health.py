"""Step gates every backend applies before an update: a step whose rewards rest on too little is stopped.

Two gates, one rule each, computed from core's curation records (rollouts.jsonl rows, or the counts a backend
carries with each rollout), so both backends stop on exactly the same steps:

* ``executor.max_unmeasured_share``: unmeasured executor episodes / episodes played. Past it the endpoint or the
  simulator is failing: :class:`~twinrun.core.errors.InfrastructureError` (never a task failure).
* ``curator.max_missing_turn_share``: positions the curator never took a turn at (its completion was capped or it
  stopped calling; core played them with no ops) / all positions. Past it the rollouts say little about the
  curator's decisions and r_fc/r_cnt are mostly zeros: :class:`MissingTurnsError` (raise
  ``curator.max_completion_tokens`` or look at the curator's turns in rollouts.jsonl).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twinrun.core.errors import InfrastructureError, TwinrunError


class MissingTurnsError(TwinrunError, RuntimeError):
    """Too many positions of a step were played without a curator turn (one line: share, limit, fix)."""


@dataclass(frozen=True)
class StepCounts:
    """What the gates read, summed over one step's curation rollouts."""

    episodes: int = 0  # executor episodes played (a reused position-1 episode is not counted twice)
    unmeasured: int = 0  # of which unmeasured
    positions: int = 0  # positions of every rollout (rollouts x |G|)
    turns_missing: int = 0  # positions played without a curator turn

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> StepCounts:
        """Sum rollouts.jsonl rows (core.curation.CurationRecord as dicts)."""
        e = u = p = m = 0
        for r in records:
            e += int(r["executor_episodes"])
            u += int(r["unmeasured_episodes"])
            p += len(r["positions"])
            m += int(r["turns_missing"])
        return cls(e, u, p, m)

    def __add__(self, other: StepCounts) -> StepCounts:
        return StepCounts(self.episodes + other.episodes, self.unmeasured + other.unmeasured,
                          self.positions + other.positions, self.turns_missing + other.turns_missing)

    @property
    def unmeasured_share(self) -> float:
        return self.unmeasured / self.episodes if self.episodes else 0.0

    @property
    def missing_turn_share(self) -> float:
        return self.turns_missing / self.positions if self.positions else 0.0


def check_step_health(counts: StepCounts, *, max_unmeasured_share: float = 1.0,
                      max_missing_turn_share: float = 1.0, step: int | None = None) -> None:
    """Raise when a gate is passed (strictly above its limit); a limit of 1.0 never stops a step."""
    where = f"step {step}: " if step is not None else ""
    if counts.unmeasured_share > max_unmeasured_share:
        raise InfrastructureError(
            f"{where}{counts.unmeasured_share:.0%} of this step's executor episodes were unmeasured "
            f"({counts.unmeasured} of {counts.episodes}), above executor.max_unmeasured_share="
            f"{max_unmeasured_share:.0%} (the executor endpoint or the simulator is failing; see episodes.jsonl "
            "reasons, then --resume)"
        )
    if counts.missing_turn_share > max_missing_turn_share:
        raise MissingTurnsError(
            f"{where}{counts.missing_turn_share:.0%} of this step's positions had no curator turn "
            f"({counts.turns_missing} of {counts.positions}), above curator.max_missing_turn_share="
            f"{max_missing_turn_share:.0%} (fix: raise curator.max_completion_tokens, or see the turns in "
            "rollouts.jsonl: the curator stops calling curate)"
        )


__all__ = ["MissingTurnsError", "StepCounts", "check_step_health"]
