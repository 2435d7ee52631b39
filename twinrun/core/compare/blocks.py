"""Streams as blocks (pure: arrays in, numbers out): the randomized complete block analysis of crossed streams.

`sweep --streams R` plays stream r of every arm with the same game order, executor seeds and curator seed
(`stream_plans[r]` in sweep.json): stream r is a block crossed with every checkpoint of every run (common random
numbers). Part of a stream's luck (which game comes first, which skill gets written early) is then shared by every
checkpoint of a run. The model for one run's stream lifts, checkpoint k, stream r:

    y_kr = mu_k + b_r + e_kr,   b_r ~ (0, s2_block) the run's stream-r block,  e_kr ~ N(0, s2_e) the rest

(e holds the cell-specific stream luck and the game noise of a stream's rate). Per run this is a two-way layout
checkpoint x stream without replication, the randomized complete block design (Montgomery ch. 4): the residual
mean square after checkpoint and stream effects has (K - 1)(R - 1) df and estimates s2_e exactly (normal e,
balanced), whatever the blocks are. Blocks cancel in every contrast between a run's checkpoints and so in the
run x checkpoint interaction (each run's blocks are its own, which also absorbs a block shared across runs):
those are tested against s2_e with its exact df. A run's level (one arm's lift over the baseline) keeps the block:
its error stays the within-cell variance between streams (s2_block + s2_e, K (R - 1) df), as in the nested model.

Why an exact blocked ANOVA and not a mixed model: the sweep is balanced by construction (every stream of every
arm plays the same games), so the ANOVA's F tests are exact with known df, need no iterative fit (a compare draw
costs ~0.3 s and calibration runs thousands), and equal the REML mixed model's tests in the balanced case. An
incomplete grid (a stream arm with no measured game) falls back to the nested analysis, which stays valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class BlockFit:
    """One run's checkpoint x stream layout y[K, R] of stream lifts (complete). means[K] checkpoint means;
    ss_e/df_e the residual after checkpoints and blocks; ss_b/df_b the blocks (streams); ss_w/df_w the nested
    within-cell sum of squares (= ss_b + ss_e)."""

    means: np.ndarray
    k: int
    r: int
    ss_e: float
    df_e: int
    ss_b: float
    df_b: int

    @property
    def ss_w(self) -> float:
        return self.ss_b + self.ss_e

    @property
    def df_w(self) -> int:
        return self.df_b + self.df_e


def fit_run(y: np.ndarray) -> BlockFit | None:
    """y[K, R]: stream lifts of one run, checkpoint by stream id (NaN: not measured). None when the grid is not
    complete or has fewer than 2 checkpoints or 2 streams (no block can be separated)."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2 or not np.isfinite(y).all():
        return None
    k, r = y.shape
    row = y.mean(axis=1, keepdims=True)  # checkpoints
    col = y.mean(axis=0, keepdims=True)  # blocks (streams)
    grand = float(y.mean())
    ss_e = float(((y - row - col + grand) ** 2).sum())
    ss_b = float(k * ((col - grand) ** 2).sum())
    return BlockFit(row[:, 0], k, r, ss_e, (k - 1) * (r - 1), ss_b, r - 1)


def block_share(fits: list[BlockFit], level: float = 0.95) -> dict[str, Any] | None:
    """The share of the between-stream variance of a cell that is shared by all checkpoints of a run (the block):
    share = s2_block / (s2_block + s2_e), from F = MS_block / MS_E pooled over runs, s2_block = (MS_block - MS_E) / K.
    F / (1 + K theta) ~ F(df_b, df_e) with theta = s2_block / s2_e (exact for normal effects and balanced runs of
    equal K; K is the df-weighted mean otherwise), hence the interval. Also the nested and the blocked error SD,
    so a reader sees what the blocks remove."""
    fits = [f for f in fits if f.df_e > 0]
    if not fits:
        return None
    ss_e, df_e = sum(f.ss_e for f in fits), sum(f.df_e for f in fits)
    ss_b, df_b = sum(f.ss_b for f in fits), sum(f.df_b for f in fits)
    kbar = sum(f.k * f.df_b for f in fits) / df_b
    ms_e, ms_b = ss_e / df_e, ss_b / df_b
    # no error left after the blocks, up to rounding (stream lifts equal at every checkpoint of a run give
    # ss_e ~ 1e-32, not 0): an F against it would call any rounding a difference
    if ms_e <= 1e-12 * (ms_b + ms_e) or ms_e <= 0:
        return None
    f = ms_b / ms_e

    def share_of(fv: float) -> float:
        theta = max((fv - 1.0) / kbar, 0.0)
        return theta / (1.0 + theta)

    a = (1 - level) / 2
    s2_block = max(ms_b - ms_e, 0.0) / kbar
    return {"share": share_of(f), "ci": [share_of(f / stats.f.ppf(1 - a, df_b, df_e)),
                                         share_of(f / stats.f.ppf(a, df_b, df_e))],
            "level": level, "f_statistic": f, "df_blocks": df_b, "df_residual": df_e,
            "p_value": float(stats.f.sf(f, df_b, df_e)), "sigma2_block": s2_block, "sigma2_residual": ms_e,
            "sd_nested": float(np.sqrt((ss_b + ss_e) / (df_b + df_e))), "df_nested": df_b + df_e,
            "sd_blocked": float(np.sqrt(ms_e)), "df_blocked": df_e, "n_runs": len(fits),
            "method": ("checkpoint x stream two-way layout of stream lifts within each run (randomized complete "
                       "blocks), pooled over runs; share = s2_block / (s2_block + s2_residual), exact F interval")}


