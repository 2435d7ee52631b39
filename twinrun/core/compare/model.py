"""What `twinrun compare` works on: its settings, its error, and the tables of arms it loads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twinrun.core.errors import TwinrunError

class CompareError(TwinrunError, ValueError):
    """Inputs that cannot be compared (one line: what, which value, fix)."""


@dataclass(frozen=True)
class CompareSettings:
    alpha: float = 0.05
    power: float = 0.8
    level: float = 0.95
    n_boot: int = 10_000
    seed: int = 0
    max_unmeasured_share: float = 0.1
    family: str = "run"  # "run": one multiplicity family per run; "all": every checkpoint arm in one family

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise CompareError(f"alpha: {self.alpha} must be in (0, 1) (fix: e.g. 0.05)")
        if not 0 < self.power < 1:
            raise CompareError(f"power: {self.power} must be in (0, 1) (fix: e.g. 0.8)")
        if not 0 < self.level < 1:
            raise CompareError(f"level: {self.level} must be in (0, 1) (fix: e.g. 0.95)")
        if self.n_boot < 100:
            raise CompareError(f"n_boot: {self.n_boot} is too few resamples (fix: 1000 or more, default 10000)")
        if not 0 <= self.max_unmeasured_share <= 1:
            raise CompareError(f"max_unmeasured_share: {self.max_unmeasured_share} must be in [0, 1] (fix: e.g. 0.1)")
        if self.family not in ("run", "all"):
            raise CompareError(f"family: {self.family!r} is not a family rule (fix: 'run' or 'all')")


# ------------------------------------------------------------------------------------------------------------
# Input model


@dataclass
class ArmInfo:
    """One evaluated arm. `run` is the curve it belongs to (None for baseline arms)."""

    name: str
    run: str | None
    checkpoint: int | None
    replicate: int = 0
    role: str = "checkpoint"  # "checkpoint" | "baseline"
    n_unmeasured: int = 0
    n_missing: int = 0
    # published summaries only
    n: int | None = None
    successes: int | None = None
    b: int | None = None
    c: int | None = None


@dataclass
class GameTable:
    """Per-game outcomes of every arm of one sweep: outcomes[A, G] in {1, 0, NaN}."""

    arms: list[ArmInfo]
    outcomes: np.ndarray
    game_ids: list[str]
    sweep_id: str | None = None
    games_hash: str | None = None
    task_types: list[str] = field(default_factory=list)


@dataclass
class SummaryTable:
    """Published per-checkpoint counts (no per-game outcomes)."""

    arms: list[ArmInfo]
    source: str = ""
