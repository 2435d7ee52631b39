"""The comparison on published per-checkpoint summaries (the statistics that counts support)."""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import stats as cs
from twinrun.core.compare.curves import _Curve, _pair_core, _run_curves, _shared
from twinrun.core.compare.games import _family, _split_baseline
from twinrun.core.compare.model import ArmInfo, CompareSettings, SummaryTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, _clean, _settings_dict


SUMMARY_SKIPPED_ALWAYS = [
    "paired bootstrap over games: needs per-game outcomes (replaced by a parametric binomial bootstrap that treats "
    "arms as independent; conservative for lifts, pairing is unknown)",
    "Cochran's Q across checkpoints: needs per-game outcomes",
    "interaction test with game effects: needs per-game outcomes (replaced by a binomial GLM on counts, "
    "run x checkpoint vs run + checkpoint, without game effects)",
    "test-retest ceiling: summaries carry no replicate arms",
    "unmeasured counts and the unmeasured flag: summaries give measured n only",
]


def compare_summaries(table: SummaryTable, baseline: str, settings: CompareSettings) -> dict[str, Any]:
    """The statistics that per-checkpoint counts support (see SUMMARY_SKIPPED_ALWAYS for the rest)."""
    from scipy import stats

    base_i = _split_baseline(table.arms, baseline)
    base = table.arms[base_i]
    arms = [a for i, a in enumerate(table.arms) if i != base_i]
    assert base.n is not None and base.successes is not None
    p0 = base.successes / base.n
    n = np.array([a.n for a in arms], dtype=np.float64)
    s = np.array([a.successes for a in arms], dtype=np.float64)
    pa = s / n
    has_bc = np.array([a.b is not None for a in arms])
    lift = np.where(has_bc, [((a.b or 0) - (a.c or 0)) / (a.n or 1) for a in arms], pa - p0)
    z = stats.norm.ppf(1 - (1 - settings.level) / 2)
    pvals = np.empty(len(arms))
    lo = np.empty(len(arms))
    hi = np.empty(len(arms))
    mde = np.empty(len(arms))
    tests: list[str] = []
    ci_methods: list[str] = []
    for j, a in enumerate(arms):
        if a.b is not None and a.c is not None:
            pvals[j] = cs.mcnemar_exact(a.b, a.c)
            tests.append("exact McNemar (binomial on b, c)")
            var = max(((a.b + a.c) / n[j] - lift[j] ** 2) / n[j], 0.0)
            ci_methods.append("paired Wald from b, c")
            mde[j] = float(cs.mde_paired(np.array([n[j]]), np.array([(a.b + a.c) / n[j]]), settings.alpha, settings.power)[0])
        else:
            pvals[j] = float(stats.fisher_exact([[a.successes, a.n - a.successes],
                                                 [base.successes, base.n - base.successes]])[1])
            tests.append("Fisher exact (unpaired: no b, c given; conservative)")
            var = pa[j] * (1 - pa[j]) / n[j] + p0 * (1 - p0) / base.n
            ci_methods.append("unpaired Wald")
            mde[j] = float(cs.mde_unpaired(np.array([n[j]]), np.array([base.n]), np.array([p0]), settings.alpha,
                                           settings.power)[0])
        lo[j], hi[j] = lift[j] - z * math.sqrt(var), lift[j] + z * math.sqrt(var)
    fams = [_family(a, settings) for a in arms]
    adj = cs.adjust_pvalues(pvals, fams)

    # parametric bootstrap: successes ~ Binomial(n, p_hat) per arm, independently (pairing unknown)
    rng = np.random.default_rng(settings.seed)
    boot_a = rng.binomial(n.astype(np.int64)[None, :], pa[None, :], size=(settings.n_boot, len(arms))) / n[None, :]
    boot_0 = rng.binomial(base.n, p0, size=settings.n_boot) / base.n
    # centred on the reported lift (paired (b - c) / n where given) so resampled deviations are pure noise
    boot_lift = boot_a - boot_0[:, None] - (pa - p0)[None, :] + lift[None, :]
    runs, curves = _run_curves(arms, lift, boot_lift, settings, rng, ya=None, adj_holm=adj["holm"])
    for entry in runs.values():
        entry["cochran_q"] = None
    pairs = []
    for ra, rb in combinations(sorted(curves), 2):
        inter = _summary_interaction(arms, curves[ra], curves[rb])
        pairs.append(_pair_core(curves[ra], curves[rb], int(np.median(n)), settings, inter,
                                "parametric binomial, arms independent"))

    skipped = list(SUMMARY_SKIPPED_ALWAYS)
    no_bc = [a.name for a in arms if a.b is None]
    if no_bc:
        skipped.insert(0, f"exact McNemar for {len(no_bc)} arm(s) without b, c ({', '.join(no_bc[:5])}"
                          f"{', ...' if len(no_bc) > 5 else ''}): Fisher exact on the 2x2 counts instead")
    arm_rows = []
    for j, a in enumerate(arms):
        arm_rows.append({
            "arm": a.name, "run": a.run, "checkpoint": a.checkpoint, "replicate": 0, "role": a.role,
            "family": fams[j], "n_games": a.n, "n_measured": a.n, "n_unmeasured": None, "n_missing": None,
            "unmeasured_share": None, "flagged": False, "n_pairs": a.n if a.b is not None else None,
            "success_rate": pa[j], "baseline_rate_paired": None, "lift": lift[j], "lift_ci": [lo[j], hi[j]],
            "ci_method": ci_methods[j], "b": a.b, "c": a.c, "test": tests[j], "p_value": pvals[j],
            "p_holm": adj["holm"][j], "p_bh": adj["bh"][j], "p_bonferroni": adj["bonferroni"][j], "mde": mde[j],
        })
    result = {
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "comparison", "source": "summary",
        "summary_file": table.source, "sweep_id": None, "games_hash": None, "n_games": base.n,
        "settings": _settings_dict(settings),
        "baseline": {"arm": baseline, "n_measured": base.n, "n_unmeasured": None, "n_missing": None,
                     "success_rate": p0, "ci": [p0 - z * math.sqrt(p0 * (1 - p0) / base.n),
                                                p0 + z * math.sqrt(p0 * (1 - p0) / base.n)]},
        "arms": arm_rows, "runs": runs, "pairs": pairs, "flags": [], "skipped": skipped,
    }
    return _clean(result)


