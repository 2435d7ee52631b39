"""The comparison on per-game outcomes (every statistic).

The hypotheses are (run, checkpoint) cells; a cell holds one arm per stream (the arm's `replicate`, 0..R-1, the
sweep's stream id). With >= 2 streams in a cell every statistic about curves uses the between-stream variance
(:mod:`.streams`); with one stream the paired bootstrap over games is conditional on the stream, and shape claims
need a stated intra-stream correlation (``CompareSettings.stream_icc``). The baseline's streams (``NAME``,
``NAME#r1``, ...) are pooled game by game (see :mod:`.streams` for why)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats

from twinrun.core.compare import blocks as blk
from twinrun.core.compare import families, frameworks, shape
from twinrun.core.compare import power as pw
from twinrun.core.compare import reference
from twinrun.core.compare import stats as cs
from twinrun.core.compare import streams as st
from twinrun.core.compare.curves import Curve, PairNoise, finish_pairs, pair_core, run_curves, shared_steps
from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings, GameTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, clean, settings_dict


def split_baseline(arms: list[ArmInfo], baseline: str) -> int:
    names = [a.name for a in arms]
    if baseline not in names:
        raise CompareError(
            f"--baseline: {baseline!r} is not an arm here (fix: one of {', '.join(sorted(names)[:8])})"
        )
    return names.index(baseline)


@dataclass
class Analysis:
    """What a comparison computed besides its JSON result: the lifts and their resamples by arm (for comparisons
    across sweeps)."""

    result: dict[str, Any]
    arms: list[ArmInfo]
    lift: np.ndarray  # [A]
    boot_lift: np.ndarray  # [R, A]
    games_hash: str | None


def compare_games(table: GameTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """All statistics on per-game outcomes (see the package docstring)."""
    return analyse_games(table, baseline, settings).result


def baseline_streams(arms: list[ArmInfo], baseline: str) -> list[int]:
    """Indices of the baseline's streams: the arm named `baseline` and its replicates (``baseline#r1``, ...)."""
    split_baseline(arms, baseline)
    return [i for i, a in enumerate(arms)
            if a.name == baseline or (a.role == "baseline" and a.run is None and a.name.split("#r")[0] == baseline)]


def _plans(table: GameTable) -> tuple[bool | None, str]:
    """Did every arm play stream r under one plan (a condition for seeds to pair across groups)? Crossed streams:
    yes; one stream per arm: every arm played the sweep's own order with stream 0's seeds; no sweep.json: not
    recorded; otherwise the manifest's reason."""
    if table.crossed:
        return True, table.crossed_why
    if table.crossed_why == "one stream per arm":
        return True, "one stream per arm: every arm played the sweep's own order and seeds"
    if not table.crossed_why or table.crossed_why.startswith("no sweep.json"):
        return None, "no sweep.json beside the arm files"
    return False, table.crossed_why


@dataclass
class _StreamArms:
    """The arms against the baseline stream by stream, and their (run, checkpoint) cells: what every stream mode
    starts from. Per stream arm, conditional on its stream: the paired lift over the pooled baseline and the exact
    McNemar against the baseline stream of the same id (else stream 0)."""

    base_rows: list[int]  # the baseline's streams (rows of the table)
    yb: np.ndarray  # [S, G] their outcomes
    bpool: np.ndarray  # [G] the baseline pooled over its streams, game by game (NaN: none measured)
    arms: list[ArmInfo]  # the other arms, one per stream (groups applied)
    ya: np.ndarray  # [A, G] their outcomes
    w: np.ndarray  # [B, G] bootstrap counts of each game
    ones: np.ndarray  # [1, G] the point estimate's weights
    mask: np.ndarray  # [A, G] measured in the arm and the pooled baseline
    diff: np.ndarray  # [A, G] arm - pooled baseline (0 where not measured)
    lift_arm: np.ndarray  # [A]
    boot_arm: np.ndarray  # [B, A]
    b_arm: np.ndarray
    c_arm: np.ndarray
    n_pairs: np.ndarray
    p_cond: np.ndarray
    keys: list[tuple[str, int | None]]  # the cells (run, checkpoint) in run and step order
    cells: list[list[int]]  # each cell's stream arms (indices into arms), by stream id
    reps: list[ArmInfo]  # a cell under its own name (no stream suffix)
    n_str: np.ndarray  # measured streams per cell
    m_games: float  # games per stream arm measured against the baseline (mean)

    @property
    def n_games(self) -> int:
        return int(self.ya.shape[1])


