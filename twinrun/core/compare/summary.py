"""The comparison on published per-checkpoint summaries (the statistics that counts support)."""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import clogit, families, frameworks, shape
from twinrun.core.compare import power as pw
from twinrun.core.compare import stats as cs
from twinrun.core.compare.curves import Curve, pair_core, run_curves, shared_steps
from twinrun.core.compare.games import Analysis, split_baseline
from twinrun.core.compare.model import ArmInfo, CompareSettings, SummaryTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, clean, settings_dict

SUMMARY_SKIPPED_ALWAYS = [
    "paired bootstrap over games: needs per-game outcomes (replaced by a parametric binomial bootstrap that treats "
    "arms as independent; conservative for lifts, pairing is unknown)",
    "Cochran's Q across checkpoints: needs per-game outcomes",
    "interaction test with game effects: needs per-game outcomes (replaced by a binomial logit on counts, "
    "run x checkpoint vs run + checkpoint, without game effects)",
    "cross-fitted final vs peak: needs per-game outcomes to split the games (replaced by comparisons of the final "
    "checkpoint with every other, simultaneous max-t on the parametric bootstrap)",
    "test-retest ceiling: summaries carry no replicate arms",
    "unmeasured counts and the unmeasured flag: summaries give measured n only",
]


def compare_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """The statistics that per-checkpoint counts support (see SUMMARY_SKIPPED_ALWAYS for the rest)."""
    return analyse_summaries(table, baseline, settings).result


