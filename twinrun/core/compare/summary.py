"""The comparison on published per-checkpoint summaries (the statistics that counts support)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import families, frameworks, shape
from twinrun.core.compare import power as pw
from twinrun.core.compare import stats as cs
from twinrun.core.compare import streams as st
from twinrun.core.compare.curves import Curve, PairNoise, finish_pairs, pair_core, run_curves, shared_steps
from twinrun.core.compare.games import Analysis, split_baseline
from twinrun.core.compare.model import ArmInfo, CompareSettings, SummaryTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, clean, settings_dict

SUMMARY_SKIPPED_ALWAYS = [
    "paired bootstrap over games: needs per-game outcomes (replaced by a parametric binomial bootstrap that treats "
    "arms as independent; conservative for lifts, pairing is unknown)",
    "Cochran's Q across checkpoints: needs per-game outcomes",
    "interaction test with the games' pairing: needs per-game outcomes (replaced by a Wald test of the centred "
    "difference on the success-rate scale with binomial variances, arms independent)",
    "cross-fitted final vs peak: needs per-game outcomes to split the games (replaced by comparisons of the final "
    "checkpoint with every other, simultaneous max-t on the parametric bootstrap)",
    "test-retest ceiling: summaries carry no replicate streams",
    "between-stream variance: a summary is one stream per arm (shape claims need a stated --stream-icc)",
    "unmeasured counts and the unmeasured flag: summaries give measured n only",
]


def compare_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """The statistics that per-checkpoint counts support (see SUMMARY_SKIPPED_ALWAYS for the rest)."""
    return analyse_summaries(table, baseline, settings).result


def analyse_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> Analysis:
    """The statistics that counts support: each arm's test, a parametric bootstrap of the lifts, the runs' curves,
    the pairs and the frameworks."""
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
    alpha_arm = families.per_arm_alpha(fams, settings)
    stated = settings.stream_icc
    # a stated ICC: each arm's stream adds rho / (1 - rho) p (1 - p) to its rate's variance (no games to remove
    # game difficulty with, so a little conservative); the baseline has no memory
    su2 = st.stated_stream_variance(stated, pa * (1 - pa)) if stated is not None else np.zeros(len(arms))
    tests = _arm_tests(arms, base, lift, alpha_arm, su2, settings)
    adj = cs.adjust_pvalues(tests.pvals, fams)

    # parametric bootstrap: successes ~ Binomial(n, p_hat) per arm, independently (pairing unknown)
    rng = np.random.default_rng(settings.seed)
    boot_a = rng.binomial(n.astype(np.int64)[None, :], pa[None, :], size=(settings.n_boot, len(arms))) / n[None, :]
    boot_0 = rng.binomial(base.n, p0, size=settings.n_boot) / base.n
    # centred on the reported lift (paired (b - c) / n where given) so resampled deviations are pure noise
    boot_game = boot_a - boot_0[:, None] - (pa - p0)[None, :] + lift[None, :]
    boot_lift = boot_game + rng.normal(size=boot_game.shape) * np.sqrt(su2)[None, :]

    def final_vs_peak(jj: np.ndarray) -> dict[str, Any]:
        res = shape.best_vs_final(lift[jj], boot_lift[:, jj], settings.level)
        return {"method": "comparisons of the final checkpoint with every other, simultaneous one-sided max-t "
                          "(Hsu's comparisons with the best, from the final's side) on the parametric bootstrap",
                "estimate": None, "best_minus_final_lower": res["best_minus_final_lower"],
                "p_value": res["p_value"], "below_peak": res["below"]}

    def per_run(jj: np.ndarray) -> dict[str, Any]:
        return {"cochran_q": None, "final_vs_peak": final_vs_peak(jj)} if len(jj) >= 2 else {"cochran_q": None}

    runs, curves = run_curves(arms, lift, boot_lift, settings, rng, adj_holm=adj["holm"], per_run=per_run)
    confounded = frameworks.is_confounded(curves)
    combos = list(combinations(sorted(curves), 2))
    items = []
    for ra, rb in combos:
        ca, cb = curves[ra], curves[rb]
        items.append(pair_core(ca, cb, int(np.median(n)), settings, _summary_noise(ca, cb, boot_game, su2, n, settings),
                               "parametric binomial, arms independent",
                               confounded=confounded and ca.framework != cb.framework, n_pairs=len(combos)))
    pairs = finish_pairs(items, settings)

    skipped = list(SUMMARY_SKIPPED_ALWAYS)
    no_bc = [a.name for a in arms if a.b is None]
    if no_bc:
        skipped.insert(0, f"exact McNemar for {len(no_bc)} arm(s) without b, c ({', '.join(no_bc[:5])}"
                          f"{', ...' if len(no_bc) > 5 else ''}): Fisher exact on the 2x2 counts instead")
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "summary",
        "summary_file": table.source, "sweep_id": None, "games_hash": None, "executor": table.executor,
        "n_games": base.n, "settings": settings_dict(settings),
        "streams": {"mode": "one stream", "streams_per_cell": {"min": 1, "max": 1}, "baseline_streams": 1,
                    "games_per_stream": float(np.mean(n)), "icc": None, "stated_icc": stated,
                    "stated_deff": st.deff(stated, float(np.mean(n))) if stated is not None else None,
                    "note": ("published summaries: one stream per arm; per-arm p-values are conditional on the stream "
                             "and no shape claim is made (state a pilot's --stream-icc)" if stated is None else
                             f"published summaries with a stated intra-stream correlation {stated:g}")},
        "baseline": {"arm": baseline, "n_measured": base.n, "n_unmeasured": None, "n_missing": None,
                     "success_rate": p0, "ci": [p0 - z * math.sqrt(p0 * (1 - p0) / base.n),
                                                p0 + z * math.sqrt(p0 * (1 - p0) / base.n)]},
        "families": families.summary(arms, fams, adj, settings),
        "arms": _arm_rows(arms, fams, adj, alpha_arm, pa, lift, tests), "runs": runs, "pairs": pairs, "frameworks": frameworks.analyse(curves, pairs, settings),
        "flags": [], "skipped": skipped,
    }
    return Analysis(clean(result), arms, lift, boot_lift, None)


@dataclass
class _ArmTests:
    """Each arm's test against the baseline: p, interval, minimum detectable lift, and the words for each."""

    pvals: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    mde: np.ndarray
    tests: list[str]
    ci_methods: list[str]
    mde_methods: list[str]