def _stream_arms(table: GameTable, baseline: str, settings: CompareSettings, rng: np.random.Generator) -> _StreamArms:
    """The stream arms against the baseline (see _StreamArms); the generator's first draws are the games' bootstrap
    counts."""
    base_rows = baseline_streams(table.arms, baseline)
    y = table.outcomes
    yb = y[base_rows]
    n_games = y.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a game no baseline stream measured: NaN, as wanted
        bpool = np.nanmean(yb, axis=0)
    others = [i for i in range(len(table.arms)) if i not in base_rows]
    arms = [table.arms[i] for i in others]
    frameworks.apply_groups(arms, settings)
    ya = y[others]
    w = cs.index_counts(cs.resample_indices(n_games, settings.n_boot, rng), n_games)
    ones = np.ones((1, n_games))
    mask = ~np.isnan(ya) & ~np.isnan(bpool)[None, :]
    diff = np.where(mask, np.nan_to_num(ya) - np.nan_to_num(bpool)[None, :], 0.0)
    lift_arm = cs.weighted_means(diff, mask, ones)[0]
    base_rep = {table.arms[i].replicate: i for i in base_rows}
    matched = np.vstack([y[base_rep.get(a.replicate, base_rows[0])] for a in arms]) if arms else np.zeros((0, n_games))
    pcs = [cs.paired_counts(ya[j:j + 1], matched[j]) for j in range(len(arms))]
    b_arm = np.array([int(p.b[0]) for p in pcs])
    c_arm = np.array([int(p.c[0]) for p in pcs])
    keys, cells = _cells(arms)
    return _StreamArms(
        base_rows=base_rows, yb=yb, bpool=bpool, arms=arms, ya=ya, w=w, ones=ones, mask=mask, diff=diff,
        lift_arm=lift_arm, boot_arm=cs.weighted_means(diff, mask, w), b_arm=b_arm, c_arm=c_arm,
        n_pairs=np.array([int(p.n_pairs[0]) for p in pcs]), p_cond=cs.mcnemar_exact_many(b_arm, c_arm),
        keys=keys, cells=cells, reps=[_named(arms[c[0]]) for c in cells],
        n_str=np.array([int(np.isfinite(lift_arm[c]).sum()) for c in cells], dtype=np.int64),
        m_games=float(np.mean(mask.sum(axis=1))) if arms else float(n_games))


def _cells(arms: list[ArmInfo]) -> tuple[list[tuple[str, int | None]], list[list[int]]]:
    """The (run, checkpoint) cells in run and step order, and each cell's stream arms by stream id."""
    cell_of: dict[tuple[str, int | None], list[int]] = {}
    for j, a in enumerate(arms):
        if a.role == "checkpoint" and a.run is not None:
            cell_of.setdefault((a.run, None if a.checkpoint is None else int(a.checkpoint)), []).append(j)
    keys = sorted(cell_of, key=lambda k: (k[0], k[1] is None, k[1] or 0))
    return keys, [sorted(cell_of[k], key=lambda j: arms[j].replicate) for k in keys]


@dataclass
class _CellStats:
    """Each cell's lift against the baseline, its draws, test, interval and minimum detectable lift, as one stream
    mode computes them."""

    lift: np.ndarray  # [K]
    boot: np.ndarray  # [B, K] draws of the lifts (game resamples, or the stream model's parametric draws)
    pvals: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    mde: np.ndarray
    test: str
    ci_method: str
    mde_method: str
    models: dict[str, st.CellModel] = field(default_factory=dict)  # streams: run -> its cells' stream model
    design: blk.Design | None = None  # streams: nested or crossed (blocked)
    su2: float = 0.0  # one stream with a stated ICC: the stream variance of one arm's lift


