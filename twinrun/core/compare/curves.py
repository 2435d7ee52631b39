"""Curves: each run's lifts over its checkpoints (peak, crossings, trend, reliability, test-retest), and the
statistics of a pair of curves that feed the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinrun.core.compare import stats as cs
from twinrun.core.compare.model import ArmInfo, CompareSettings
from twinrun.core.compare.verdict import NO_EVIDENCE, verdict


@dataclass
class _Curve:
    run: str
    steps: np.ndarray  # [K]
    arm_idx: np.ndarray  # [K] indices into the arm list
    lifts: np.ndarray  # [K]
    boot: np.ndarray  # [R, K]
    reliability: float
    test_retest: float | None = None


def _run_curves(arms: list[ArmInfo], lift: np.ndarray, boot_lift: np.ndarray, settings: CompareSettings,
                rng: np.random.Generator, *, ya: np.ndarray | None,
                adj_holm: np.ndarray) -> tuple[dict[str, Any], dict[str, _Curve]]:
    runs: dict[str, Any] = {}
    curves: dict[str, _Curve] = {}
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
        fmp_boot = B[:, -1] - np.nanmax(B, axis=1) if k else np.array([np.nan])
        slope = float(cs.linear_slope(steps, L)) if k >= 2 else None
        slope_boot = cs.linear_slope(steps, B) if k >= 2 else None
        rel = cs.reliability(L, B)
        entry: dict[str, Any] = {
            "arms": [arms[j].name for j in jj],
            "checkpoints": [int(s) for s in steps],
            "lifts": L.tolist(),
            "lift_ci": [[a, b] for a, b in zip(lo.tolist(), hi.tolist())],
            "peak_checkpoint": int(steps[peak]), "peak_lift": float(L[peak]),
            "peak_share": float(share[peak]),
            "argmax_distribution": {str(int(s)): float(v) for s, v in zip(steps, share)},
            "crossings": int(cs.strict_sign_changes(L)),
            "final_minus_peak": float(L[-1] - L[peak]),
            "final_minus_peak_ci": list(cs.percentile_ci(fmp_boot, settings.level)),
            "trend_per_step": slope,
            "trend_ci": list(cs.percentile_ci(slope_boot, settings.level)) if slope_boot is not None else None,
            "reliability": rel,
            "significant_holm": [int(steps[i]) for i, j in enumerate(jj) if adj_holm[j] < settings.alpha],
        }
        if ya is not None:
            entry["cochran_q"] = cs.cochran_q(ya[jj].T) if k >= 2 else None
        curve = _Curve(run, steps, jj, L, B, rel)
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


def _shared(ca: _Curve, cb: _Curve) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    common = np.intersect1d(ca.steps, cb.steps)
    ia = np.searchsorted(ca.steps, common)
    ib = np.searchsorted(cb.steps, common)
    return common, ia, ib


def _ceilings(ca: _Curve, cb: _Curve) -> tuple[float | None, float | None]:
    tt = [r for r in (ca.test_retest, cb.test_retest) if r is not None]
    ceiling_tt = None
    if tt:
        # a run without replicates is assumed as reliable as the one that has them
        ceiling_tt = float(math.sqrt(max(tt[0], 0.0) * max(tt[-1], 0.0)))
    rels = [ca.reliability, cb.reliability]
    ceiling_s = float(math.sqrt(rels[0] * rels[1])) if all(np.isfinite(rels)) else None
    return ceiling_tt, ceiling_s


def _pair_core(ca: _Curve, cb: _Curve, n_games: int, settings: CompareSettings, interaction: dict[str, Any],
               boot_label: str) -> dict[str, Any]:
    common, ia, ib = _shared(ca, cb)
    la, lb = ca.lifts[ia], cb.lifts[ib]
    out: dict[str, Any] = {"a": ca.run, "b": cb.run, "checkpoints": [int(s) for s in common], "n_checkpoints": len(common),
                           "n_games": n_games, "bootstrap": boot_label}
    ceiling_tt, ceiling_s = _ceilings(ca, cb)
    out["ceiling_test_retest"] = ceiling_tt
    out["ceiling_sampling"] = ceiling_s
    out["interaction"] = interaction
    if len(common) < 3:
        out.update({"pearson": None, "pearson_ci": [None, None], "spearman": None, "spearman_ci": [None, None]})
        out.update(verdict(None, (None, None), interaction.get("p_value"), settings, n_checkpoints=len(common)))
        out["n_to_decide"] = None
        return out
    ba, bb = ca.boot[:, ia], cb.boot[:, ib]
    pr = float(cs.row_pearson(la, lb))
    sr = float(cs.row_spearman(la, lb))
    pr_ci = cs.percentile_ci(cs.row_pearson(ba, bb), settings.level)
    sr_ci = cs.percentile_ci(cs.row_spearman(ba, bb), settings.level)
    out.update({"pearson": pr, "pearson_ci": list(pr_ci), "spearman": sr, "spearman_ci": list(sr_ci)})
    v = verdict(pr, pr_ci, interaction.get("p_value"), settings, n_checkpoints=len(common))
    out.update(v)
    if v["verdict"] == NO_EVIDENCE:
        n_corr, direction = cs.n_for_correlation_ci(la, ba, lb, bb, n_games, settings.level)
        n_int = None
        if interaction.get("statistic") is not None:
            n_int = cs.n_for_chi2_power(interaction["statistic"], int(interaction["df"]), n_games,
                                        settings.alpha, settings.power)
        cands = [(n, why) for n, why in ((n_corr, f"Pearson CI would exclude 0 ({direction})"),
                                          (n_int, f"interaction test at {settings.power:.0%} power")) if n is not None]
        if cands:
            n_dec, why = min(cands, key=lambda t: t[0])
            out["n_to_decide"] = n_dec
            out["criterion"] += (f" About {n_dec} games per arm would decide ({why}), if the observed curves were "
                                 "the truth.")
        else:
            out["n_to_decide"] = None
            out["criterion"] += (f" No sample size up to {int(cs.SCALE_FACTORS[-1])}x the games would decide: the "
                                 "observed curves are at noise level.")
    else:
        out["n_to_decide"] = None
    return out