def _arm_tests(arms: list[ArmInfo], base: ArmInfo, lift: np.ndarray, alpha_arm: np.ndarray, su2: np.ndarray,
               settings: CompareSettings) -> _ArmTests:
    """Each arm's test from its counts: z with a stated ICC's stream variance, exact McNemar where b, c are given,
    else Fisher exact (unpaired, conservative)."""
    from scipy import stats

    n = np.array([a.n for a in arms], dtype=np.float64)
    pa = np.array([a.successes for a in arms], dtype=np.float64) / n
    p0 = base.successes / base.n  # type: ignore[operator]
    z = stats.norm.ppf(1 - (1 - settings.level) / 2)
    stated = settings.stream_icc
    pvals = np.empty(len(arms))
    lo = np.empty(len(arms))
    hi = np.empty(len(arms))
    mde = np.full(len(arms), np.nan)
    tests: list[str] = []
    ci_methods: list[str] = []
    mde_methods: list[str] = []
    for j, a in enumerate(arms):
        if stated is not None:
            var_g = (max(((a.b + a.c) / n[j] - lift[j] ** 2) / n[j], 0.0) if a.b is not None and a.c is not None
                     else pa[j] * (1 - pa[j]) / n[j] + p0 * (1 - p0) / base.n)
            var = var_g + su2[j]
            pvals[j] = float(2 * stats.norm.sf(abs(lift[j]) / math.sqrt(var))) if var > 0 else 1.0
            tests.append(f"z on the lift with the stated stream variance (ICC {stated:g})")
            ci_methods.append("Wald plus the stated stream variance")
            mde[j] = (stats.norm.ppf(1 - alpha_arm[j] / 2) + stats.norm.ppf(settings.power)) * math.sqrt(var)
            mde_methods.append("normal power at the family's per-arm level, the stated stream variance included")
        elif a.b is not None and a.c is not None:
            pvals[j] = cs.mcnemar_exact(a.b, a.c)
            tests.append("exact McNemar (binomial on b, c), conditional on the stream")
            var = max(((a.b + a.c) / n[j] - lift[j] ** 2) / n[j], 0.0)
            ci_methods.append("paired Wald from b, c")
            mde[j] = pw.mde_mcnemar_exact(np.array([a.n]), np.array([(a.b + a.c) / n[j]]), alpha_arm[j], settings.power)[0]
            mde_methods.append("exact McNemar power at the family's per-arm level, discordance as observed")
        else:
            pvals[j] = float(stats.fisher_exact([[a.successes, a.n - a.successes],
                                                 [base.successes, base.n - base.successes]])[1])
            tests.append("Fisher exact (unpaired: no b, c given; conservative), conditional on the stream")
            var = pa[j] * (1 - pa[j]) / n[j] + p0 * (1 - p0) / base.n
            ci_methods.append("unpaired Wald")
            mde[j] = pw.mde_fisher_exact(np.array([a.n]), base.n, p0, alpha_arm[j], settings.power)[0]
            mde_methods.append("exact unconditional power of Fisher's test at the family's per-arm level, baseline "
                               "rate as observed")
        lo[j], hi[j] = lift[j] - z * math.sqrt(var), lift[j] + z * math.sqrt(var)
    return _ArmTests(pvals, lo, hi, mde, tests, ci_methods, mde_methods)


