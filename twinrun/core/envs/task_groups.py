"""Task groups: |G| games of one task type, drawn by a seeded sampler that gives the same groups in every process
(task types in round-robin). Split from :mod:`twinrun.core.curation.session`, which re-exports these names."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twinrun.core.envs import GameCatalog, GameRef
from twinrun.core.errors import TwinrunError


class CurationError(TwinrunError, ValueError):
    """A session used out of order, or a task group that cannot be drawn."""


def stable_int(*parts: Any) -> int:
    """A 63-bit integer from the parts' text: the same in every process (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def rollout_episode_seed(seed: int, group_id: str, rollout_index: int, position: int) -> int:
    """The executor's seed for the episode at ``position`` of a curation rollout (spec seed, task group, rollout):
    the same in every backend and process, so a replay of that game (e.g. without skills,
    :mod:`twinrun.core.sweeps.skill_lift`) draws the same executor randomness."""
    return stable_int("episode", seed, group_id, rollout_index, position)


# ------------------------------------------------------------------------------------------------------------
# Task groups


@dataclass(frozen=True)
class TaskGroup:
    """|G| games of one task type. `to_row()` is JSON-able (a dataset row for TRL/verl); `from_row` inverts it."""

    group_id: str
    task_type: str
    games: tuple[GameRef, ...]
    step: int = 0
    index: int = 0

    def to_row(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "task_type": self.task_type, "step": self.step, "index": self.index,
                "games": [g.to_dict() for g in self.games]}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskGroup:
        try:
            return cls(str(row["group_id"]), str(row["task_type"]), tuple(GameRef.from_dict(g) for g in row["games"]),
                       int(row.get("step", 0)), int(row.get("index", 0)))
        except (KeyError, TypeError) as e:
            raise CurationError(f"task group row: missing or bad field {e} (fix: build rows with TaskGroup.to_row())") from None


class TaskGroupSampler:
    """Deterministic task groups: group k = step * groups_per_step + index has type ``types[k % len(types)]``
    (uniform round-robin) and |G| distinct games of that type drawn with ``Random(stable_int(seed, k))``.
    The same (seed, step, index) gives the same group in every process and on every backend."""

    def __init__(self, catalog: GameCatalog, group_size: int, *, groups_per_step: int = 1,
                 task_types: Sequence[str] | None = None, seed: int = 0):
        self.catalog = catalog
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.seed = seed
        self.task_types = list(task_types) if task_types else catalog.task_types()
        if not self.task_types:
            raise CurationError("environment.task_types: no task types in the catalogue (fix: check the split)")
        self._games: dict[str, list[GameRef]] = {}

    def games_of(self, task_type: str) -> list[GameRef]:
        if task_type not in self._games:
            games = sorted(self.catalog.games(task_type), key=lambda g: g.game_id)
            if len(games) < self.group_size:
                raise CurationError(
                    f"environment.group_size: {self.group_size} exceeds the {len(games)} {task_type!r} games of the "
                    "split (fix: a smaller group_size or a larger split)"
                )
            self._games[task_type] = games
        return self._games[task_type]

    def group(self, step: int, index: int) -> TaskGroup:
        if not 0 <= index < self.groups_per_step:
            raise CurationError(f"group index: {index} is outside 0..{self.groups_per_step - 1} (fix: batch.groups_per_step)")
        k = step * self.groups_per_step + index
        task_type = self.task_types[k % len(self.task_types)]
        rng = random.Random(stable_int("twinrun-task-group", self.seed, k))
        games = tuple(rng.sample(self.games_of(task_type), self.group_size))
        return TaskGroup(f"s{step}-g{index}-{task_type}", task_type, games, step, index)

    def step_groups(self, step: int) -> list[TaskGroup]:
        return [self.group(step, i) for i in range(self.groups_per_step)]
