"""Synthetic sweeps (tests, benches, docs): a known truth to check the statistics against."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from twinrun.core.compare.model import ArmInfo, CompareError, GameTable, SummaryTable


def synthetic_game_table(shapes: dict[str, Sequence[float]], *, n_games: int = 140, steps: Sequence[int] | None = None,
                         base_logit: float = 0.0, game_sd: float = 1.5, seed: int = 0,
                         unmeasured_share: float = 0.0, streams: int = 1, stream_sd: float = 0.0,
                         first_writes: int = 0, baseline_streams: int | None = None, drift_sd: float = 0.0,
                         baseline: str = "baseline", crossed: bool = False, block_sd: float = 0.0,
                         shared_block_sd: float = 0.0) -> GameTable:
    """A sweep with known truth, with the structure of a real one: R = `streams` streams per arm, all on the same
    games. The outcome of game g in stream s of run r at checkpoint k is
    Bernoulli(sigmoid(base_logit + d_g + shapes[r][k] + w_r[k] + u_{r,k,s} [g after the first writes])):
    game difficulty d_g ~ N(0, game_sd) shared by all arms (that is what makes pairing matter); a stream effect
    u ~ N(0, stream_sd) on the logit (the skills a stream writes first lift or sink its later games), applied from
    the stream's `first_writes`-th game on in its own random order (0: every game); a drift w_r, a random walk over
    the checkpoints with steps N(0, drift_sd), of the run's own (a seed's drifting curve). The baseline has no skill
    memory: `baseline_streams` (default `streams`) streams of shape 0 without a stream effect. Stream s of an arm
    is replicate s, named ``ARM#r{s}`` for s >= 1. A share of rows is made unmeasured at random.

    `crossed` plays the streams as `sweep --streams` does, with one plan per stream shared by every arm: stream s
    of every arm plays the same order (its first writes are the same games), and its stream effect is a block
    b_{r,s} ~ N(0, block_sd) of run r's stream s, shared by all the run's checkpoints, plus a block
    v_s ~ N(0, shared_block_sd) shared by every run's stream s, plus the cell-specific u ~ N(0, stream_sd). The
    table is marked crossed (as sweep.json's stream_plans mark a real sweep). Without `crossed` the draws are
    those of earlier versions, seed for seed.
    """
    if streams < 1:
        raise CompareError(f"streams: {streams} (fix: 1 or more)")
    if (block_sd > 0 or shared_block_sd > 0) and not crossed:
        raise CompareError("block_sd/shared_block_sd: blocks need crossed streams (fix: crossed=True)")
    rng = np.random.default_rng(seed)
    # crossed: the blocks and the shared orders come from their own generator, so the rest stays as it was
    brng = np.random.default_rng([seed, 4242])
    orders = [brng.permutation(n_games) for _ in range(streams)] if crossed else []
    shared = brng.normal(0.0, shared_block_sd, streams) if crossed and shared_block_sd > 0 else np.zeros(streams)
    d = rng.normal(0.0, game_sd, n_games)
    k = len(next(iter(shapes.values()))) if shapes else 0
    steps = list(steps) if steps is not None else [10 * (i + 1) for i in range(k)]
    arms: list[ArmInfo] = []
    rows: list[np.ndarray] = []

    def play(shift: float, effect: float, stream: int | None = None) -> np.ndarray:
        after = np.ones(n_games, dtype=bool)
        if first_writes > 0:
            after[(orders[stream] if stream is not None else rng.permutation(n_games))[:first_writes]] = False
        p = 1.0 / (1.0 + np.exp(-(base_logit + d + shift + effect * after)))
        y = (rng.random(n_games) < p).astype(np.float64)
        y[rng.random(n_games) < unmeasured_share] = np.nan
        return y

    def add(info: ArmInfo, shift: float, effect: float, stream: int | None = None) -> None:
        y = play(shift, effect, stream)
        info.n_unmeasured = int(np.isnan(y).sum())
        arms.append(info)
        rows.append(y)

    def suffix(s: int) -> str:
        return f"#r{s}" if s else ""

    for s in range(streams if baseline_streams is None else baseline_streams):
        add(ArmInfo(f"{baseline}{suffix(s)}", None, None, s, "baseline"), 0.0, 0.0)
    for run, shape in shapes.items():
        if len(shape) != len(steps):
            raise CompareError(f"shapes[{run!r}]: {len(shape)} values for {len(steps)} steps (fix: one per step)")
        drift = np.cumsum(rng.normal(0.0, drift_sd, len(steps))) if drift_sd > 0 else np.zeros(len(steps))
        block = shared + (brng.normal(0.0, block_sd, streams) if block_sd > 0 else 0.0)
        for step, v, w in zip(steps, shape, drift):
            for s in range(streams):
                add(ArmInfo(f"{run}@{step}{suffix(s)}", run, int(step), s), float(v + w),
                    (float(rng.normal(0.0, stream_sd)) if stream_sd > 0 else 0.0) + (float(block[s]) if crossed else 0.0),
                    s if crossed else None)
    ids = [f"game-{i:04d}" for i in range(n_games)]
    table = GameTable(arms, np.vstack(rows), ids, sweep_id=f"synthetic-{seed}", games_hash=f"synthetic-{n_games}")
    if crossed and streams >= 2:
        table.crossed, table.crossed_why = True, f"synthetic: {streams} streams played with shared plans"
        table.stream_orders = [o.tolist() for o in orders]
    return table


# ------------------------------------------------------------------------------------------------------------
# Planted cases: two runs "a" and "b" whose truth is known (logit-scale shifts per checkpoint)

SHAPE = (0.0, 1.0, 0.3, -0.6, 0.6, 1.2, -0.3, 0.2)  # ups and downs over 8 checkpoints
_TREND = tuple(-1.2 + 2.4 * i / 7 for i in range(8))  # a shared rise
_WIGGLE = tuple(0.3 if i % 2 else -0.3 for i in range(8))
_RISE = tuple(-0.6 + 1.5 * i / 7 for i in range(8))

PLANTED: dict[str, tuple[tuple[float, ...], tuple[float, ...], str]] = {
    # name: (truth of run a, truth of run b, what a correct verdict is)
    "same-shape": (SHAPE, SHAPE, "agree (with the games to show it; no evidence below that)"),
    "opposite": (SHAPE, tuple(-s for s in SHAPE), "differ"),
    "flat": ((0.0,) * 8, (0.0,) * 8, "no evidence"),
    "amplitude-0.3": (SHAPE, tuple(0.3 * s for s in SHAPE), "not agree (an amplitude other than 1 is a profile difference)"),
    "shared-trend-opposite-wiggles": (tuple(t + w for t, w in zip(_TREND, _WIGGLE)),
                                      tuple(t - w for t, w in zip(_TREND, _WIGGLE)), "not agree"),
    "final-collapse": (_RISE, _RISE[:-1] + (-0.9,), "not agree"),
    "level-offset": (SHAPE, tuple(s + 0.5 for s in SHAPE), "agree (with the games to show it; no evidence below that)"),
    "shaped-vs-flat": (SHAPE, (0.0,) * 8, "differ (a flat curve is not one amplitude of a shaped one)"),
}


# Cases for crossed streams (issue 42): small shape differences that only the blocked analysis can see
PLANTED_CROSSED: dict[str, tuple[tuple[float, ...], tuple[float, ...], str]] = {
    "opposite-0.3": (tuple(0.3 * s for s in SHAPE), tuple(-0.3 * s for s in SHAPE), "differ"),
}


def planted_table(case: str, *, n_games: int = 140, seed: int = 0, game_sd: float = 1.5,
                  frameworks: tuple[str, str] | None = None, streams: int = 1, stream_sd: float = 0.0,
                  first_writes: int = 0, crossed: bool = False, block_sd: float = 0.0,
                  shared_block_sd: float = 0.0) -> GameTable:
    """A synthetic sweep of one planted case (see PLANTED): runs "a" and "b", 8 checkpoints, a baseline, each
    played as `streams` streams with a stream effect of sd `stream_sd` on the logit (synthetic_game_table).
    `frameworks` labels the two runs' framework (seed = the draw's seed) as a sweep would record them."""
    cases = {**PLANTED, **PLANTED_CROSSED}
    if case not in cases:
        raise CompareError(f"case: {case!r} is not a planted case (fix: one of {', '.join(cases)})")
    a, b, _ = cases[case]
    table = synthetic_game_table({"a": a, "b": b}, n_games=n_games, seed=seed, game_sd=game_sd, streams=streams,
                                 stream_sd=stream_sd, first_writes=first_writes, crossed=crossed, block_sd=block_sd,
                                 shared_block_sd=shared_block_sd)
    if frameworks:
        for arm in table.arms:
            if arm.run is not None:
                arm.framework, arm.seed = frameworks[0 if arm.run == "a" else 1], seed
    return table


def write_sweep(table: GameTable, folder: str | Path, *, executor: str | None = None) -> Path:
    """Write a synthetic table as a sweep folder (``arms/<arm>.jsonl``, the rows `twinrun sweep` writes), so the
    CLI reads it like a real sweep. A crossed table also gets the sweep.json part that says so: one plan per
    stream (`streams`, `stream_plans[r]` with its order and seeds), and each row's `position` in its stream."""
    import json

    from twinrun.core.records import JsonlWriter, provenance
    from twinrun.core.sweeps.sweep import EvalRecord

    out = Path(folder)
    n = table.outcomes.shape[1]
    orders = table.stream_orders if table.crossed and table.stream_orders else None
    if orders is not None:
        out.mkdir(parents=True, exist_ok=True)
        plans = [{"stream": r, "order_seed": r or None, "order": list(o), "executor_seeds": [1000 * r + g for g in range(n)],
                  "curator_seed": r} for r, o in enumerate(orders)]
        (out / "sweep.json").write_text(json.dumps({"sweep_id": table.sweep_id or "synthetic", "streams": len(orders),
                                                    "stream_plans": plans, "arms": []}), encoding="utf-8")
    position = [{g: i + 1 for i, g in enumerate(o)} for o in orders] if orders is not None else None
    for i, arm in enumerate(table.arms):
        with JsonlWriter(out / "arms" / f"{arm.name}.jsonl", fsync=False) as w:
            for g in range(n):
                y = table.outcomes[i, g]
                w.write(EvalRecord(
                    game_id=table.game_ids[g], task_type="synthetic",
                    outcome="unmeasured" if np.isnan(y) else ("success" if y == 1.0 else "failure"),
                    unmeasured_reason="synthetic" if np.isnan(y) else None, sweep_id=table.sweep_id or "synthetic",
                    arm=arm.name, role="baseline" if arm.role == "baseline" else "checkpoint", run=arm.run,
                    checkpoint_step=arm.checkpoint, replicate=arm.replicate, game_index=g, n_games=n,
                    games_hash=table.games_hash or "synthetic", run_seed=arm.seed, executor=executor,
                    provenance=provenance(backend=arm.framework, checkpoint_hash=arm.checkpoint_hash),
                    position=position[arm.replicate][g] if position is not None else None,
                ))
    return out


