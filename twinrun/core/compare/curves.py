"""Curves: each run's lifts over its checkpoints (peak, crossings, trend, final vs peak, reliability, test-retest),
and the statistics of a pair of curves that feed the verdict (r, r on detrended lifts, the pointwise equivalence
band, the success-rate interaction, the games and streams that would decide).

A curve's `boot[R, K]` holds draws of its lifts under the comparison's noise model: with replicate streams,
parametric draws of the cell means from the between-stream variance (:mod:`.streams`); with one stream, the paired
bootstrap over games (conditional on the stream), widened by sqrt(DEFF) where the user states the intra-stream
correlation. Everything read from `boot` (argmax, trend, r; the lift CIs with one stream) inherits the model; with
streams the lift CIs are the Welch t intervals of the per-arm test (games.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinrun.core.compare import shape
from twinrun.core.compare import stats as cs
from twinrun.core.compare import streams as st
from twinrun.core.compare.model import ArmInfo, CompareSettings
from twinrun.core.compare.verdict import BAND_LEVEL, NO_EVIDENCE, ShapeEvidence, decide


@dataclass
class Curve:
    run: str
    steps: np.ndarray  # [K]
    arm_idx: np.ndarray  # [K] indices into the (cell) arm list
    lifts: np.ndarray  # [K]
    boot: np.ndarray  # [R, K]
    reliability: float
    test_retest: float | None = None
    framework: str | None = None
    seed: int | None = None
    model: st.CellModel | None = None  # stream lifts by checkpoint (replicate streams); None with one stream
    streams: int = 1  # fewest streams in any of its cells
    start: str | None = None  # the run's start (ArmInfo.run_start); None: not recorded
    start_hash: str | None = None  # its weights' hash (ArmInfo.run_start_hash); None: not recorded by hash


PerRun = Callable[[np.ndarray], dict[str, Any]]  # arm indices of a run (step order) -> its extra entries


def run_curves(arms: list[ArmInfo], lift: np.ndarray, boot_lift: np.ndarray, settings: CompareSettings,
               rng: np.random.Generator, *, adj_holm: np.ndarray, per_run: PerRun,
               models: dict[str, st.CellModel] | None = None,
               streams: np.ndarray | None = None,
               lift_ci: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict[str, Any], dict[str, Curve]]:
    """Per-run curve statistics. arms: one per (run, checkpoint) cell; lift[A], boot_lift[R, A] over them;
    per_run(jj) adds the run's model-specific entries (final vs peak, checkpoint effect, test-retest); models:
    run -> its CellModel (stream mode, cells in step order); streams[A]: streams per cell; lift_ci: the arms'
    lift intervals (lo[A], hi[A]) where the caller has them from its test (streams), else percentiles of boot."""
    runs: dict[str, Any] = {}
    curves: dict[str, Curve] = {}
    run_names = sorted({a.run for a in arms if a.role == "checkpoint" and a.run is not None})
    for run in run_names:
        prim = [(a.checkpoint, j) for j, a in enumerate(arms) if a.run == run and a.role == "checkpoint"]
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
        lo, hi = (lift_ci[0][jj], lift_ci[1][jj]) if lift_ci is not None else cs.percentile_ci(B, settings.level)
        slope = float(cs.linear_slope(steps, L)) if k >= 2 else None
        slope_boot = cs.linear_slope(steps, B) if k >= 2 else None
        rel = shape.reliability(L, B)
        first = arms[jj[0]]
        n_streams = int(streams[jj].min()) if streams is not None else 1
        entry: dict[str, Any] = {
            "arms": [arms[j].name for j in jj],
            "framework": first.framework, "seed": first.seed,
            "checkpoints": [int(s) for s in steps],
            "streams": [int(streams[j]) for j in jj] if streams is not None else [1] * k,
            "lifts": L.tolist(),
            "lift_ci": [[a, b] for a, b in zip(lo.tolist(), hi.tolist())],
            "peak_checkpoint": int(steps[peak]), "peak_lift": float(L[peak]),
            "peak_share": float(share[peak]),
            "argmax_distribution": {str(int(s)): float(v) for s, v in zip(steps, share)},
            "crossings": int(cs.strict_sign_changes(L)),
            # in-sample final - peak: the peak is the max of noisy lifts, so this is biased low (winner's curse);
            # `final_vs_peak` is the honest comparison
            "final_minus_peak": float(L[-1] - L[peak]),
            "trend_per_step": slope,
            "trend_ci": list(cs.percentile_ci(slope_boot, settings.level)) if slope_boot is not None else None,
            "shape_noise": shape.shape_noise(B) if k >= 2 else None,
            "reliability": rel,
            "significant_holm": [int(steps[i]) for i, j in enumerate(jj) if adj_holm[j] < settings.alpha],
        }
        entry.update(per_run(jj))
        entry.setdefault("final_vs_peak", None)
        entry.setdefault("test_retest", None)
        tt = entry["test_retest"]
        curve = Curve(run, steps, jj, L, B, rel, framework=first.framework, seed=first.seed,
                      model=(models or {}).get(run), streams=n_streams, start=first.run_start,
                      start_hash=first.run_start_hash,
                      test_retest=tt["r"] if tt else None)
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


@dataclass(frozen=True)
class PairNoise:
    """What a pair's interaction and band are computed from: the stacked cell means [a; b] (2K) and their
    covariance (df: the error degrees of freedom, None = taken as known), the noise for the games/streams that
    would decide (None: cannot say), how it was computed, the fewest streams per cell, the stated ICC."""

    cov: np.ndarray
    df: float | None
    noise: st.Noise | None
    method: str
    streams: int
    stated_icc: float | None
    hotelling_n: int | None = None  # the covariance was estimated from this many games (Hotelling's F)


def pair_core(ca: Curve, cb: Curve, n_games: int, settings: CompareSettings, pn: PairNoise | None,
              boot_label: str, *, confounded: bool = False, n_pairs: int = 1) -> tuple[dict[str, Any], ShapeEvidence | None]:
    """Everything about one pair of curves except the verdict (see :func:`finish_pairs`, which applies the
    family correction over pairs first). pn: None where fewer than 2 checkpoints are shared."""
    common, ia, ib = shared_steps(ca, cb)
    la, lb = ca.lifts[ia], cb.lifts[ib]
    out: dict[str, Any] = {"a": ca.run, "b": cb.run, "relation": relation(ca, cb), "checkpoints": [int(s) for s in common],
                           "n_checkpoints": len(common), "n_games": n_games, "bootstrap": boot_label,
                           "streams": pn.streams if pn else min(ca.streams, cb.streams)}
    ceiling_tt, ceiling_s = _ceilings(ca, cb)
    out["ceiling_test_retest"] = ceiling_tt
    out["ceiling_sampling"] = ceiling_s
    none2 = [None, None]
    if pn is None or len(common) < 2:
        out["interaction"] = {"method": "none", "statistic": None, "df": 0, "p_value": None,
                              "note": "fewer than 2 shared checkpoints"}
    else:
        means = np.concatenate([la, lb])
        out["interaction"] = {"method": pn.method, "scale": "success rate",
                              **st.interaction_wald(means, pn.cov, pn.df, pn.hotelling_n)}
        if pn.streams < 2:
            out["interaction"]["conditional_on_streams"] = pn.stated_icc is None
    if len(common) < 3:
        out.update({"pearson": None, "pearson_ci": none2, "spearman": None, "spearman_ci": none2,
                    "pearson_detrended": None, "pearson_detrended_ci": none2, "equivalence": None})
        out.update(decide(ShapeEvidence(ca.run, cb.run, len(common), n_games), settings))
        out["n_to_decide"] = None
        out["n_to_decide_detail"] = None
        return out, None
    assert pn is not None
    ba, bb = ca.boot[:, ia], cb.boot[:, ib]
    pr = float(cs.row_pearson(la, lb))
    r_boot = cs.row_pearson(ba, bb)
    pr_ci = cs.percentile_ci(r_boot, settings.level)
    fam_level = 1.0 - (1.0 - settings.level) / max(n_pairs, 1)  # Bonferroni over the pairs for the "opposite" claim
    fam_ci = cs.percentile_ci(r_boot, fam_level)
    da, db = shape.detrend(common, la), shape.detrend(common, lb)
    dr = float(cs.row_pearson(da, db))
    dr_ci = cs.percentile_ci(cs.row_pearson(shape.detrend(common, ba), shape.detrend(common, bb)), settings.level)
    band_df = pn.df if pn.df is not None else (pn.hotelling_n - 1 if pn.hotelling_n else None)
    band = st.pointwise_band(np.concatenate([la, lb]), pn.cov, band_df, BAND_LEVEL)
    out.update({
        "pearson": pr, "pearson_ci": list(pr_ci), "pearson_ci_family": list(fam_ci), "family_level": fam_level,
        "spearman": float(cs.row_spearman(la, lb)),
        "spearman_ci": list(cs.percentile_ci(cs.row_spearman(ba, bb), settings.level)),
        "pearson_detrended": dr, "pearson_detrended_ci": list(dr_ci),
        "equivalence": st.equivalence_record(band, BAND_LEVEL, settings.delta),
    })
    evidence = ShapeEvidence(
        ca.run, cb.run, len(common), n_games, pearson=pr, pearson_ci=(float(fam_ci[0]), float(fam_ci[1])),
        detrended=dr, detrended_ci=(float(dr_ci[0]), float(dr_ci[1])),
        interaction_p=out["interaction"].get("p_value"), band_half_width=band["half_width_max"],
        confounded=confounded, streams=pn.streams, stated_icc=pn.stated_icc, n_pairs=n_pairs)
    out["_noise"] = pn.noise
    return out, evidence


def finish_pairs(items: list[tuple[dict[str, Any], ShapeEvidence | None]], settings: CompareSettings) -> list[dict[str, Any]]:
    """The pair verdicts as a family: Holm over the pairs' interaction p-values, then
    the rule, then, where nothing is decided, the games per stream and the streams that would decide."""
    from dataclasses import replace

    ps = [(i, ev.interaction_p) for i, (_, ev) in enumerate(items) if ev is not None and ev.interaction_p is not None]
    adj = dict(zip([i for i, _ in ps], cs.holm(np.array([p for _, p in ps])))) if ps else {}
    out = []
    for i, (pair, ev) in enumerate(items):
        noise = pair.pop("_noise", None)
        if ev is None:
            out.append(pair)
            continue
        if i in adj:
            pair["interaction"]["p_holm_pairs"] = float(adj[i])
            ev = replace(ev, interaction_p=float(adj[i]), n_pairs=len(ps))
        v = decide(ev, settings)
        pair.update(v)
        pair["n_to_decide"], pair["n_to_decide_detail"] = None, None
        if v["verdict"] == NO_EVIDENCE and (noise is not None or (ev.streams is not None and ev.streams < 2)):
            pair["n_to_decide"], pair["n_to_decide_detail"], sentence = streams_to_decide(noise, settings)
            pair["explanation"] += " " + sentence
        out.append(pair)
    return out


def streams_to_decide(noise: st.Noise | None,
                      settings: CompareSettings) -> tuple[int | None, dict[str, Any] | None, str]:
    """The streams per arm, at the games per stream played (the protocol's: a stream is the held-out games in
    order through one repository, so its length is part of what is measured), that would decide under the
    verdict's rule, for the pre-specified alternatives: identical shapes shown within +-delta by the pointwise
    band, and one checkpoint delta off detected by the interaction test, each with the stated power. None where no
    number up to ``settings.max_streams`` does; then the sentence says so and names the cap."""
    d = f"{100 * settings.delta:g} pp"
    if noise is None:
        return None, None, ("One stream per arm cannot decide a shape however many games it plays: play >= 2 streams "
                            "per arm (`twinrun design` sizes them from a pilot's intra-stream correlation).")
    res = st.to_decide(noise, settings.delta, settings.alpha, settings.power, BAND_LEVEL,
                       max_streams=settings.max_streams, seed=settings.seed)
    res.update({"power": settings.power, "delta": settings.delta,
                "alternatives": (f"identical shapes shown within +-{d} by the pointwise {BAND_LEVEL:.0%} intervals; "
                                 f"one checkpoint {d} off the other run detected at alpha {settings.alpha:g}")})
    pct = f"{settings.power:.0%}"
    m, cap = res["games_per_stream"], res["max_streams"]
    if res["streams"] is not None:
        what = (f"{res['streams']} streams per arm (now {res['at_streams']}) at the protocol's {m} games per stream, "
                "for this pair of runs")
    else:
        what = (f"no number of streams up to {cap} per arm at the protocol's {m} games per stream (more games per "
                "stream are not the protocol's; a larger --delta, or a higher --max-streams)")
    return res["streams"], res, (f"To decide with {pct} power (identical shapes within +-{d}, or a {d} profile "
                                 f"difference): {what}; agreement also needs r above {settings.rho0:g}, which only "
                                 "curves with a shape beyond noise reach.")