def _nested_models(sa: _StreamArms) -> dict[str, st.CellModel]:
    """Streams as nested replicates: run -> the stream model of its cells; a run played with one stream among runs
    with several takes the others' pooled variance."""
    models: dict[str, st.CellModel] = {}
    for run in sorted({k[0] for k in sa.keys}):
        idx = [i for i, k in enumerate(sa.keys) if k[0] == run]
        models[run] = st.cell_model([sa.lift_arm[sa.cells[i]][np.isfinite(sa.lift_arm[sa.cells[i]])] for i in idx])
    s2_all, df_all = st.pooled(list(models.values()))
    for run, model in models.items():
        if not model.ok:
            models[run] = st.CellModel(model.means, model.n, s2_all, df_all)
    return models


def _crossed_models(sa: _StreamArms, models: dict[str, st.CellModel], table: GameTable,
                    settings: CompareSettings) -> tuple[dict[str, st.CellModel], blk.Design]:
    """Crossed streams (sweep.json's shared stream plans): stream r is a block of each run; contrasts within a run
    are tested against the residual after the blocks, a cell's level keeps the nested variance. Where the design is
    not blocked (nested streams, or stated so) the nested models stand."""
    run_cells: dict[str, list[dict[int, float]]] = {}
    for i, key in enumerate(sa.keys):
        run_cells.setdefault(key[0], []).append({sa.arms[j].replicate: float(sa.lift_arm[j]) for j in sa.cells[i]})
    design = blk.choose(table.crossed, table.crossed_why, settings.stream_design, run_cells, settings.level)
    if design.blocked:
        models = dict(models)
        for run, fit in design.fits.items():
            nested = models[run]
            models[run] = st.CellModel(fit.means, nested.n, fit.ss_e / fit.df_e, fit.df_e,
                                       level_s2=nested.s2, level_df=nested.df, blocked=True)
    return models, design


def _streams_cells(sa: _StreamArms, table: GameTable, settings: CompareSettings, rng: np.random.Generator,
                   baseline_draws: tuple[np.ndarray, float, float], alpha_arm: np.ndarray) -> _CellStats:
    """Two or more streams per cell: each cell's lift tested against the variance between its streams (nested,
    or the residual after the stream blocks where they were crossed), plus the pooled baseline's."""
    models, design = _crossed_models(sa, _nested_models(sa), table, settings)
    base_dev, var_b, df_b = baseline_draws
    k = len(sa.cells)
    lift, pvals, se, dfs = (np.full(k, np.nan) for _ in range(4))
    boot = np.full((settings.n_boot, k), np.nan)
    for run, model in models.items():
        idx = np.array([i for i, key in enumerate(sa.keys) if key[0] == run])
        lift[idx] = model.means
        boot[:, idx] = st.draw_means(model, settings.n_boot, rng) - base_dev[:, None]
        va = model.s2_level / np.maximum(model.n, 1)  # a lift keeps the block: the within-cell variance
        _, dfs[idx], pvals[idx] = st.welch_t(model.means, va, model.df_level, var_b, df_b)
        se[idx] = np.sqrt(va + var_b)
    # the interval is the Welch test's own (lift +- t(df) se), so it excludes 0 exactly when p < 1 - level: the
    # parametric draws (kept for r and the peak, which need joint draws) gave [-16, +61] pp beside p 0.04 on the
    # demo, their 2-stream baseline's variance drawn at 1 degree of freedom where Welch pools the df
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(1 - (1 - settings.level) / 2, dfs) * se
    return _CellStats(
        lift, boot, pvals, lift - half, lift + half, st.mde_t(se, dfs, alpha_arm, settings.power),
        test=("Welch t of the cell's stream lifts against 0 (between-stream variance pooled over the run's cells, "
              "plus the pooled baseline's)"),
        ci_method="Welch t interval of the cell's stream lifts (lift +- t(df) se, the test's df and se)",
        mde_method="noncentral t power at the family's per-arm level, the stream variance as estimated",
        models=models, design=design)


