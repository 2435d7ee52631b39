"""The comparison on per-game outcomes (every statistic).

The hypotheses are (run, checkpoint) cells; a cell holds one arm per stream (the arm's `replicate`, 0..R-1, the
sweep's stream id). With >= 2 streams in a cell every statistic about curves uses the between-stream variance
(:mod:`.streams`); with one stream the paired bootstrap over games is conditional on the stream, and shape claims
need a stated intra-stream correlation (``CompareSettings.stream_icc``). The baseline's streams (``NAME``,
``NAME#r1``, ...) are pooled game by game (see :mod:`.streams` for why)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
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


def analyse_games(table: GameTable, baseline: str, settings: CompareSettings) -> Analysis:
    base_rows = baseline_streams(table.arms, baseline)
    y = table.outcomes
    yb = y[base_rows]
    n_games = y.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a game no baseline stream measured: NaN, as wanted
        bpool = np.nanmean(yb, axis=0)  # the baseline pooled over its streams, game by game (NaN: none measured)
    others = [i for i in range(len(table.arms)) if i not in base_rows]
    arms = [table.arms[i] for i in others]
    frameworks.apply_groups(arms, settings)
    ya = y[others]
    rng = np.random.default_rng(settings.seed)
    w = cs.index_counts(cs.resample_indices(n_games, settings.n_boot, rng), n_games)
    ones = np.ones((1, n_games))

    # per stream arm, conditional on its stream: paired lift over the pooled baseline, exact McNemar against the
    # baseline stream of the same id (else stream 0)
    mask = ~np.isnan(ya) & ~np.isnan(bpool)[None, :]
    diff = np.where(mask, np.nan_to_num(ya) - np.nan_to_num(bpool)[None, :], 0.0)
    lift_arm = cs.weighted_means(diff, mask, ones)[0]
    boot_arm = cs.weighted_means(diff, mask, w)
    base_rep = {table.arms[i].replicate: i for i in base_rows}
    matched = np.vstack([y[base_rep.get(a.replicate, base_rows[0])] for a in arms]) if arms else np.zeros((0, n_games))
    pcs = [cs.paired_counts(ya[j:j + 1], matched[j]) for j in range(len(arms))]
    b_arm = np.array([int(p.b[0]) for p in pcs])
    c_arm = np.array([int(p.c[0]) for p in pcs])
    n_pairs = np.array([int(p.n_pairs[0]) for p in pcs])
    p_cond = cs.mcnemar_exact_many(b_arm, c_arm)

    # cells: (run, checkpoint) -> its stream arms (by stream id)
    cell_of: dict[tuple[str, int | None], list[int]] = {}
    for j, a in enumerate(arms):
        if a.role == "checkpoint" and a.run is not None:
            cell_of.setdefault((a.run, None if a.checkpoint is None else int(a.checkpoint)), []).append(j)
    keys = sorted(cell_of, key=lambda k: (k[0], k[1] is None, k[1] or 0))
    cells = [sorted(cell_of[k], key=lambda j: arms[j].replicate) for k in keys]
    reps = [_named(arms[c[0]]) for c in cells]  # a cell under its own name (no stream suffix)
    n_str = np.array([int(np.isfinite(lift_arm[c]).sum()) for c in cells], dtype=np.int64)
    stream_mode = bool(n_str.size and n_str.max() >= 2)
    stated = settings.stream_icc
    m_games = float(np.mean(mask.sum(axis=1))) if arms else float(n_games)
    fams = families.assign(reps, settings)
    fam_size = families.sizes(fams)
    alpha_arm = families.per_arm_alpha(fams, settings)
    base_means = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in yb])
    base_dev, var_b, df_b = st.baseline_draws(base_means[np.isfinite(base_means)], n_games, settings.n_boot, rng)
    icc = st.stream_icc([ya[c] for c in cells], settings.level) if stream_mode else None
    models: dict[str, st.CellModel] = {}
    su2 = 0.0  # a stated ICC's stream variance of one arm's lift (one stream per arm)
    boot_game = np.zeros((settings.n_boot, 0))
    lift = np.full(len(cells), np.nan)
    boot = np.full((settings.n_boot, len(cells)), np.nan)
    pvals = np.full(len(cells), np.nan)
    se = np.full(len(cells), np.nan)
    dfs = np.full(len(cells), np.nan)
    deff_stated = st.deff(stated, m_games) if stated is not None else None
    design = blk.Design(False, None, table.crossed_why)
    if stream_mode:
        for run in sorted({k[0] for k in keys}):
            idx = [i for i, k in enumerate(keys) if k[0] == run]
            models[run] = st.cell_model([lift_arm[cells[i]][np.isfinite(lift_arm[cells[i]])] for i in idx])
        s2_all, df_all = st.pooled(list(models.values()))
        for run, model in models.items():
            if not model.ok:  # a run played with one stream among runs with several: the others' variance
                models[run] = st.CellModel(model.means, model.n, s2_all, df_all)
        # crossed streams (sweep.json's shared stream plans): stream r is a block of each run; contrasts within a
        # run are tested against the residual after the blocks, a cell's level keeps the nested variance
        run_cells: dict[str, list[dict[int, float]]] = {}
        for i, key in enumerate(keys):
            run_cells.setdefault(key[0], []).append({arms[j].replicate: float(lift_arm[j]) for j in cells[i]})
        design = blk.choose(table.crossed, table.crossed_why, settings.stream_design, run_cells, settings.level)
        if design.blocked:
            for run, fit in design.fits.items():
                nested = models[run]
                models[run] = st.CellModel(fit.means, nested.n, fit.ss_e / fit.df_e, fit.df_e,
                                           level_s2=nested.s2, level_df=nested.df, blocked=True)
        for run, model in models.items():
            idx = np.array([i for i, k in enumerate(keys) if k[0] == run])
            lift[idx] = model.means
            boot[:, idx] = st.draw_means(model, settings.n_boot, rng) - base_dev[:, None]
            va = model.s2_level / np.maximum(model.n, 1)  # a lift keeps the block: the within-cell variance
            _, dfs[idx], pvals[idx] = st.welch_t(model.means, va, model.df_level, var_b, df_b)
            se[idx] = np.sqrt(va + var_b)
        mde = st.mde_t(se, dfs, alpha_arm, settings.power)
        test = ("Welch t of the cell's stream lifts against 0 (between-stream variance pooled over the run's cells, "
                "plus the pooled baseline's)")
        # the interval is the Welch test's own (lift +- t(df) se), so it excludes 0 exactly when p < 1 - level: the
        # parametric draws (kept for r and the peak, which need joint draws) gave [-16, +61] pp beside p 0.04 on the
        # demo, their 2-stream baseline's variance drawn at 1 degree of freedom where Welch pools the df
        ci_method = "Welch t interval of the cell's stream lifts (lift +- t(df) se, the test's df and se)"
        mde_method = "noncentral t power at the family's per-arm level, the stream variance as estimated"
    else:
        rep_idx = np.array([c[0] for c in cells], dtype=np.int64)
        lift = lift_arm[rep_idx]
        boot = boot_arm[:, rep_idx] if rep_idx.size else np.zeros((settings.n_boot, 0))
        boot_game = boot
        p_disc = (b_arm + c_arm)[rep_idx] / np.maximum(n_pairs[rep_idx], 1)
        if stated is None:
            pvals = p_cond[rep_idx]
            mde = pw.mde_mcnemar_exact(n_pairs[rep_idx], p_disc, alpha_arm, settings.power)
            test = "exact McNemar (binomial on b, c), conditional on the stream"
            ci_method = "paired bootstrap over games, conditional on the stream"
            mde_method = "exact McNemar power at the family's per-arm level, discordance as observed, conditional on the stream"
        else:
            # a stated ICC: each arm's stream adds sigma2_u = rho / (1 - rho) sigma2_e to its lift (the baseline has
            # no memory), drawn independently per arm; sigma2_e from the arms x games residual (games removed)
            su2 = float(st.stated_stream_variance(stated, st.residual_game_variance(ya[rep_idx])))
            boot = boot + rng.normal(size=boot.shape) * math.sqrt(su2)
            sd = np.sqrt(np.nanvar(boot_game[:, :], axis=0, ddof=1) + su2) if rep_idx.size else np.zeros(0)
            with np.errstate(invalid="ignore", divide="ignore"):
                pvals = 2.0 * stats.norm.sf(np.abs(lift) / sd)
            mde = (stats.norm.ppf(1 - alpha_arm / 2) + stats.norm.ppf(settings.power)) * sd
            test = (f"z on the paired lift: bootstrap variance over games plus the stream variance of the stated ICC "
                    f"{stated:g} (DEFF {deff_stated:.2f})")
            ci_method = "paired bootstrap over games plus draws of the stated stream variance"
            mde_method = "normal power at the family's per-arm level, the stated stream variance included"
    if stream_mode:  # the Welch test's own interval (see ci_method above)
        with np.errstate(invalid="ignore"):
            half = stats.t.ppf(1 - (1 - settings.level) / 2, dfs) * se
        lo, hi = lift - half, lift + half
    else:
        lo, hi = cs.percentile_ci(boot, settings.level)
    adj = cs.adjust_pvalues(pvals, fams)

    base_mask = ~np.isnan(bpool)
    base_rate = float(np.nanmean(bpool)) if base_mask.any() else float("nan")
    boot_base = cs.weighted_means(np.nan_to_num(bpool)[None, :], base_mask[None, :], w)[:, 0]
    blo, bhi = cs.percentile_ci(boot_base, settings.level)
    flags: list[str] = []
    for a in [*(table.arms[i] for i in base_rows), *arms]:
        share = a.n_unmeasured / max(n_games - a.n_missing, 1)
        if share > settings.max_unmeasured_share:
            flags.append(f"{a.name}: {a.n_unmeasured} of {n_games - a.n_missing} rows unmeasured ({share:.0%} > "
                         f"{settings.max_unmeasured_share:.0%}); its lift may be biased by which games failed")
        if a.n_missing:
            flags.append(f"{a.name}: {a.n_missing} of {n_games} games not played (sweep incomplete; rerun to resume)")

    stream_rows = []
    clo, chi = cs.percentile_ci(boot_arm, settings.level)
    for j, a in enumerate(arms):
        measured = int((~np.isnan(ya[j])).sum())
        stream_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "stream": a.replicate, "role": a.role,
            "n_measured": measured, "n_unmeasured": a.n_unmeasured, "n_missing": a.n_missing,
            "success_rate": float(np.nanmean(ya[j])) if measured else None, "lift": lift_arm[j],
            "lift_ci_conditional": [clo[j], chi[j]],
            "b": int(b_arm[j]), "c": int(c_arm[j]), "p_conditional": p_cond[j],
            "flagged": any(f.startswith(a.name + ":") for f in flags),
        })
    arm_rows = []
    for i, a in enumerate(reps):
        js = cells[i]
        measured = int(sum((~np.isnan(ya[j])).sum() for j in js))
        unmeas = sum(arms[j].n_unmeasured for j in js)
        missing = sum(arms[j].n_missing for j in js)
        one = len(js) == 1
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "streams": len(js),
            "stream_arms": [arms[j].name for j in js], "role": a.role,
            "framework": a.framework, "seed": a.seed, "checkpoint_hash": a.checkpoint_hash,
            "family": fams[i], "family_size": fam_size.get(fams[i]) if fams[i] else None,
            "n_games": n_games, "n_measured": measured, "n_unmeasured": unmeas, "n_missing": missing,
            "unmeasured_share": unmeas / max(len(js) * n_games - missing, 1),
            "flagged": any(f.startswith(arms[j].name + ":") for j in js for f in flags),
            "n_pairs": int(n_pairs[js].sum()),
            "success_rate": float(np.nanmean(ya[js])) if measured else None,
            "baseline_rate_paired": base_rate,
            "lift": lift[i], "lift_ci": [lo[i], hi[i]], "ci_method": ci_method,
            "b": int(b_arm[js[0]]) if one else None, "c": int(c_arm[js[0]]) if one else None, "test": test,
            "p_value": pvals[i], "p_conditional_on_stream": bool(not stream_mode and stated is None),
            "p_holm": adj["holm"][i], "p_bh": adj["bh"][i], "p_bonferroni": adj["bonferroni"][i],
            "mde": mde[i], "mde_alpha": alpha_arm[i], "mde_method": mde_method,
        })

    fold_rng = np.random.default_rng([settings.seed, 1])
    fold = (fold_rng.permutation(n_games) < n_games // 2).astype(np.int64)

    def per_run(jj: np.ndarray) -> dict[str, Any]:
        run = reps[jj[0]].run
        out: dict[str, Any] = {}
        if len(jj) < 2:
            return out
        if stream_mode:
            model = models[run]  # type: ignore[index]
            out["checkpoint_effect"] = st.oneway_f(model)
            out["cochran_q"] = None
            res = shape.best_vs_final(lift[jj], boot[:, jj], settings.level)
            out["final_vs_peak"] = {
                "method": "comparisons of the final checkpoint with every other, simultaneous one-sided max-t on the "
                          "stream model's draws", "estimate": None, "best_minus_final_lower": res["best_minus_final_lower"],
                "p_value": res["p_value"], "below_peak": res["below"]}
            halves = [np.array([np.nanmean(lift_arm[[j for j in cells[i] if arms[j].replicate % 2 == h]])
                                if any(arms[j].replicate % 2 == h for j in cells[i]) else np.nan for i in jj])
                      for h in (0, 1)]
            ok = np.isfinite(halves[0]) & np.isfinite(halves[1])
            if ok.sum() >= 3:
                out["test_retest"] = {"r": float(cs.row_pearson(halves[0][ok], halves[1][ok])), "ci": [None, None],
                                      "method": "split-half: the mean curve of even streams against that of odd "
                                                "streams", "checkpoints": [int(reps[i].checkpoint) for i in jj[ok]]}
            return out
        rep = np.array([cells[i][0] for i in jj])
        q = cs.cochran_q(ya[rep].T)
        if q is not None:
            q["conditional_on_stream"] = stated is None
            if stated is not None:
                q["statistic"] = q["statistic"] / deff_stated
                q["p_value"] = float(stats.chi2.sf(q["statistic"], q["df"]))
                q["note"] = f"divided by the stated design effect {deff_stated:.2f}"
        out["cochran_q"] = q
        est = float(shape.crossfit_final_vs_peak(diff[rep], mask[rep], ones, fold, fold_rng)[0])
        fb = shape.crossfit_final_vs_peak(diff[rep], mask[rep], w, fold, fold_rng)
        if stated is not None:  # the final and the peak arm: two streams' variance
            fb = fb + rng.normal(size=fb.shape) * math.sqrt(2.0 * su2)
        ci_lo, ci_hi = cs.percentile_ci(fb, settings.level)
        out["final_vs_peak"] = {"method": "cross-fitted: the peak picked on one half of the games, its lift taken on "
                                          "the other half, both ways, averaged; paired bootstrap over games"
                                          + (", conditional on the stream" if stated is None
                                             else ", plus the stated stream variance of two arms"),
                                "estimate": est, "ci": [ci_lo, ci_hi], "below_peak": bool(ci_hi < 0)}
        return out

    runs, curves = run_curves(reps, lift, boot, settings, rng, adj_holm=adj["holm"], per_run=per_run,
                              models=models, streams=n_str, lift_ci=(lo, hi) if stream_mode else None)
    confounded = frameworks.is_confounded(curves)
    combos = list(combinations(sorted(curves), 2))
    items = [_pair_games(curves[ra], curves[rb], n_games, settings, confounded, icc, m_games, len(combos),
                         su2, [diff[c[0]] for c in cells], [mask[c[0]] for c in cells])
             for ra, rb in combos]
    pairs = finish_pairs(items, settings)
    streams_out = {
        "mode": "streams" if stream_mode else "one stream",
        "streams_per_cell": {"min": int(n_str.min()) if n_str.size else 0, "max": int(n_str.max()) if n_str.size else 0},
        "baseline_streams": len(base_rows), "games_per_stream": m_games,
        "icc": icc, "stated_icc": stated, "stated_deff": deff_stated,
        "design": "crossed" if design.blocked else "nested", "design_why": design.why, "blocks": design.summary,
        "baseline_pairing": ("each stream's lift is paired game by game with the baseline pooled over its "
                             f"{len(base_rows)} stream(s) (the baseline has no skill memory)"),
        "note": ("" if stream_mode else
                 ("one stream per arm: the intra-stream correlation cannot be estimated; per-arm p-values are "
                  "conditional on the stream, and no shape claim is made (state a pilot's --stream-icc, or sweep "
                  f"--streams R); {reference.one_stream_sentence(m_games)}")
                 if stated is None else
                 f"one stream per arm with a stated intra-stream correlation {stated:g}: every variance x DEFF "
                 f"{deff_stated:.2f} at {m_games:.0f} games per stream"),
    }
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "per-game",
        "sweep_id": table.sweep_id, "games_hash": table.games_hash, "executor": table.executor, "n_games": n_games,
        "settings": settings_dict(settings), "streams": streams_out,
        "baseline": {"arm": baseline, "streams": len(base_rows), "n_measured": int(base_mask.sum()),
                     "n_unmeasured": sum(table.arms[i].n_unmeasured for i in base_rows),
                     "n_missing": min(table.arms[i].n_missing for i in base_rows), "success_rate": base_rate,
                     "ci": [blo, bhi]},
        "families": families.summary(reps, fams, adj, settings),
        "arms": arm_rows, "stream_arms": stream_rows, "runs": runs, "pairs": pairs,
        "frameworks": frameworks.analyse(curves, pairs, settings, plans=_plans(table)), "flags": flags, "skipped": [],
    }
    if not stream_mode:
        result["skipped"].append("between-stream variance and the intra-stream correlation: one stream per arm "
                                 "(sweep --streams R plays replicate streams)")
    # stream-model draws are not game resamples: a transfer across sweeps must not pair them row by row
    return Analysis(clean(result), reps, lift, boot,
                    table.games_hash if not stream_mode else None)


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
