"""Frameworks and seeds: runs are grouped by framework (the backend) and training seed, and a framework verdict is
judged against the variation between seeds of one framework.

Seeds pair where seed i of both frameworks shares its start and the sweep's plans (:func:`seed_pairing`): the
verdict is then tested within seed (:func:`shape.paired_profile_anova`: the pairs' difference profiles), and the
band and r's draws use the pairs' joint covariance. Otherwise, with >= 2 seeds in each of two frameworks, the
framework x checkpoint mean square of the runs' centred lift
curves is tested against the seed(framework) x checkpoint mean square (split-plot F, seeds random: the seed
pairs' differences are the reference; degrees of freedom corrected for non-sphericity, Greenhouse-Geisser /
Huynh-Feldt), and the framework mean curves get the pair verdict's other checks from a
parametric resampling of that seed variation (the variance drawn from its scaled inverse chi-square, so a few
seeds give wide intervals). With one run per framework, framework and seed are confounded and the output says so.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any

import numpy as np
from scipy import stats

from twinrun.core.compare import shape
from twinrun.core.compare import stats as cs
from twinrun.core.compare.curves import Curve
from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings
from twinrun.core.compare.verdict import BAND_LEVEL, ShapeEvidence, decide

CONFOUNDED = ("one run per framework: framework and RL seed are confounded, so a framework difference cannot be told "
              "from seed variance (the earlier reproduction's three TRL seeds peaked at steps 20, 35 and 55); train "
              ">= 2 seeds per framework (twinrun run --seeds 42,123,456)")


def apply_groups(arms: list[ArmInfo], settings: CompareSettings) -> None:
    """--group RUN=FRAMEWORK[@SEED] overrides what the sweep recorded (in place)."""
    runs = {a.run for a in arms if a.run is not None}
    for run, framework, seed in settings.groups:
        if run not in runs:
            raise CompareError(f"--group: run {run!r} is not in this comparison (fix: one of {', '.join(sorted(runs))})")
        for a in arms:
            if a.run == run:
                a.framework, a.seed = framework, seed


def grouping(curves: dict[str, Curve]) -> dict[str, list[Curve]]:
    out: dict[str, list[Curve]] = {}
    for c in curves.values():
        if c.framework is not None:
            out.setdefault(c.framework, []).append(c)
    return out


def is_confounded(curves: dict[str, Curve]) -> bool:
    groups = grouping(curves)
    return len(groups) >= 2 and all(len(v) == 1 for v in groups.values())


def analyse(curves: dict[str, Curve], pairs: list[dict[str, Any]], settings: CompareSettings, *,
            plans: tuple[bool | None, str] = (None, "")) -> dict[str, Any]:
    """The framework (group) comparisons. plans: were the sweep's streams played under plans shared by every arm
    (True / False, why; None: not recorded, e.g. published summaries), one of seed_pairing's conditions."""
    groups = grouping(curves)
    unknown = sorted(r for r, c in curves.items() if c.framework is None)
    out: dict[str, Any] = {
        "groups": {f: [{"run": c.run, "seed": c.seed} for c in cs_] for f, cs_ in sorted(groups.items())},
        "unknown": unknown, "confounded": is_confounded(curves), "comparisons": [], "note": "",
    }
    if not groups:
        out["note"] = ("frameworks unknown (no backend recorded for any run): each run is its own curve (fix: "
                       "--group RUN=FRAMEWORK[@SEED])")
        return out
    if out["confounded"]:
        out["note"] = CONFOUNDED
    for fa, fb in combinations(sorted(groups), 2):
        out["comparisons"].append(_framework_pair(fa, groups[fa], fb, groups[fb], pairs, settings, plans))
    return out


def _pair_row(p: dict[str, Any]) -> dict[str, Any]:
    return {"a": p["a"], "b": p["b"], "pearson": p.get("pearson"),
            "interaction_p": (p.get("interaction") or {}).get("p_value"), "verdict": p.get("verdict")}