def _one_stream_cells(sa: _StreamArms, settings: CompareSettings, rng: np.random.Generator,
                      alpha_arm: np.ndarray) -> _CellStats:
    """One stream per cell: the paired lift over games, conditional on the stream (exact McNemar); with a stated
    ICC, each arm's stream adds sigma2_u = rho / (1 - rho) sigma2_e to its lift (the baseline has no memory),
    drawn independently per arm, sigma2_e from the arms x games residual (games removed)."""
    rep_idx = np.array([c[0] for c in sa.cells], dtype=np.int64)
    lift = sa.lift_arm[rep_idx]
    boot = sa.boot_arm[:, rep_idx] if rep_idx.size else np.zeros((settings.n_boot, 0))
    stated = settings.stream_icc
    if stated is None:
        p_disc = (sa.b_arm + sa.c_arm)[rep_idx] / np.maximum(sa.n_pairs[rep_idx], 1)
        lo, hi = cs.percentile_ci(boot, settings.level)
        return _CellStats(
            lift, boot, sa.p_cond[rep_idx], lo, hi,
            pw.mde_mcnemar_exact(sa.n_pairs[rep_idx], p_disc, alpha_arm, settings.power),
            test="exact McNemar (binomial on b, c), conditional on the stream",
            ci_method="paired bootstrap over games, conditional on the stream",
            mde_method="exact McNemar power at the family's per-arm level, discordance as observed, conditional on "
                       "the stream")
    su2 = float(st.stated_stream_variance(stated, st.residual_game_variance(sa.ya[rep_idx])))
    boot_game = boot
    boot = boot + rng.normal(size=boot.shape) * math.sqrt(su2)
    sd = np.sqrt(np.nanvar(boot_game[:, :], axis=0, ddof=1) + su2) if rep_idx.size else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        pvals = 2.0 * stats.norm.sf(np.abs(lift) / sd)
    lo, hi = cs.percentile_ci(boot, settings.level)
    return _CellStats(
        lift, boot, pvals, lo, hi, (stats.norm.ppf(1 - alpha_arm / 2) + stats.norm.ppf(settings.power)) * sd,
        test=(f"z on the paired lift: bootstrap variance over games plus the stream variance of the stated ICC "
              f"{stated:g} (DEFF {st.deff(stated, sa.m_games):.2f})"),
        ci_method="paired bootstrap over games plus draws of the stated stream variance",
        mde_method="normal power at the family's per-arm level, the stated stream variance included", su2=su2)


def _unmeasured_flags(table: GameTable, sa: _StreamArms, settings: CompareSettings) -> list[str]:
    """One line per arm (baseline streams first) with too large an unmeasured share or games not played."""
    n_games = sa.n_games
    flags: list[str] = []
    for a in [*(table.arms[i] for i in sa.base_rows), *sa.arms]:
        share = a.n_unmeasured / max(n_games - a.n_missing, 1)
        if share > settings.max_unmeasured_share:
            flags.append(f"{a.name}: {a.n_unmeasured} of {n_games - a.n_missing} rows unmeasured ({share:.0%} > "
                         f"{settings.max_unmeasured_share:.0%}); its lift may be biased by which games failed")
        if a.n_missing:
            flags.append(f"{a.name}: {a.n_missing} of {n_games} games not played (sweep incomplete; rerun to resume)")
    return flags


def _baseline_summary(table: GameTable, sa: _StreamArms, baseline: str, level: float) -> dict[str, Any]:
    base_mask = ~np.isnan(sa.bpool)
    boot_base = cs.weighted_means(np.nan_to_num(sa.bpool)[None, :], base_mask[None, :], sa.w)[:, 0]
    blo, bhi = cs.percentile_ci(boot_base, level)
    return {"arm": baseline, "streams": len(sa.base_rows), "n_measured": int(base_mask.sum()),
            "n_unmeasured": sum(table.arms[i].n_unmeasured for i in sa.base_rows),
            "n_missing": min(table.arms[i].n_missing for i in sa.base_rows),
            "success_rate": float(np.nanmean(sa.bpool)) if base_mask.any() else float("nan"), "ci": [blo, bhi]}


