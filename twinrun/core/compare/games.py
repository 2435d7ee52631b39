"""The comparison on per-game outcomes (every statistic)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import clogit, families, frameworks, shape
from twinrun.core.compare import power as pw
from twinrun.core.compare import stats as cs
from twinrun.core.compare.curves import Curve, pair_core, run_curves, shared_steps
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


def analyse_games(table: GameTable, baseline: str, settings: CompareSettings) -> Analysis:
    base_i = split_baseline(table.arms, baseline)
    y = table.outcomes
    base = y[base_i]
    n_games = y.shape[1]
    others = [i for i in range(len(table.arms)) if i != base_i]
    arms = [table.arms[i] for i in others]
    frameworks.apply_groups(arms, settings)
    ya = y[others]
    rng = np.random.default_rng(settings.seed)
    idx = cs.resample_indices(n_games, settings.n_boot, rng)
    w = cs.index_counts(idx, n_games)

    pc = cs.paired_counts(ya, base)
    ones = np.ones((1, n_games))
    lift = cs.weighted_means(pc.diff, pc.mask, ones)[0]
    boot_lift = cs.weighted_means(pc.diff, pc.mask, w)  # [R, A]
    lo, hi = cs.percentile_ci(boot_lift, settings.level)
    base_mask = ~np.isnan(base)
    base_rate = float(np.nanmean(base)) if base_mask.any() else float("nan")
    boot_base = cs.weighted_means(np.nan_to_num(base)[None, :], base_mask[None, :], w)[:, 0]
    blo, bhi = cs.percentile_ci(boot_base, settings.level)
    pvals = np.array([cs.mcnemar_exact(b, c) for b, c in zip(pc.b, pc.c)])
    with np.errstate(invalid="ignore", divide="ignore"):
        p_disc = (pc.b + pc.c) / np.maximum(pc.n_pairs, 1)
    fams = families.assign(arms, settings)
    fam_size = families.sizes(fams)
    alpha_arm = families.per_arm_alpha(fams, settings)
    mde = pw.mde_mcnemar_exact(pc.n_pairs, p_disc, alpha_arm, settings.power)
    adj = cs.adjust_pvalues(pvals, fams)

    flags: list[str] = []
    base_arm = table.arms[base_i]
    for a in [base_arm, *arms]:
        share = a.n_unmeasured / max(n_games - a.n_missing, 1)
        if share > settings.max_unmeasured_share:
            flags.append(f"{a.name}: {a.n_unmeasured} of {n_games - a.n_missing} rows unmeasured ({share:.0%} > "
                         f"{settings.max_unmeasured_share:.0%}); its lift may be biased by which games failed")
        if a.n_missing:
            flags.append(f"{a.name}: {a.n_missing} of {n_games} games not played (sweep incomplete; rerun to resume)")

    arm_rows = []
    for j, a in enumerate(arms):
        measured = int((~np.isnan(ya[j])).sum())
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": a.replicate, "role": a.role,
            "framework": a.framework, "seed": a.seed, "checkpoint_hash": a.checkpoint_hash,
            "family": fams[j], "family_size": fam_size.get(fams[j]) if fams[j] else None,
            "n_games": n_games, "n_measured": measured, "n_unmeasured": a.n_unmeasured,
            "n_missing": a.n_missing, "unmeasured_share": a.n_unmeasured / max(n_games - a.n_missing, 1),
            "flagged": any(f.startswith(a.name + ":") for f in flags),
            "n_pairs": int(pc.n_pairs[j]),
            "success_rate": float(np.nanmean(ya[j])) if measured else None,
            "baseline_rate_paired": (float(pc.base_successes[j] / pc.n_pairs[j]) if pc.n_pairs[j] else None),
            "lift": lift[j], "lift_ci": [lo[j], hi[j]], "ci_method": "paired bootstrap over games",
            "b": int(pc.b[j]), "c": int(pc.c[j]), "test": "exact McNemar (binomial on b, c)",
            "p_value": pvals[j], "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j],
            "mde": mde[j], "mde_alpha": alpha_arm[j],
            "mde_method": "exact McNemar power at the family's per-arm level (alpha / family size), discordance as observed",
        })

    # cross-fitting splits the games once, with a stream of its own (the bootstrap above is unchanged by it)
    fold_rng = np.random.default_rng([settings.seed, 1])
    fold = (fold_rng.permutation(n_games) < n_games // 2).astype(np.int64)

    def final_vs_peak(jj: np.ndarray) -> dict[str, Any]:
        est = float(shape.crossfit_final_vs_peak(pc.diff[jj], pc.mask[jj], ones, fold, fold_rng)[0])
        boot = shape.crossfit_final_vs_peak(pc.diff[jj], pc.mask[jj], w, fold, fold_rng)
        ci_lo, ci_hi = cs.percentile_ci(boot, settings.level)
        return {"method": "cross-fitted: the peak picked on one half of the games, its lift taken on the other "
                          "half, both ways, averaged; paired bootstrap over games",
                "estimate": est, "ci": [ci_lo, ci_hi], "below_peak": bool(ci_hi < 0)}

    runs, curves = run_curves(arms, lift, boot_lift, settings, rng, ya=ya, adj_holm=adj["holm"],
                              final_vs_peak=final_vs_peak)
    confounded = frameworks.is_confounded(curves)
    pairs = [_pair_games(curves[ra], curves[rb], ya, n_games, settings, confounded)
             for ra, rb in combinations(sorted(curves), 2)]

    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "per-game",
        "sweep_id": table.sweep_id, "games_hash": table.games_hash, "executor": table.executor, "n_games": n_games,
        "settings": settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": int(base_mask.sum()), "n_unmeasured": base_arm.n_unmeasured,
                     "n_missing": base_arm.n_missing, "success_rate": base_rate, "ci": [blo, bhi]},
        "families": families.summary(arms, fams, adj, settings),
        "arms": arm_rows, "runs": runs, "pairs": pairs, "frameworks": frameworks.analyse(curves, pairs, settings),
        "flags": flags, "skipped": [],
    }
    if not any(a.replicate > 0 for a in arms):
        result["skipped"].append("test-retest ceiling: no replicate arms in this sweep (sweep --replicates adds them)")
    return Analysis(clean(result), arms, lift, boot_lift, table.games_hash)


def _pair_games(ca: Curve, cb: Curve, ya: np.ndarray, n_games: int, settings: CompareSettings,
                confounded: bool) -> dict[str, Any]:
    common, ia, ib = shared_steps(ca, cb)
    if len(common) >= 2:
        ja, jb = ca.arm_idx[ia], cb.arm_idx[ib]
        k = len(common)
        # long format: rows (game, run, checkpoint)
        outcomes = np.concatenate([ya[ja].ravel(), ya[jb].ravel()])
        game = np.tile(np.arange(n_games), 2 * k)
        group = np.repeat([0, 1], k * n_games)
        ckpt = np.tile(np.repeat(np.arange(k), n_games), 2)
        inter = clogit.interaction_test(outcomes, game, group, ckpt, alpha=settings.alpha, level=settings.level)
    else:
        inter = {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": 0,
                 "note": "fewer than 2 shared checkpoints", "amplitude": None}
    cross = confounded and ca.framework != cb.framework
    return pair_core(ca, cb, n_games, settings, inter, "games resampled jointly across all arms", confounded=cross)