def _arm_rows(arms: list[ArmInfo], fams: list[str | None], adj: dict[str, np.ndarray], alpha_arm: np.ndarray,
              pa: np.ndarray, lift: np.ndarray, t: _ArmTests) -> list[dict[str, Any]]:
    """One row per arm (the result's "arms")."""
    fam_size = families.sizes(fams)
    arm_rows = []
    for j, a in enumerate(arms):
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": 0, "role": a.role,
            "framework": a.framework, "seed": a.seed, "checkpoint_hash": None,
            "family": fams[j], "family_size": fam_size.get(fams[j]) if fams[j] else None,
            "n_games": a.n, "n_measured": a.n, "n_unmeasured": None, "n_missing": None,
            "unmeasured_share": None, "flagged": False, "n_pairs": a.n if a.b is not None else None,
            "success_rate": pa[j], "baseline_rate_paired": None, "lift": lift[j], "lift_ci": [t.lo[j], t.hi[j]],
            "ci_method": t.ci_methods[j], "b": a.b, "c": a.c, "test": t.tests[j], "p_value": t.pvals[j],
            "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j], "mde": t.mde[j],
            "mde_alpha": alpha_arm[j], "mde_method": t.mde_methods[j],
        })
    return arm_rows


def _summary_noise(ca: Curve, cb: Curve, boot_game: np.ndarray, su2: np.ndarray, n: np.ndarray,
                   settings: CompareSettings) -> PairNoise | None:
    """The pair's covariance: the parametric binomial draws' (arms independent) plus the stated stream variance."""
    common, ia, ib = shared_steps(ca, cb)
    k = len(common)
    if k < 2:
        return None
    js = np.concatenate([ca.arm_idx[ia], cb.arm_idx[ib]])
    game = np.cov(boot_game[:, js], rowvar=False)
    stream = np.diag(su2[js])
    m = float(np.mean(n[js]))
    noise = st.Noise(game, stream, m, 1.0, None) if settings.stream_icc is not None else None
    return PairNoise(game + stream, None, noise, "Wald test of the centred difference on the success-rate scale, "
                     "binomial variances (arms independent)" + (" plus the stated stream variance"
                                                               if settings.stream_icc is not None else
                                                               " (conditional on the streams)"),
                     1, settings.stream_icc)