def _stream_rows(sa: _StreamArms, flags: list[str], level: float) -> list[dict[str, Any]]:
    """One row per stream arm: its lift and McNemar conditional on its stream."""
    clo, chi = cs.percentile_ci(sa.boot_arm, level)
    rows = []
    for j, a in enumerate(sa.arms):
        measured = int((~np.isnan(sa.ya[j])).sum())
        rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "stream": a.replicate, "role": a.role,
            "n_measured": measured, "n_unmeasured": a.n_unmeasured, "n_missing": a.n_missing,
            "success_rate": float(np.nanmean(sa.ya[j])) if measured else None, "lift": sa.lift_arm[j],
            "lift_ci_conditional": [clo[j], chi[j]],
            "b": int(sa.b_arm[j]), "c": int(sa.c_arm[j]), "p_conditional": sa.p_cond[j],
            "flagged": any(f.startswith(a.name + ":") for f in flags),
        })
    return rows


def _cell_rows(sa: _StreamArms, cst: _CellStats, fams: list[str | None], adj: dict[str, np.ndarray],
               alpha_arm: np.ndarray, flags: list[str], base_rate: float, conditional: bool) -> list[dict[str, Any]]:
    """One row per cell (the result's "arms"): its lift, test, adjusted p-values and minimum detectable lift."""
    n_games, fam_size = sa.n_games, families.sizes(fams)
    rows = []
    for i, a in enumerate(sa.reps):
        js = sa.cells[i]
        measured = int(sum((~np.isnan(sa.ya[j])).sum() for j in js))
        unmeas = sum(sa.arms[j].n_unmeasured for j in js)
        missing = sum(sa.arms[j].n_missing for j in js)
        one = len(js) == 1
        rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "streams": len(js),
            "stream_arms": [sa.arms[j].name for j in js], "role": a.role,
            "framework": a.framework, "seed": a.seed, "checkpoint_hash": a.checkpoint_hash,
            "family": fams[i], "family_size": fam_size.get(fams[i]) if fams[i] else None,
            "n_games": n_games, "n_measured": measured, "n_unmeasured": unmeas, "n_missing": missing,
            "unmeasured_share": unmeas / max(len(js) * n_games - missing, 1),
            "flagged": any(f.startswith(sa.arms[j].name + ":") for j in js for f in flags),
            "n_pairs": int(sa.n_pairs[js].sum()),
            "success_rate": float(np.nanmean(sa.ya[js])) if measured else None,
            "baseline_rate_paired": base_rate,
            "lift": cst.lift[i], "lift_ci": [cst.lo[i], cst.hi[i]], "ci_method": cst.ci_method,
            "b": int(sa.b_arm[js[0]]) if one else None, "c": int(sa.c_arm[js[0]]) if one else None, "test": cst.test,
            "p_value": cst.pvals[i], "p_conditional_on_stream": conditional,
            "p_holm": adj["holm"][i], "p_bh": adj["bh"][i], "p_bonferroni": adj["bonferroni"][i],
            "mde": cst.mde[i], "mde_alpha": alpha_arm[i], "mde_method": cst.mde_method,
        })
    return rows