def seed_pairing(ca: list[Curve], cb: list[Curve], design: str, *,
                 plans: tuple[bool | None, str] = (None, "")) -> dict[str, Any]:
    """Do two groups' runs pair by seed? design: "auto" | "paired" | "independent"; plans: (shared, why) of the
    sweep's stream plans (None: not recorded).

    auto pairs when every run records its seed, every seed appears once in each group and the two groups hold the
    same seeds, no pair's recorded starts differ (by the weights' hash where both runs have one, else by name; a
    start not recorded pairs on the seed alone, and `why` says so),
    and the sweep did not play its streams under plans that differ between arms. Pairing by seed label is decided
    before any outcome is seen, so the paired test stays valid where runs turn out not to correlate (it then only
    spends half the error df); the provenance keeps auto from pairing what the records say was not paired.
    "paired" forces the pairing (one-line CompareError where seeds do not match); "independent" forces the split-plot.
    Returns {"design", "why", "pairs": [[run_a, run_b, seed], ...] (by seed), "unpaired": [run, ...]}."""
    if design not in ("auto", "paired", "independent"):
        raise CompareError(f"seed_design: {design!r} (fix: one of auto, paired, independent)")
    if design == "independent":
        return {"design": "independent", "why": "asked for (--seed-design independent)",
                "pairs": [], "unpaired": sorted(c.run for c in ca + cb)}
    problem = _unmatched(ca, cb)
    if problem is not None:
        if design == "paired":
            raise CompareError(f"--seed-design paired: {problem} (fix: --group RUN=FRAMEWORK@SEED to state the seeds, "
                               "or --seed-design independent)")
        return {"design": "independent", "why": f"seeds do not pair: {problem}", "pairs": [],
                "unpaired": sorted(c.run for c in ca + cb)}
    by_b = {c.seed: c for c in cb}
    pairs = [(x, by_b[x.seed]) for x in sorted(ca, key=lambda c: c.seed)]  # type: ignore[arg-type,return-value]
    rows = [[x.run, y.run, int(x.seed)] for x, y in pairs]  # type: ignore[arg-type]
    differ = [d for x, y in pairs if (d := _starts_differ(x, y))]
    unknown = [r for x, y in pairs for r in (x, y) if r.start is None and r.start_hash is None]
    by_hash = all(r.start_hash is not None for x, y in pairs for r in (x, y))
    shared, plans_why = plans
    if design == "paired":
        notes = "; ".join(differ + ([plans_why] if shared is False else []))
        return {"design": "paired", "why": "asked for (--seed-design paired)" + (f", although {notes}" if notes else ""),
                "pairs": rows, "unpaired": []}
    if differ or shared is False:
        why = "; ".join(differ[:2] + ([f"stream plans not shared ({plans_why})"] if shared is False else []))
        return {"design": "independent", "why": f"seeds do not pair: {why}", "pairs": [],
                "unpaired": sorted(c.run for c in ca + cb)}
    start_txt = ("start not recorded" + (f" for {', '.join(r.run for r in unknown[:3])}" if len(unknown) < 2 * len(pairs)
                                         else "") + ", paired on the seed alone") if unknown else (
        "the same start (by its weights' hash)" if by_hash else "the same start (by name: not recorded by hash)")
    plans_txt = {True: "shared stream plans", False: "", None: "stream plans not recorded"}[shared]
    return {"design": "paired", "why": f"seed i of each group: the same seed, {start_txt}, {plans_txt}",
            "pairs": rows, "unpaired": []}


def _starts_differ(x: Curve, y: Curve) -> str | None:
    """Why two runs' recorded starts differ (None: the same, or not recorded on both sides). The weights' hash
    decides where both runs have one (a warm start rebuilt on another machine keeps its name, not its weights);
    else the name."""
    if x.start_hash is not None and y.start_hash is not None:
        if x.start_hash == y.start_hash:
            return None
        return (f"{x.run} starts from {x.start} (weights {x.start_hash}), {y.run} from {y.start} "
                f"(weights {y.start_hash})")
    if x.start is not None and y.start is not None and x.start != y.start:
        return f"{x.run} starts from {x.start}, {y.run} from {y.start}"
    return None


