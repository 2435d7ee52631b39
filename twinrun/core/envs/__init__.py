"""Text environments (ALFWorld, ScienceWorld; ``null_env``, a stand-in for measuring the harness) behind one protocol,
and the worker pool that runs them.

Engines are imported lazily: importing this package needs neither alfworld nor scienceworld.

May import: errors, spec, records. :mod:`.task_groups` draws the GRPO task groups from a catalogue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from twinrun.core.envs.base import EnvError, GameRef, Observation, Step, TextEnv
from twinrun.core.envs.pool import ENV_KINDS, EnvHost, EnvLease, EnvPool


class GameCatalog(Protocol):
    """Games of one split, by task type (what task-group sampling draws from)."""

    def task_types(self) -> list[str]: ...

    def games(self, task_type: str | None = None) -> list[GameRef]: ...


def make_catalog(env_name: str, split: str, *, data_root: str | Path | None = None,
                 task_types: list[str] | None = None) -> GameCatalog:
    """The catalogue for `environment.name` and one split. ALFWorld needs `data_root` (the ALFWORLD_DATA folder);
    ScienceWorld lists variations from the simulator (a JVM is started on first use)."""
    if env_name == "alfworld":
        from twinrun.core.envs.alfworld import AlfWorldCatalog

        return AlfWorldCatalog(data_root, split)  # type: ignore[arg-type]
    if env_name == "sciworld":
        from twinrun.core.envs.scienceworld import ScienceWorldCatalog

        return ScienceWorldCatalog(split, tasks=task_types)
    if env_name == "null_env":
        from twinrun.core.envs.null import NullCatalog

        return NullCatalog(split, task_types)
    raise EnvError(f"environment.name: {env_name!r} is unknown (fix: one of {', '.join(ENV_KINDS)})")


def make_pool(env_name: str, workers: int, *, expert: bool, **options: Any) -> EnvPool:
    """A pool for `environment.name`. `expert`: compute the expert plan (the scripted executor needs it; other
    executors skip its per-step cost)."""
    if env_name == "alfworld":
        options.setdefault("expert_type", "handcoded" if expert else None)
    elif env_name == "sciworld":
        options.setdefault("gold_path", expert)
    return EnvPool(env_name, workers=workers, options=options)


__all__ = [
    "ENV_KINDS",
    "EnvError",
    "EnvHost",
    "EnvLease",
    "EnvPool",
    "GameCatalog",
    "GameRef",
    "Observation",
    "Step",
    "TextEnv",
    "make_catalog",
    "make_pool",
]