def _streams_run_shape(jj: np.ndarray, *, sa: _StreamArms, cst: _CellStats, level: float) -> dict[str, Any]:
    """A run's entries from its stream model (streams): the checkpoint effect, final vs peak on the model's draws,
    and a split-half test-retest of its curve."""
    if len(jj) < 2:
        return {}
    out: dict[str, Any] = {"checkpoint_effect": st.oneway_f(cst.models[sa.reps[jj[0]].run]), "cochran_q": None}  # type: ignore[index]
    res = shape.best_vs_final(cst.lift[jj], cst.boot[:, jj], level)
    out["final_vs_peak"] = {
        "method": "comparisons of the final checkpoint with every other, simultaneous one-sided max-t on the "
                  "stream model's draws", "estimate": None, "best_minus_final_lower": res["best_minus_final_lower"],
        "p_value": res["p_value"], "below_peak": res["below"]}
    arms, cells = sa.arms, sa.cells
    halves = [np.array([np.nanmean(sa.lift_arm[[j for j in cells[i] if arms[j].replicate % 2 == h]])
                        if any(arms[j].replicate % 2 == h for j in cells[i]) else np.nan for i in jj])
              for h in (0, 1)]
    ok = np.isfinite(halves[0]) & np.isfinite(halves[1])
    if ok.sum() >= 3:
        out["test_retest"] = {"r": float(cs.row_pearson(halves[0][ok], halves[1][ok])), "ci": [None, None],
                              "method": "split-half: the mean curve of even streams against that of odd "
                                        "streams", "checkpoints": [int(sa.reps[i].checkpoint) for i in jj[ok]]}
    return out


def _one_stream_run_shape(jj: np.ndarray, *, sa: _StreamArms, cst: _CellStats, settings: CompareSettings,
                          rng: np.random.Generator, fold: np.ndarray, fold_rng: np.random.Generator) -> dict[str, Any]:
    """A run's entries from its games (one stream): Cochran's Q over its checkpoints and the cross-fitted final vs
    peak, conditional on the stream or with the stated stream variance."""
    if len(jj) < 2:
        return {}
    stated = settings.stream_icc
    rep = np.array([sa.cells[i][0] for i in jj])
    q = cs.cochran_q(sa.ya[rep].T)
    if q is not None:
        q["conditional_on_stream"] = stated is None
        if stated is not None:
            deff = st.deff(stated, sa.m_games)
            q["statistic"] = q["statistic"] / deff
            q["p_value"] = float(stats.chi2.sf(q["statistic"], q["df"]))
            q["note"] = f"divided by the stated design effect {deff:.2f}"
    est = float(shape.crossfit_final_vs_peak(sa.diff[rep], sa.mask[rep], sa.ones, fold, fold_rng)[0])
    fb = shape.crossfit_final_vs_peak(sa.diff[rep], sa.mask[rep], sa.w, fold, fold_rng)
    if stated is not None:  # the final and the peak arm: two streams' variance
        fb = fb + rng.normal(size=fb.shape) * math.sqrt(2.0 * cst.su2)
    ci_lo, ci_hi = cs.percentile_ci(fb, settings.level)
    return {"cochran_q": q, "final_vs_peak": {
        "method": "cross-fitted: the peak picked on one half of the games, its lift taken on the other half, both "
                  "ways, averaged; paired bootstrap over games"
                  + (", conditional on the stream" if stated is None else ", plus the stated stream variance of two arms"),
        "estimate": est, "ci": [ci_lo, ci_hi], "below_peak": bool(ci_hi < 0)}}


def _streams_summary(sa: _StreamArms, cst: _CellStats, icc: dict[str, Any] | None, table: GameTable,
                     settings: CompareSettings) -> dict[str, Any]:
    """The result's "streams": the mode, the streams per cell, the correlation and the design."""
    stream_mode, stated, m_games = cst.design is not None, settings.stream_icc, sa.m_games
    deff_stated = st.deff(stated, m_games) if stated is not None else None
    design = cst.design if cst.design is not None else blk.Design(False, None, table.crossed_why)
    n_str, n_base = sa.n_str, len(sa.base_rows)
    return {
        "mode": "streams" if stream_mode else "one stream",
        "streams_per_cell": {"min": int(n_str.min()) if n_str.size else 0, "max": int(n_str.max()) if n_str.size else 0},
        "baseline_streams": n_base, "games_per_stream": m_games,
        "icc": icc, "stated_icc": stated, "stated_deff": deff_stated,
        "design": "crossed" if design.blocked else "nested", "design_why": design.why, "blocks": design.summary,
        "baseline_pairing": ("each stream's lift is paired game by game with the baseline pooled over its "
                             f"{n_base} stream(s) (the baseline has no skill memory)"),
        "note": ("" if stream_mode else
                 ("one stream per arm: the intra-stream correlation cannot be estimated; per-arm p-values are "
                  "conditional on the stream, and no shape claim is made (state a pilot's --stream-icc, or sweep "
                  f"--streams R); {reference.one_stream_sentence(m_games)}")
                 if stated is None else
                 f"one stream per arm with a stated intra-stream correlation {stated:g}: every variance x DEFF "
                 f"{deff_stated:.2f} at {m_games:.0f} games per stream"),
    }