def summary_table(table: GameTable, *, baseline: str = "baseline") -> SummaryTable:
    """The published-summary form of a synthetic table: per arm n, successes and the discordant b, c against the
    baseline over games measured in both (replicates left out)."""
    names = [a.name for a in table.arms]
    base = table.outcomes[names.index(baseline)]
    arms: list[ArmInfo] = []
    for arm, y in zip(table.arms, table.outcomes):
        if arm.replicate:
            continue
        if arm.name == baseline:
            m = ~np.isnan(y)
            arms.append(ArmInfo(baseline, None, None, role="baseline", n=int(m.sum()), successes=int(np.nansum(y))))
            continue
        m = ~np.isnan(y) & ~np.isnan(base)
        arms.append(ArmInfo(arm.name, arm.run, arm.checkpoint, framework=arm.framework, seed=arm.seed,
                            n=int(m.sum()), successes=int((y[m] == 1).sum()),
                            b=int(((y == 1) & (base == 0) & m).sum()), c=int(((y == 0) & (base == 1) & m).sum())))
    return SummaryTable(arms, "synthetic")


def write_summary_csv(table: GameTable, path: str | Path, *, baseline: str = "baseline",
                      executor: str | None = None, append: bool = False) -> Path:
    """Write :func:`summary_table` as a published-summary CSV (with an executor column when `executor` is given;
    `append` adds rows, for a second executor, under the header already written)."""
    cols = ["run", "checkpoint", "n", "successes", "b", "c", "framework", "seed"] + (["executor"] if executor else [])
    lines = [] if append else [",".join(cols)]
    for a in summary_table(table, baseline=baseline).arms:
        row = [a.run or baseline, "" if a.checkpoint is None else str(a.checkpoint), str(a.n), str(a.successes),
               "" if a.b is None else str(a.b), "" if a.c is None else str(a.c), a.framework or "",
               "" if a.seed is None else str(a.seed)]
        lines.append(",".join(row + ([executor] if executor else [])))
    p = Path(path)
    with open(p, "a" if append else "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return p