def analyse_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> Analysis:
    from scipy import stats

    base_i = split_baseline(table.arms, baseline)
    base = table.arms[base_i]
    arms = [a for i, a in enumerate(table.arms) if i != base_i]
    frameworks.apply_groups(arms, settings)
    assert base.n is not None and base.successes is not None
    p0 = base.successes / base.n
    n = np.array([a.n for a in arms], dtype=np.float64)
    s = np.array([a.successes for a in arms], dtype=np.float64)
    pa = s / n
    has_bc = np.array([a.b is not None for a in arms])
    lift = np.where(has_bc, [((a.b or 0) - (a.c or 0)) / (a.n or 1) for a in arms], pa - p0)
    z = stats.norm.ppf(1 - (1 - settings.level) / 2)
    fams = families.assign(arms, settings)
    fam_size = families.sizes(fams)
    alpha_arm = families.per_arm_alpha(fams, settings)
    pvals = np.empty(len(arms))
    lo = np.empty(len(arms))
    hi = np.empty(len(arms))
    mde = np.full(len(arms), np.nan)
    tests: list[str] = []
    ci_methods: list[str] = []
    mde_methods: list[str] = []
    for j, a in enumerate(arms):
        if a.b is not None and a.c is not None:
            pvals[j] = cs.mcnemar_exact(a.b, a.c)
            tests.append("exact McNemar (binomial on b, c)")
            var = max(((a.b + a.c) / n[j] - lift[j] ** 2) / n[j], 0.0)
            ci_methods.append("paired Wald from b, c")
            mde[j] = pw.mde_mcnemar_exact(np.array([a.n]), np.array([(a.b + a.c) / n[j]]), alpha_arm[j], settings.power)[0]
            mde_methods.append("exact McNemar power at the family's per-arm level, discordance as observed")
        else:
            pvals[j] = float(stats.fisher_exact([[a.successes, a.n - a.successes],
                                                 [base.successes, base.n - base.successes]])[1])
            tests.append("Fisher exact (unpaired: no b, c given; conservative)")
            var = pa[j] * (1 - pa[j]) / n[j] + p0 * (1 - p0) / base.n
            ci_methods.append("unpaired Wald")
            mde[j] = pw.mde_fisher_exact(np.array([a.n]), base.n, p0, alpha_arm[j], settings.power)[0]
            mde_methods.append("exact unconditional power of Fisher's test at the family's per-arm level, baseline "
                               "rate as observed")
        lo[j], hi[j] = lift[j] - z * math.sqrt(var), lift[j] + z * math.sqrt(var)
    adj = cs.adjust_pvalues(pvals, fams)

    # parametric bootstrap: successes ~ Binomial(n, p_hat) per arm, independently (pairing unknown)
    rng = np.random.default_rng(settings.seed)
    boot_a = rng.binomial(n.astype(np.int64)[None, :], pa[None, :], size=(settings.n_boot, len(arms))) / n[None, :]
    boot_0 = rng.binomial(base.n, p0, size=settings.n_boot) / base.n
    # centred on the reported lift (paired (b - c) / n where given) so resampled deviations are pure noise
    boot_lift = boot_a - boot_0[:, None] - (pa - p0)[None, :] + lift[None, :]

    def final_vs_peak(jj: np.ndarray) -> dict[str, Any]:
        res = shape.best_vs_final(lift[jj], boot_lift[:, jj], settings.level)
        return {"method": "comparisons of the final checkpoint with every other, simultaneous one-sided max-t "
                          "(Hsu's comparisons with the best, from the final's side) on the parametric bootstrap",
                "estimate": None, "best_minus_final_lower": res["best_minus_final_lower"],
                "p_value": res["p_value"], "below_peak": res["below"]}

    runs, curves = run_curves(arms, lift, boot_lift, settings, rng, ya=None, adj_holm=adj["holm"],
                              final_vs_peak=final_vs_peak)
    for entry in runs.values():
        entry["cochran_q"] = None
    confounded = frameworks.is_confounded(curves)
    pairs = []
    for ra, rb in combinations(sorted(curves), 2):
        ca, cb = curves[ra], curves[rb]
        inter = _summary_interaction(arms, ca, cb, settings)
        pairs.append(pair_core(ca, cb, int(np.median(n)), settings, inter, "parametric binomial, arms independent",
                               confounded=confounded and ca.framework != cb.framework))

    skipped = list(SUMMARY_SKIPPED_ALWAYS)
    no_bc = [a.name for a in arms if a.b is None]
    if no_bc:
        skipped.insert(0, f"exact McNemar for {len(no_bc)} arm(s) without b, c ({', '.join(no_bc[:5])}"
                          f"{', ...' if len(no_bc) > 5 else ''}): Fisher exact on the 2x2 counts instead")
    arm_rows = []
    for j, a in enumerate(arms):
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": 0, "role": a.role,
            "framework": a.framework, "seed": a.seed, "checkpoint_hash": None,
            "family": fams[j], "family_size": fam_size.get(fams[j]) if fams[j] else None,
            "n_games": a.n, "n_measured": a.n, "n_unmeasured": None, "n_missing": None,
            "unmeasured_share": None, "flagged": False, "n_pairs": a.n if a.b is not None else None,
            "success_rate": pa[j], "baseline_rate_paired": None, "lift": lift[j], "lift_ci": [lo[j], hi[j]],
            "ci_method": ci_methods[j], "b": a.b, "c": a.c, "test": tests[j], "p_value": pvals[j],
            "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j], "mde": mde[j],
            "mde_alpha": alpha_arm[j], "mde_method": mde_methods[j],
        })
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "summary",
        "summary_file": table.source, "sweep_id": None, "games_hash": None, "executor": table.executor,
        "n_games": base.n, "settings": settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": base.n, "n_unmeasured": None, "n_missing": None,
                     "success_rate": p0, "ci": [p0 - z * math.sqrt(p0 * (1 - p0) / base.n),
                                                p0 + z * math.sqrt(p0 * (1 - p0) / base.n)]},
        "families": families.summary(arms, fams, adj, settings),
        "arms": arm_rows, "runs": runs, "pairs": pairs, "frameworks": frameworks.analyse(curves, pairs, settings),
        "flags": [], "skipped": skipped,
    }
    return Analysis(clean(result), arms, lift, boot_lift, None)


def _summary_interaction(arms: list[ArmInfo], ca: Curve, cb: Curve, settings: CompareSettings) -> dict[str, Any]:
    """Binomial logit on counts: successes ~ run x checkpoint vs run + checkpoint (LR, df K - 1), no game effects."""
    common, ia, ib = shared_steps(ca, cb)
    k = len(common)
    js = list(ca.arm_idx[ia]) + list(cb.arm_idx[ib])
    succ = np.array([arms[j].successes for j in js], dtype=float)
    tot = np.array([arms[j].n for j in js], dtype=float)
    return clogit.interaction_test_counts(succ, tot, np.repeat([0, 1], k), np.tile(np.arange(k), 2),
                                          alpha=settings.alpha, level=settings.level)
