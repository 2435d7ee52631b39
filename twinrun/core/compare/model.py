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

    # each field's metadata "help" is its help on the CLI too (twinrun/commands/_options.py builds compare's options
    # from these fields): write a default or its help here, once
    alpha: float = field(default=0.05, metadata={"help": "significance level of every test and verdict"})
    power: float = field(default=0.8, metadata={"help": "power for the minimum detectable effect and the games to "
                                                         "decide"})
    level: float = field(default=0.95, metadata={"help": "confidence level of the intervals"})
    n_boot: int = field(default=10_000, metadata={"help": "bootstrap resamples"})
    seed: int = field(default=0, metadata={"help": "bootstrap seed"})
    max_unmeasured_share: float = field(default=0.1, metadata={"help": "flag arms with a larger unmeasured share"})
    family: str = field(default="run", metadata={"help": "multiplicity families: run (one per run), all (every "
                                                         "checkpoint arm together) or custom"})
    # custom families: every checkpoint arm must match one of the globs
    family_map: tuple[tuple[str, str], ...] = field(default=(), metadata={
        "help": "custom multiplicity families, (NAME, GLOB) pairs: an arm whose name matches GLOB is in family NAME "
                "(first match wins)"})
    rho0: float = field(default=0.5, metadata={"help": "'agree' needs the lower CI bound of r above this"})
    # success-rate units (0.05 = 5 pp); the CLI shows percentage points
    delta: float = field(default=0.05, metadata={"help": "equivalence margin: 'agree' needs the centred curves "
                                                          "within +-delta at every checkpoint"})
    groups: tuple[tuple[str, str, int | None], ...] = field(default=(), metadata={
        "help": "which framework and, where known, training seed a run is, overriding the sweep's records"})
    across: str | None = field(default=None, metadata={"help": "several sweeps (or an executor column) that differ "
                                                                "in this axis: executor"})
    # the intra-stream correlation the user states (a pilot's value) for one-stream-per-arm inputs: every variance
    # is inflated by DEFF = 1 + (m - 1) rho
    stream_icc: float | None = field(default=None, metadata={
        "help": "intra-stream correlation RHO from a pilot sweep with streams, for inputs with one stream per arm "
                "(old sweeps, published summaries): every variance gains the stream variance, a design effect of "
                "1 + (games - 1) RHO; without it one stream decides no shape (docs/compare.md)"})
    # crossed streams are blocks crossed with the arms (the blocked analysis); nested is valid where they were
    # crossed, and less powerful; a stated crossing is checked against the rows' positions (load.stated_crossing)
    stream_design: str = field(default="auto", metadata={
        "help": "auto: streams played with shared plans (sweep.json's stream_plans) are blocks, the rest nested "
                "replicates; nested: nested replicates whatever the manifest says; crossed: you state that stream r "
                "of every arm played one common order with shared seeds (rows of another harness), refused where the "
                "rows' positions contradict it (docs/streams.md)"})
    # None: one list, or a refusal (compare.load.game_lists)
    games_hash: str | None = field(default=None, metadata={
        "help": "HASH: the game list to compare on where a sweep's arms carry more than one (or another than "
                "sweep.json's): the arms played on HASH are compared, the others left out and named in the report; "
                "without it such arms are refused (docs/compare.md)"})
    # the games per stream stay as played: a stream is the held-out games in order through one repository, so its
    # length is part of what is measured
    max_streams: int = field(default=64, metadata={
        "help": "the most streams per arm that 'what would decide' may name (at the games per stream played, the "
                "protocol's)"})
    # pairing reads the provenance (frameworks.seed_pairing)
    seed_design: str = field(default="auto", metadata={
        "help": "auto: seed i's runs pair across two groups where they record the same seed and start under shared "
                "stream plans (tested within seed), else seeds nested in groups; paired or independent force it "
                "(docs/compare.md, Seeds pair)"})

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
