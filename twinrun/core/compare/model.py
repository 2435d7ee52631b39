"""What `twinrun compare` works on: its settings, its error, and the tables of arms it loads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from twinrun.core.errors import TwinrunError


class CompareError(TwinrunError, ValueError):
    """Inputs that cannot be compared (one line: what, which value, fix)."""


FAMILY_RULES = ("run", "all", "custom")
AXES = ("executor",)
STREAM_DESIGNS = ("auto", "nested", "crossed")
SEED_DESIGNS = ("auto", "paired", "independent")


@dataclass(frozen=True)
class CompareSettings:
    """What a comparison is asked to do. The verdict's criterion is written from these (see `verdict`)."""

    alpha: float = 0.05
    power: float = 0.8
    level: float = 0.95
    n_boot: int = 10_000
    seed: int = 0
    max_unmeasured_share: float = 0.1
    # multiplicity families: "run" (one per run), "all" (every checkpoint arm in one family), "custom"
    # (`family_map`: (family name, glob on arm names) pairs; every checkpoint arm must match one)
    family: str = "run"
    family_map: tuple[tuple[str, str], ...] = ()
    rho0: float = 0.5  # "agree" needs the lower CI bound of r above this
    delta: float = 0.05  # equivalence margin of the centred curves (success-rate units: 0.05 = 5 pp)
    # run -> (framework, seed) overrides of what the sweep recorded (a seed of None: unknown)
    groups: tuple[tuple[str, str, int | None], ...] = ()
    across: str | None = None  # several sweeps that differ in this axis ("executor")
    # the intra-stream correlation the user states (a pilot's value) for one-stream-per-arm inputs: every variance
    # is inflated by DEFF = 1 + (m - 1) rho; None = not stated (one stream then decides no shape claim)
    stream_icc: float | None = None
    # how replicate streams are analysed: "auto" reads the sweep's manifest (streams played with shared stream
    # plans are blocks crossed with the arms: the blocked analysis; otherwise nested replicates), "nested" treats
    # them as nested replicates whatever the manifest says (valid, less powerful where they were crossed)
    # "crossed": the user states that stream r of every arm played one common order with shared seeds (rows from
    # another harness, no sweep.json stream plans); the rows' positions must agree (compare.load.stated_crossing)
    stream_design: str = "auto"
    # which game list to compare on where a sweep's arms carry more than one (compare --games-hash); None: one list
    # or a refusal (compare.load.game_lists)
    games_hash: str | None = None
    # what would decide varies the streams per arm at the games per stream played (the protocol's: a stream is the
    # held-out games in order through one repository, so its length is part of what is measured), up to this cap
    max_streams: int = 64
    # how a framework (or group) contrast treats seeds: "auto" pairs seed i's runs across the two groups where their
    # provenance says they pair (the same seed, the same start, shared stream plans: frameworks.seed_pairing) and
    # tests within seed; "paired" forces that (every seed once in each group), "independent" the split-plot with
    # seeds nested in groups (docs/compare.md, "Seeds pair")
    seed_design: str = "auto"

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
        if self.family not in FAMILY_RULES:
            raise CompareError(f"family: {self.family!r} is not a family rule (fix: run, all or custom)")
        if self.family == "custom" and not self.family_map:
            raise CompareError("family: custom needs at least one --family-of NAME=GLOB (fix: e.g. "
                               "--family-of trl='trl-*')")
        if self.family != "custom" and self.family_map:
            raise CompareError(f"family-of: given with --family {self.family} (fix: --family custom, or drop it)")
        if not -1 < self.rho0 < 1:
            raise CompareError(f"rho0: {self.rho0} must be in (-1, 1) (fix: e.g. 0.5)")
        if not 0 < self.delta < 1:
            raise CompareError(f"delta: {self.delta} must be in (0, 1) in success-rate units (fix: 0.05 for 5 pp)")
        if self.stream_icc is not None and not 0 <= self.stream_icc < 1:
            raise CompareError(f"stream_icc: {self.stream_icc} must be in [0, 1) (fix: a pilot sweep's intra-stream "
                               "correlation, e.g. 0.02)")
        if self.max_streams < 2:
            raise CompareError(f"max_streams: {self.max_streams} (fix: 2 or more, e.g. 64)")
        if self.stream_design not in STREAM_DESIGNS:
            raise CompareError(f"stream_design: {self.stream_design!r} (fix: one of {', '.join(STREAM_DESIGNS)})")
        if self.seed_design not in SEED_DESIGNS:
            raise CompareError(f"seed_design: {self.seed_design!r} (fix: one of {', '.join(SEED_DESIGNS)})")
        if self.across is not None and self.across not in AXES:
            raise CompareError(f"across: {self.across!r} is not an axis compare knows (fix: one of {', '.join(AXES)})")


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
    framework: str | None = None  # the run's backend (sweep provenance, summary column, or --group)
    seed: int | None = None  # the run's training seed (its spec's seed, from the training run's records)
    checkpoint_hash: str | None = None
    # the run's start (the curator weights its first step trained from: sweep.json's run_start, the model its
    # resolved config names); None: not recorded (older sweeps, published summaries)
    run_start: str | None = None
    run_start_hash: str | None = None  # sweep.json's run_start_hash: the start's weights; None: not recorded by hash
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
    executor: str | None = None  # the sweep's executor (its name: `sweep --executor`, or executor.model)
    # were stream r of every arm played with one shared plan (order, executor and curator seeds; sweep.json's
    # stream_plans)? Then the streams are blocks crossed with the arms (compare's blocked analysis)
    crossed: bool = False
    crossed_why: str = ""
    stream_orders: list[list[int]] | None = None  # synthetic crossed tables: stream r's order (game indices)
    # every game list the sweep's arms carried (compare.load.game_lists): {games_hash, arms, in_manifest, used}
    game_lists: list[dict] = field(default_factory=list)


@dataclass
class SummaryTable:
    """Published per-checkpoint counts (no per-game outcomes)."""

    arms: list[ArmInfo]
    source: str = ""
    executor: str | None = None  # the executor column's value (several summaries with --across executor)
