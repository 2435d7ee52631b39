"""The text-environment protocol every game engine implements, and the game identifiers that travel between
processes (dataset rows, worker pipes, records).

An environment is stateful and single-threaded: ``reset(game)`` starts an episode, ``step(action)`` advances it.
Engines are not thread-safe (textworld), so parallel episodes run in worker processes (:mod:`.pool`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from twinrun.core.errors import TwinrunError


class EnvError(TwinrunError, ValueError):
    """Bad environment input (unknown split, missing data folder, a game that is not there)."""


@dataclass(frozen=True)
class GameRef:
    """One playable game, identified well enough to rebuild it in another process.

    env:        "alfworld" | "sciworld" | "null_env"
    game_id:    stable id used in records ("valid_seen/<task_dir>/<trial>" or "<task>/<variation>")
    task_type:  the short type task groups are built from (ALFWorld: pick/look/clean/heat/cool/pick2;
                ScienceWorld: the task name)
    path:       ALFWorld: absolute path of game.tw-pddl
    task_name, variation: ScienceWorld task and variation index
    split:      the split the game was listed from
    """

    env: str
    game_id: str
    task_type: str
    split: str
    path: str | None = None
    task_name: str | None = None
    variation: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GameRef:
        try:
            return cls(**d)
        except TypeError as e:
            raise EnvError(f"game: {d!r} is not a game reference ({e}; fix: use GameRef.to_dict())") from None


@dataclass(frozen=True)
class Observation:
    """What the agent sees after reset/step. `task` is the goal sentence; `admissible_actions` the engine's list."""

    text: str
    task: str
    admissible_actions: tuple[str, ...] = field(default_factory=tuple)


class Step(NamedTuple):
    """Result of one action: unpacks as ``obs, score, done, won``.

    score: ALFWorld 0/1; ScienceWorld 0..100 (negative allowed)."""

    observation: Observation
    score: float
    done: bool
    won: bool


@runtime_checkable
class TextEnv(Protocol):
    """A single-threaded text game engine."""

    name: str

    def reset(self, game: GameRef, seed: int | None = None) -> Observation:
        """Start `game`. `seed` fixes any randomness inside the engine or its expert (None: derived from the
        game id, so a replay is identical either way)."""
        ...

    def step(self, action: str) -> Step: ...

    def expert_plan(self) -> list[str]:
        """The expert's actions from the current state; element 0 is the next action ([] if none known)."""
        ...

    @property
    def game(self) -> GameRef | None: ...

    def close(self) -> None: ...