def _summary_interaction(arms: list[ArmInfo], ca: _Curve, cb: _Curve) -> dict[str, Any]:
    """Binomial GLM on counts: successes ~ run x checkpoint vs run + checkpoint (LR, df K - 1), no game effects."""
    import warnings

    import statsmodels.api as sm
    from scipy import stats

    common, ia, ib = _shared(ca, cb)
    k = len(common)
    if k < 2:
        return {"method": "none", "statistic": None, "df": 0, "p_value": None, "n_games": None,
                "note": "fewer than 2 shared checkpoints"}
    js = list(ca.arm_idx[ia]) + list(cb.arm_idx[ib])
    succ = np.array([arms[j].successes for j in js], dtype=float)
    tot = np.array([arms[j].n for j in js], dtype=float)
    grp = np.repeat([0.0, 1.0], k)
    ck = np.zeros((2 * k, k - 1))
    for r in range(2 * k):
        c = r % k
        if c > 0:
            ck[r, c - 1] = 1.0
    red = np.column_stack([np.ones(2 * k), grp, ck])
    full = np.column_stack([red, ck * grp[:, None]])
    endog = np.column_stack([succ, tot - succ])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            llf_full = sm.GLM(endog, full, family=sm.families.Binomial()).fit().llf
            llf_red = sm.GLM(endog, red, family=sm.families.Binomial()).fit().llf
        except (ValueError, np.linalg.LinAlgError) as e:
            return {"method": "binomial GLM on counts", "statistic": None, "df": k - 1, "p_value": None,
                    "n_games": None, "note": f"fit failed ({type(e).__name__})"}
    lr = max(0.0, 2.0 * (llf_full - llf_red))
    return {"method": "binomial GLM on counts (no game effects; conservative for paired data), likelihood ratio",
            "statistic": lr, "df": k - 1, "p_value": float(stats.chi2.sf(lr, k - 1)), "n_games": None, "note": ""}