def analyse_games(table: GameTable, baseline: str, settings: CompareSettings) -> Analysis:
    """Every statistic on per-game outcomes: the stream arms against the baseline, each cell by its stream mode
    (two or more streams: nested or crossed; one stream: conditional, or with a stated ICC), the runs' curves,
    the pairs and the frameworks."""
    rng = np.random.default_rng(settings.seed)
    sa = _stream_arms(table, baseline, settings, rng)
    stream_mode = bool(sa.n_str.size and sa.n_str.max() >= 2)
    fams = families.assign(sa.reps, settings)
    alpha_arm = families.per_arm_alpha(fams, settings)
    base_means = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in sa.yb])
    # drawn in every mode (the stream model uses them): the generator's later draws follow these
    baseline_draws = st.baseline_draws(base_means[np.isfinite(base_means)], sa.n_games, settings.n_boot, rng)
    icc = st.stream_icc([sa.ya[c] for c in sa.cells], settings.level) if stream_mode else None
    if stream_mode:
        cst = _streams_cells(sa, table, settings, rng, baseline_draws, alpha_arm)
        per_run = partial(_streams_run_shape, sa=sa, cst=cst, level=settings.level)
    else:
        cst = _one_stream_cells(sa, settings, rng, alpha_arm)
        fold_rng = np.random.default_rng([settings.seed, 1])
        fold = (fold_rng.permutation(sa.n_games) < sa.n_games // 2).astype(np.int64)
        per_run = partial(_one_stream_run_shape, sa=sa, cst=cst, settings=settings, rng=rng, fold=fold,
                          fold_rng=fold_rng)
    adj = cs.adjust_pvalues(cst.pvals, fams)
    base = _baseline_summary(table, sa, baseline, settings.level)
    flags = _unmeasured_flags(table, sa, settings)
    arm_rows = _cell_rows(sa, cst, fams, adj, alpha_arm, flags, base["success_rate"],
                          conditional=bool(not stream_mode and settings.stream_icc is None))
    runs, curves = run_curves(sa.reps, cst.lift, cst.boot, settings, rng, adj_holm=adj["holm"], per_run=per_run,
                              models=cst.models, streams=sa.n_str, lift_ci=(cst.lo, cst.hi) if stream_mode else None)
    confounded = frameworks.is_confounded(curves)
    combos = list(combinations(sorted(curves), 2))
    items = [_pair_games(curves[ra], curves[rb], sa.n_games, settings, confounded, icc, sa.m_games, len(combos),
                         cst.su2, [sa.diff[c[0]] for c in sa.cells], [sa.mask[c[0]] for c in sa.cells])
             for ra, rb in combos]
    pairs = finish_pairs(items, settings)
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "per-game",
        "sweep_id": table.sweep_id, "games_hash": table.games_hash, "executor": table.executor, "n_games": sa.n_games,
        "settings": settings_dict(settings), "streams": _streams_summary(sa, cst, icc, table, settings),
        "baseline": base, "families": families.summary(sa.reps, fams, adj, settings),
        "arms": arm_rows, "stream_arms": _stream_rows(sa, flags, settings.level), "runs": runs, "pairs": pairs,
        "frameworks": frameworks.analyse(curves, pairs, settings, plans=_plans(table)), "flags": flags, "skipped": [],
    }
    if not stream_mode:
        result["skipped"].append("between-stream variance and the intra-stream correlation: one stream per arm "
                                 "(sweep --streams R plays replicate streams)")
    # stream-model draws are not game resamples: a transfer across sweeps must not pair them row by row
    return Analysis(clean(result), sa.reps, cst.lift, cst.boot, table.games_hash if not stream_mode else None)