def _unmatched(ca: list[Curve], cb: list[Curve]) -> str | None:
    """Why two groups' runs cannot pair one to one by seed (None: they can)."""
    for c in ca + cb:
        if c.seed is None:
            return f"run {c.run} records no seed"
    for grp in (ca, cb):
        dup = [s for s, n in Counter(c.seed for c in grp).items() if n > 1]
        if dup:
            runs = ", ".join(c.run for c in grp if c.seed == dup[0])
            return f"seed {dup[0]} appears twice in one group ({runs})"
    sa, sb = {c.seed for c in ca}, {c.seed for c in cb}
    if sa != sb:
        lone = sorted((c for c in ca + cb if c.seed not in sa & sb), key=lambda c: c.run)
        return ("runs " + ", ".join(f"{c.run} (seed {c.seed})" for c in lone[:4]) + (" ..." if len(lone) > 4 else "")
                + " have no partner at their seed in the other group")
    return None


# r's interval reads its draws at tails R_TAIL_SHRINK times thinner than its level's: at the stated level's own
# quantiles the draws covered the true r in only 77-88% of planted draws at the controls' noise (bench/seed_design.py,
# docs/measured.md: the draws add noise to curves that already hold it, so their spread understates r's). A
# calibration of the nominal level (Loh 1987) on planted controls with the real structure; 1 restores the old interval.
R_TAIL_SHRINK = 5.0


def r_interval(r: float, draws: np.ndarray, level: float) -> tuple[float, float]:
    """r's interval from its draws, always containing r: on Fisher's z, the union of the draws' percentile interval
    and the interval of their median-centred spread reflected about z = atanh r, [z - (q_hi - med), z + (med - q_lo)],
    both at the tails (1 - level) / 2 / R_TAIL_SHRINK (the 99% quantiles for a 95% interval). Why the union: the
    draws are attenuated toward 0 and the percentile part alone can lie below r (0.972 [0.568, 0.965] on the committed
    negative control). Why the thinner tails: measured coverage (R_TAIL_SHRINK). NaN where r or the draws are
    undefined."""
    z = np.arctanh(np.clip(draws[np.isfinite(draws)], -0.999999, 0.999999))
    if not np.isfinite(r) or z.size < 2:
        return float("nan"), float("nan")
    z0 = float(np.arctanh(np.clip(r, -0.999999, 0.999999)))
    a = (1.0 - level) / 2.0 / R_TAIL_SHRINK
    q_lo, med, q_hi = np.quantile(z, [a, 0.5, 1.0 - a])
    return float(np.tanh(min(z0 - (q_hi - med), q_lo))), float(np.tanh(max(z0 + (med - q_lo), q_hi)))


R_INTERVAL = ("union on Fisher's z of the draws' percentile interval and their median-centred spread reflected about "
              "r, read at the draws' 99% quantiles for a 95% interval (the level calibrated on planted controls: "
              "at 95% quantiles it covered the true r in 77-88% of draws; bench/seed_design.py, docs/measured.md)")


