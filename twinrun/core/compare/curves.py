"""Curves: each run's lifts over its checkpoints (peak, crossings, trend, final vs peak, reliability, test-retest),
and the statistics of a pair of curves that feed the verdict (r, r on detrended lifts, the equivalence band, the
interaction, the games that would decide)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinrun.core.compare import power as pw
from twinrun.core.compare import shape
from twinrun.core.compare import stats as cs
from twinrun.core.compare.model import ArmInfo, CompareSettings
from twinrun.core.compare.verdict import BAND_LEVEL, NO_EVIDENCE, ShapeEvidence, decide


@dataclass
class Curve:
    run: str
    steps: np.ndarray  # [K]
    arm_idx: np.ndarray  # [K] indices into the arm list
    lifts: np.ndarray  # [K]
    boot: np.ndarray  # [R, K]
    reliability: float
    test_retest: float | None = None
    framework: str | None = None
    seed: int | None = None


FinalVsPeak = Callable[[np.ndarray], dict[str, Any]]  # arm indices of a run (step order) -> its final-vs-peak entry


def run_curves(arms: list[ArmInfo], lift: np.ndarray, boot_lift: np.ndarray, settings: CompareSettings,
               rng: np.random.Generator, *, ya: np.ndarray | None, adj_holm: np.ndarray,
               final_vs_peak: FinalVsPeak) -> tuple[dict[str, Any], dict[str, Curve]]:
    """Per-run curve statistics. lift[A], boot_lift[R, A] over `arms`; ya[A, G] per-game outcomes (None for
    summaries: no Cochran's Q); final_vs_peak computes the run's final-vs-peak entry from its arm indices."""
    runs: dict[str, Any] = {}
    curves: dict[str, Curve] = {}
    run_names = sorted({a.run for a in arms if a.role == "checkpoint" and a.run is not None})
    for run in run_names:
        prim = [(a.checkpoint, j) for j, a in enumerate(arms) if a.run == run and a.replicate == 0 and a.role == "checkpoint"]
        prim = [(s, j) for s, j in sorted(prim, key=lambda t: (t[0] is None, t[0])) if np.isfinite(lift[j])]
        if not prim:
            runs[run] = {"checkpoints": [], "note": "no checkpoint with measured games"}
            continue
        steps = np.array([s for s, _ in prim], dtype=np.float64)
        jj = np.array([j for _, j in prim])
        L = lift[jj]
        B = boot_lift[:, jj]
        k = len(jj)
        peak = int(np.argmax(L))
        share = cs.argmax_distribution(B, rng)
        lo, hi = cs.percentile_ci(B, settings.level)
        slope = float(cs.linear_slope(steps, L)) if k >= 2 else None
        slope_boot = cs.linear_slope(steps, B) if k >= 2 else None
        rel = shape.reliability(L, B)
        first = arms[jj[0]]
        entry: dict[str, Any] = {
            "arms": [arms[j].name for j in jj],
            "framework": first.framework, "seed": first.seed,
            "checkpoints": [int(s) for s in steps],
            "lifts": L.tolist(),
            "lift_ci": [[a, b] for a, b in zip(lo.tolist(), hi.tolist())],
            "peak_checkpoint": int(steps[peak]), "peak_lift": float(L[peak]),
            "peak_share": float(share[peak]),
            "argmax_distribution": {str(int(s)): float(v) for s, v in zip(steps, share)},
            "crossings": int(cs.strict_sign_changes(L)),
            # in-sample final - peak: the peak is the max of noisy lifts, so this is biased low (winner's curse);
            # `final_vs_peak` is the honest comparison
            "final_minus_peak": float(L[-1] - L[peak]),
            "final_vs_peak": final_vs_peak(jj) if k >= 2 else None,
            "trend_per_step": slope,
            "trend_ci": list(cs.percentile_ci(slope_boot, settings.level)) if slope_boot is not None else None,
            "shape_noise": shape.shape_noise(B) if k >= 2 else None,
            "reliability": rel,
            "significant_holm": [int(steps[i]) for i, j in enumerate(jj) if adj_holm[j] < settings.alpha],
        }
        if ya is not None:
            entry["cochran_q"] = cs.cochran_q(ya[jj].T) if k >= 2 else None
        curve = Curve(run, steps, jj, L, B, rel, framework=first.framework, seed=first.seed)
        # test-retest: the same checkpoints evaluated again (replicate 1) in this sweep
        reps = {a.checkpoint: j for j, a in enumerate(arms) if a.run == run and a.replicate == 1}
        shared = [(i, reps[int(s)]) for i, s in enumerate(steps) if int(s) in reps and np.isfinite(lift[reps[int(s)]])]
        if len(shared) >= 3:
            i0 = np.array([i for i, _ in shared])
            i1 = np.array([j for _, j in shared])
            r_tt = float(cs.row_pearson(L[i0], lift[i1]))
            r_boot = cs.row_pearson(B[:, i0], boot_lift[:, i1])
            entry["test_retest"] = {"r": r_tt, "ci": list(cs.percentile_ci(r_boot, settings.level)),
                                    "checkpoints": [int(steps[i]) for i in i0]}
            curve.test_retest = r_tt
        else:
            entry["test_retest"] = None
        runs[run] = entry
        curves[run] = curve
    return runs, curves


def shared_steps(ca: Curve, cb: Curve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    common = np.intersect1d(ca.steps, cb.steps)
    ia = np.searchsorted(ca.steps, common)
    ib = np.searchsorted(cb.steps, common)
    return common, ia, ib


def _ceilings(ca: Curve, cb: Curve) -> tuple[float | None, float | None]:
    tt = [r for r in (ca.test_retest, cb.test_retest) if r is not None]
    ceiling_tt = None
    if tt:
        # a run without replicates is assumed as reliable as the one that has them
        ceiling_tt = float(math.sqrt(max(tt[0], 0.0) * max(tt[-1], 0.0)))
    rels = [ca.reliability, cb.reliability]
    ceiling_s = float(math.sqrt(rels[0] * rels[1])) if all(np.isfinite(rels)) else None
    return ceiling_tt, ceiling_s


def relation(ca: Curve, cb: Curve) -> str | None:
    """How two runs relate: two seeds of one framework, or two frameworks (None where frameworks are unknown)."""
    if ca.framework is None or cb.framework is None:
        return None
    return "seeds of one framework" if ca.framework == cb.framework else "across frameworks"


def pair_core(ca: Curve, cb: Curve, n_games: int, settings: CompareSettings, interaction: dict[str, Any],
              boot_label: str, *, confounded: bool = False) -> dict[str, Any]:
    """Everything about one pair of curves, with its verdict. `interaction`: the run x checkpoint test (clogit)."""
    common, ia, ib = shared_steps(ca, cb)
    la, lb = ca.lifts[ia], cb.lifts[ib]
    out: dict[str, Any] = {"a": ca.run, "b": cb.run, "relation": relation(ca, cb), "checkpoints": [int(s) for s in common],
                           "n_checkpoints": len(common), "n_games": n_games, "bootstrap": boot_label}
    ceiling_tt, ceiling_s = _ceilings(ca, cb)
    out["ceiling_test_retest"] = ceiling_tt
    out["ceiling_sampling"] = ceiling_s
    amp = interaction.get("amplitude")
    if amp:  # name the runs: the scale is the scaled run's profile over the reference run's
        ref = ca.run if amp["reference"] == 0 else cb.run
        amp.update({"reference_run": ref, "scaled_run": cb.run if ref == ca.run else ca.run})
    out["interaction"] = interaction
    none2 = [None, None]
    if len(common) < 3:
        out.update({"pearson": None, "pearson_ci": none2, "spearman": None, "spearman_ci": none2,
                    "pearson_detrended": None, "pearson_detrended_ci": none2, "equivalence": None})
        out.update(decide(ShapeEvidence(ca.run, cb.run, len(common), n_games), settings))
        out["n_to_decide"] = None
        out["n_to_decide_detail"] = None
        return out
    ba, bb = ca.boot[:, ia], cb.boot[:, ib]
    pr = float(cs.row_pearson(la, lb))
    pr_ci = cs.percentile_ci(cs.row_pearson(ba, bb), settings.level)
    da, db = shape.detrend(common, la), shape.detrend(common, lb)
    dr = float(cs.row_pearson(da, db))
    dr_ci = cs.percentile_ci(cs.row_pearson(shape.detrend(common, ba), shape.detrend(common, bb)), settings.level)
    band = shape.centred_difference_band(la, ba, lb, bb, BAND_LEVEL)
    out.update({
        "pearson": pr, "pearson_ci": list(pr_ci),
        "spearman": float(cs.row_spearman(la, lb)),
        "spearman_ci": list(cs.percentile_ci(cs.row_spearman(ba, bb), settings.level)),
        "pearson_detrended": dr, "pearson_detrended_ci": list(dr_ci),
        "equivalence": {"level": BAND_LEVEL, "delta": settings.delta, "difference": band["diff"].tolist(),
                        "band": [[a, b] for a, b in zip(band["lo"].tolist(), band["hi"].tolist())],
                        "half_width_max": band["half_width_max"],
                        "within_delta": bool(band["half_width_max"] <= settings.delta)},
    })
    evidence = ShapeEvidence(
        ca.run, cb.run, len(common), n_games, pearson=pr, pearson_ci=(float(pr_ci[0]), float(pr_ci[1])),
        detrended=dr, detrended_ci=(float(dr_ci[0]), float(dr_ci[1])), interaction_p=interaction.get("p_value"),
        amplitude=interaction.get("amplitude"), band_half_width=band["half_width_max"], confounded=confounded)
    v = decide(evidence, settings)
    out.update(v)
    out["n_to_decide"], out["n_to_decide_detail"] = None, None
    if v["verdict"] == NO_EVIDENCE:
        out["n_to_decide"], out["n_to_decide_detail"], sentence = games_to_decide(band, n_games, settings)
        out["explanation"] += " " + sentence
    return out


def games_to_decide(band: dict[str, Any], n_games: int, settings: CompareSettings) -> tuple[int | None, dict[str, Any], str]:
    """Games per arm that would decide, for the pre-specified alternatives: identical shapes shown equivalent
    within +-delta, and a profile difference of delta detected by an interaction test, each with the stated power.
    The noise at n games (the bootstrap of the centred difference) scales as 1/sqrt(games); no observed effect is
    taken as the truth."""
    n_eq = pw.n_for_equivalence(band["dev"], band["c"], settings.delta, n_games, settings.power)
    n_int = pw.n_for_profile_difference(band["dev"], settings.delta, n_games, settings.alpha, settings.power)
    detail = {"equivalence_if_same_shape": n_eq, "profile_difference_of_delta": n_int, "power": settings.power,
              "delta": settings.delta,
              "alternatives": (f"identical shapes shown within +-{100 * settings.delta:g} pp by the "
                               f"{BAND_LEVEL:.0%} band; one checkpoint {100 * settings.delta:g} pp off the other run "
                               f"detected at alpha {settings.alpha:g}")}
    pct = f"{settings.power:.0%}"
    if n_eq is None or n_int is None:
        return None, detail, ("No sample size up to 1000x the games would decide at "
                              f"{pct} power for a +-{100 * settings.delta:g} pp margin.")
    n = max(n_eq, n_int)
    return n, detail, (f"About {n} games per arm would decide with {pct} power ({n_eq} to show identical shapes within "
                       f"+-{100 * settings.delta:g} pp, {n_int} to detect a {100 * settings.delta:g} pp profile "
                       f"difference); agreement also needs r above {settings.rho0:g}, which more games bring only to "
                       "curves that have a shape beyond noise.")
