"""The comparison on per-game outcomes (every statistic)."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import clogit
from twinrun.core.compare import stats as cs
from twinrun.core.compare.curves import _Curve, _pair_core, _run_curves, _shared
from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings, GameTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, _clean, _settings_dict


def _split_baseline(arms: list[ArmInfo], baseline: str) -> int:
    names = [a.name for a in arms]
    if baseline not in names:
        raise CompareError(
            f"--baseline: {baseline!r} is not an arm here (fix: one of {', '.join(sorted(names)[:8])})"
        )
    return names.index(baseline)


def _family(arm: ArmInfo, settings: CompareSettings) -> str | None:
    if arm.role != "checkpoint" or arm.replicate != 0:
        return None  # replicates and baseline replicates measure noise; they are not hypotheses
    return "all" if settings.family == "all" else f"run:{arm.run}"


def compare_games(table: GameTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """All statistics on per-game outcomes (see module docstring)."""
    base_i = _split_baseline(table.arms, baseline)
    y = table.outcomes
    base = y[base_i]
    n_games = y.shape[1]
    others = [i for i in range(len(table.arms)) if i != base_i]
    arms = [table.arms[i] for i in others]
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
    mde = cs.mde_paired(pc.n_pairs, p_disc, settings.alpha, settings.power)
    fams = [_family(a, settings) for a in arms]
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
            "family": fams[j], "n_games": n_games, "n_measured": measured, "n_unmeasured": a.n_unmeasured,
            "n_missing": a.n_missing, "unmeasured_share": a.n_unmeasured / max(n_games - a.n_missing, 1),
            "flagged": any(f.startswith(a.name + ":") for f in flags),
            "n_pairs": int(pc.n_pairs[j]),
            "success_rate": float(np.nanmean(ya[j])) if measured else None,
            "baseline_rate_paired": (float(pc.base_successes[j] / pc.n_pairs[j]) if pc.n_pairs[j] else None),
            "lift": lift[j], "lift_ci": [lo[j], hi[j]], "ci_method": "paired bootstrap over games",
            "b": int(pc.b[j]), "c": int(pc.c[j]), "test": "exact McNemar (binomial on b, c)",
            "p_value": pvals[j], "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j],
            "mde": mde[j],
        })

    runs, curves = _run_curves(arms, lift, boot_lift, settings, rng, ya=ya, adj_holm=adj["holm"])
    pairs = [_pair_games(ra, rb, curves, arms, ya, n_games, settings) for ra, rb in combinations(sorted(curves), 2)]

    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "per-game",
        "sweep_id": table.sweep_id, "games_hash": table.games_hash, "n_games": n_games,
        "settings": _settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": int(base_mask.sum()), "n_unmeasured": base_arm.n_unmeasured,
                     "n_missing": base_arm.n_missing, "success_rate": base_rate, "ci": [blo, bhi]},
        "arms": arm_rows, "runs": runs, "pairs": pairs, "flags": flags, "skipped": [],
    }
    if not any(a.replicate > 0 for a in arms):
        result["skipped"].append("test-retest ceiling: no replicate arms in this sweep (sweep --replicates adds them)")
    return _clean(result)


def _pair_games(ra: str, rb: str, curves: dict[str, _Curve], arms: list[ArmInfo], ya: np.ndarray, n_games: int,
                settings: CompareSettings) -> dict[str, Any]:
    ca, cb = curves[ra], curves[rb]
    common, ia, ib = _shared(ca, cb)
    if len(common) >= 2:
        ja, jb = ca.arm_idx[ia], cb.arm_idx[ib]
        k = len(common)
        # long format: rows (game, run, checkpoint)
        outcomes = np.concatenate([ya[ja].ravel(), ya[jb].ravel()])
        game = np.tile(np.arange(n_games), 2 * k)
        group = np.repeat([0, 1], k * n_games)
        ckpt = np.tile(np.repeat(np.arange(k), n_games), 2)
        inter = clogit.interaction_test(outcomes, game, group, ckpt)
    else:
        inter = {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": 0,
                 "note": "fewer than 2 shared checkpoints"}
    return _pair_core(ca, cb, n_games, settings, inter, "games resampled jointly across all arms")