def _framework_pair(fa: str, ca: list[Curve], fb: str, cb: list[Curve], pairs: list[dict[str, Any]],
                    settings: CompareSettings, plans: tuple[bool | None, str] = (None, "")) -> dict[str, Any]:
    runs_a, runs_b = {c.run for c in ca}, {c.run for c in cb}
    within = [_pair_row(p) for p in pairs if {p["a"], p["b"]} <= runs_a or {p["a"], p["b"]} <= runs_b]
    between = [_pair_row(p) for p in pairs if (p["a"] in runs_a and p["b"] in runs_b)
               or (p["a"] in runs_b and p["b"] in runs_a)]

    def mean_r(rows: list[dict[str, Any]]) -> float | None:
        rs = [r["pearson"] for r in rows if r["pearson"] is not None]
        return float(np.mean(rs)) if rs else None

    out: dict[str, Any] = {"a": fa, "b": fb, "seeds_a": len(ca), "seeds_b": len(cb), "seed_pairs": within,
                           "framework_pairs": between, "seed_pairs_mean_r": mean_r(within),
                           "framework_pairs_mean_r": mean_r(between), "verdict": None}
    if len(ca) < 2 or len(cb) < 2:
        out["note"] = (f"{fa}: {len(ca)} seed(s), {fb}: {len(cb)} seed(s); a framework verdict needs >= 2 seeds per "
                       "framework, so the run-pair verdicts compare runs, with framework and seed confounded")
        return out
    pairing = seed_pairing(ca, cb, settings.seed_design, plans=plans)
    paired = pairing["design"] == "paired"
    if paired:  # row i of each matrix is seed i's run
        by = {c.run: c for c in ca + cb}
        ca, cb = [by[p[0]] for p in pairing["pairs"]], [by[p[1]] for p in pairing["pairs"]]
    steps = sorted(set.intersection(*[set(c.steps.tolist()) for c in ca + cb]))
    k = len(steps)

    def mat(cs_: list[Curve]) -> np.ndarray:
        return np.array([[c.lifts[int(np.searchsorted(c.steps, s))] for s in steps] for c in cs_])

    ma, mb = mat(ca), mat(cb)
    if k < 2:
        anova = None
    else:
        anova = shape.paired_profile_anova(ma, mb) if paired else shape.profile_anova({fa: ma, fb: mb})
    out["seed_design"] = {**pairing, "pair_r": (anova or {}).get("pair_r"), "pair_r_mean": (anova or {}).get("pair_r_mean")}
    out.update({"checkpoints": [int(s) for s in steps], "anova": anova,
                "mean_curve_a": ma.mean(axis=0).tolist(), "mean_curve_b": mb.mean(axis=0).tolist()})
    if anova is None or k < 3:
        out["note"] = "fewer than 3 checkpoints shared by every run of both frameworks"
        out.update(decide(ShapeEvidence(fa, fb, k, None), settings))
        return out
    rng = np.random.default_rng(settings.seed + 7)
    n_draw = min(settings.n_boot, 4000)
    la, lb = ma.mean(axis=0), mb.mean(axis=0)
    da, db, cov, band_df = (_paired_draws if paired else _nested_draws)(ma, mb, anova, n_draw, rng)
    x = np.asarray(steps, dtype=np.float64)
    pr = float(cs.row_pearson(la, lb))
    pr_ci = r_interval(pr, cs.row_pearson(da, db), settings.level)
    dr = float(cs.row_pearson(shape.detrend(x, la), shape.detrend(x, lb)))
    dr_ci = r_interval(dr, cs.row_pearson(shape.detrend(x, da), shape.detrend(x, db)), settings.level)
    from twinrun.core.compare import streams as st

    band = st.pointwise_band(np.concatenate([la, lb]), cov, band_df, BAND_LEVEL)
    method = ("difference profiles within seed (group x checkpoint against seed x checkpoint of the pairs' "
              "differences), repeated-measures F" if paired else
              "framework x checkpoint against seed(framework) x checkpoint, split-plot F")
    what = ("framework x checkpoint term (within seed, against the pairs' seed x checkpoint)" if paired
            else "framework x checkpoint term (against seed x checkpoint)")
    out.update({"pearson": pr, "pearson_ci": list(pr_ci), "pearson_detrended": dr, "pearson_detrended_ci": list(dr_ci),
                "r_interval": R_INTERVAL,
                "equivalence": st.equivalence_record(band, BAND_LEVEL, settings.delta),
                "interaction": {"method": method, **anova}})
    ev = ShapeEvidence(fa, fb, k, None, pearson=pr, pearson_ci=pr_ci, detrended=dr, detrended_ci=dr_ci,
                       interaction_p=anova["p_value"], interaction_what=what, band_half_width=band["half_width_max"])
    out.update(decide(ev, settings))
    out["seeds_to_decide"] = seeds_to_decide(anova, paired, len(ca), len(cb), k, settings)
    return out