def crossed_from_manifest(plan: dict[str, Any] | None, replicates: set[int],
                          positions: dict[tuple[str, int], dict[int, int]] | None = None) -> tuple[bool, str]:
    """Were the streams played crossed with the arms? From sweep.json: a plan per stream (`stream_plans[r]`: one
    order, executor seeds and curator seed shared by every arm's stream r) covering every stream in the rows;
    where rows carry their `position`, each arm's stream r must have played the games in stream r's order.
    positions: (arm, replicate) -> game_index -> position (1-based). -> (crossed, why)."""
    if plan is None:
        return False, "no sweep.json beside the arm files: streams taken as nested replicates"
    plans = {int(sp["stream"]): sp for sp in plan.get("stream_plans") or [] if "stream" in sp}
    if len(replicates) < 2:
        return False, "one stream per arm"
    missing = sorted(replicates - set(plans))
    if missing:
        return False, (f"sweep.json has no stream plan for stream(s) {missing}: streams taken as nested "
                       "replicates")
    for (arm, rep), pos in (positions or {}).items():
        order = plans[rep].get("order") or []
        want = {g: i + 1 for i, g in enumerate(order)}
        bad = [g for g, p in pos.items() if g in want and want[g] != p]
        if bad:
            return False, (f"arm {arm!r} did not play stream {rep}'s order (game {bad[0]} at position "
                           f"{pos[bad[0]]}, plan {want[bad[0]]}): streams taken as nested replicates")
    return True, (f"sweep.json stream_plans: stream r of every arm shares its order and seeds "
                  f"({len(replicates)} streams): streams are blocks crossed with the arms")


@dataclass(frozen=True)
class Design:
    """How a comparison analyses its streams: blocked (crossed streams, complete grids) or nested; the runs' block
    fits (run -> BlockFit, runs with >= 2 checkpoints), why, and the block share for the report (None: nested)."""

    blocked: bool
    summary: dict[str, Any] | None
    why: str
    fits: dict[str, BlockFit] = field(default_factory=dict)


def choose(crossed: bool, crossed_why: str, stream_design: str, run_cells: dict[str, list[dict[int, float]]],
           level: float) -> Design:
    """run_cells: run -> its checkpoint cells in step order, each {stream id: stream lift} (NaN: unmeasured).
    Blocked when the sweep's streams are crossed (the manifest), the user did not ask for the nested analysis,
    and every run with >= 2 checkpoints has a complete checkpoint x stream grid of >= 2 streams."""
    if not crossed:
        return Design(False, None, crossed_why or "streams not played with shared plans: nested replicates")
    fits: dict[str, BlockFit] = {}
    incomplete = []
    for run, cells in run_cells.items():
        if len(cells) < 2:
            continue  # one checkpoint: no contrast within the run, its level keeps the nested variance
        reps = sorted({r for c in cells for r in c})
        fit = fit_run(np.array([[c.get(r, np.nan) for r in reps] for c in cells]))
        if fit is None:
            incomplete.append(run)
        else:
            fits[run] = fit
    summary = block_share(list(fits.values()), level)
    if summary is not None:
        summary["used"] = False
    if incomplete:
        why = (f"{crossed_why}; but run(s) {', '.join(incomplete)} lack a stream at some checkpoint (an incomplete "
               "block): nested analysis")
        return Design(False, summary, why)
    if summary is None and fits:
        # the stream blocks carry all of the between-stream variance (every checkpoint of a run scored the same in
        # each stream, as a curve that has not moved does): no error is left to test a contrast against
        return Design(False, None, f"{crossed_why}; every checkpoint of a run scored the same in each stream (the "
                      "stream blocks carry all the variance between streams, none is left after them): nested analysis")
    if summary is None:
        return Design(False, None, f"{crossed_why}; no run has 2 checkpoints x 2 streams: nested analysis")
    if stream_design == "nested":
        return Design(False, summary, f"{crossed_why}; the nested analysis was asked for (stream_design nested)")
    summary["used"] = True
    return Design(True, summary, crossed_why, fits)