def _named(a: ArmInfo) -> ArmInfo:
    """A cell's representative arm under the cell's name (the arm name without a stream suffix), stream id 0."""
    from dataclasses import replace

    return replace(a, name=a.name.split("#r")[0], replicate=0)


def _pair_games(ca: Curve, cb: Curve, n_games: int, settings: CompareSettings, confounded: bool,
                icc: dict[str, Any] | None, m_games: float, n_pairs: int, su2: float,
                cell_diff: list[np.ndarray], cell_mask: list[np.ndarray]) -> tuple[dict[str, Any], Any]:
    common, ia, ib = shared_steps(ca, cb)
    k = len(common)
    cross = confounded and ca.framework != cb.framework
    pn = None
    if k >= 2 and ca.model is not None and cb.model is not None:
        sub = [st.CellModel(c.model.means[i], c.model.n[i], c.model.s2, c.model.df)  # type: ignore[union-attr]
               for c, i in ((ca, ia), (cb, ib))]
        s2, df = st.pooled([ca.model, cb.model])  # blocked models: the residual after the stream blocks
        blocked = bool(ca.model.blocked and cb.model.blocked)
        n = np.concatenate([sub[0].n, sub[1].n]).astype(np.float64)
        cov = np.diag(s2 / n)
        noise = None
        if icc is not None:
            e_var = icc["sigma2_game"] / icc["games_per_stream"]  # one stream's lift: the part games shrink
            # one more stream per cell adds K error df per run nested, K - 1 blocked
            per_stream = 2 * (k - 1) if blocked else 2 * k
            # (this was Noise(diag(e_var r / n), ...): the variance of one stream, not of a cell's mean of n
            # streams, so the games and streams that would decide came out for R times the noise)
            noise = st.split_noise(s2, e_var, n, icc["games_per_stream"], per_stream)
        what = ("the residual mean square after each run's stream blocks (crossed streams)" if blocked
                else "the between-stream mean square")
        pn = PairNoise(cov, float(df), noise, f"run x checkpoint interaction of stream lifts, F against {what} "
                       "(success-rate scale)", int(min(n.min(), ca.streams, cb.streams)), settings.stream_icc)
    elif k >= 2:
        # the covariance of the 2K lifts over the games measured in every one of them (pairing and game difficulty
        # kept: per-game differences, sample covariance / n), plus the stated stream variance; the Wald statistic
        # is referred to Hotelling's F for a covariance estimated from n games
        rows = [int(j) for j in ca.arm_idx[ia]] + [int(j) for j in cb.arm_idx[ib]]
        z = np.vstack([cell_diff[j] for j in rows])
        full = np.all(np.vstack([cell_mask[j] for j in rows]), axis=0)
        n_full = int(full.sum())
        game = np.cov(z[:, full]) / max(n_full, 1) if n_full > 2 * k else np.full((2 * k, 2 * k), np.nan)
        stream = np.eye(2 * k) * su2
        cov = game + stream
        noise = st.Noise(game, stream, m_games, 1.0, None) if settings.stream_icc is not None else None
        pn = PairNoise(cov, None, noise, "Wald test of the centred difference on the success-rate scale, covariance "
                       "of the paired per-game differences, Hotelling's F" + (" plus the stated stream variance" if settings.stream_icc is not None else
                                                            " (conditional on the streams)"),
                       1, settings.stream_icc, hotelling_n=n_full)
    label = ("stream model: parametric draws from the between-stream variance" if pn is not None and pn.df is not None
             else "games resampled jointly across all arms")
    return pair_core(ca, cb, n_games, settings, pn, label, confounded=cross, n_pairs=n_pairs)