def _nested_draws(ma: np.ndarray, mb: np.ndarray, anova: dict[str, Any], n_draw: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Seeds nested in groups: each group's mean curve varies by the seeds' pooled within-group covariance across
    checkpoints over its n_seeds (a seed differs by a profile, not by independent checkpoint noise: a draw adds
    z @ R / sqrt(df n), R every run's residual row from its group mean, df = N - 2), independently per group and
    scaled by sqrt(df / chi2_df) for the covariance's own uncertainty (a few seeds give wide intervals). -> draws
    of the two mean curves [n_draw, K] each, the stacked means' covariance [2K, 2K] for the band (the pooled
    seed_sd per checkpoint, its split-plot df), and that df."""
    k = ma.shape[1]
    resid = np.vstack([ma - ma.mean(axis=0), mb - mb.mean(axis=0)])
    df = resid.shape[0] - 2
    out = []
    for m in (ma, mb):
        scale = np.sqrt(df / rng.chisquare(df, size=(n_draw, 1)))
        out.append(m.mean(axis=0)[None, :] + (rng.normal(size=(n_draw, resid.shape[0])) @ resid)
                   / np.sqrt(df * len(m)) * scale)
    cov = np.diag(np.concatenate([np.full(k, anova["seed_sd"] ** 2 / len(ma)), np.full(k, anova["seed_sd"] ** 2 / len(mb))]))
    return out[0], out[1], cov, float(anova["df2"])


def _paired_draws(ma: np.ndarray, mb: np.ndarray, anova: dict[str, Any], n_draw: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Seeds paired: the two mean curves vary together, with the covariance of the pairs' stacked curves [a_i; b_i]
    over n: a draw adds z @ R / sqrt(n (n - 1)) (R the pairs' residual rows, z standard normal), scaled by
    sqrt((n - 1) / chi2_{n-1}) for the covariance's own uncertainty. The band's covariance is that of the mean
    pair, S / n, pointwise with n - 1 df (a seed's shared profile cancels in the centred difference)."""
    n = ma.shape[0]
    stacked = np.hstack([ma, mb])
    resid = stacked - stacked.mean(axis=0)
    scale = np.sqrt((n - 1) / rng.chisquare(n - 1, size=(n_draw, 1)))
    noise = (rng.normal(size=(n_draw, n)) @ resid) / np.sqrt(n * (n - 1)) * scale
    draws = stacked.mean(axis=0)[None, :] + noise
    k = ma.shape[1]
    return draws[:, :k], draws[:, k:], resid.T @ resid / (n - 1) / n, float(n - 1)


def seeds_to_decide(anova: dict[str, Any], paired: bool, n_a: int, n_b: int, k: int,
                    settings: CompareSettings) -> dict[str, Any]:
    """The seeds per group at which this design's interaction test would find one checkpoint delta off the other
    group (a centred difference of delta at one checkpoint) with the stated power, from the measured error sd:
    paired, diff_sd (the pairs' difference; pairs that correlate make it small) with (n - 1)(K - 1) error df;
    nested, seed_sd with 2 (n - 1)(K - 1). Uncorrected F power at the measured epsilon's df (a sketch of the budget,
    not a simulation: seeds differ by a profile, experiments/controls/power.py simulates that)."""
    diff_sd = float(anova["diff_sd"]) if paired else float(anova["seed_sd"]) * np.sqrt(2.0)
    e = float(anova["epsilon"])
    spike = np.full(k, -settings.delta / k)
    spike[0] += settings.delta  # one checkpoint delta off, centred
    ss = float((spike**2).sum())
    out: dict[str, Any] = {"design": "paired" if paired else "independent", "diff_sd": diff_sd,
                           "delta": settings.delta, "power": settings.power, "seeds": None, "at_seeds": min(n_a, n_b)}
    if diff_sd <= 0:
        return out
    n = np.arange(2, 201)
    df1, df2 = (k - 1) * e, ((n - 1) if paired else 2 * (n - 1)) * (k - 1) * e
    lam = n * ss / diff_sd**2 * e  # noncentrality of the mean difference (its sd diff_sd / sqrt(n)), epsilon-scaled
    power = stats.ncf.sf(stats.f.isf(settings.alpha, df1, df2), df1, df2, lam)
    enough = np.flatnonzero(power >= settings.power)
    if enough.size:
        out["seeds"] = int(n[enough[0]])
    return out
