"""Frameworks and seeds: runs are grouped by framework (the backend) and training seed, and a framework verdict is
judged against the variation between seeds of one framework.

With >= 2 seeds in each of two frameworks, the framework x checkpoint mean square of the runs' centred lift
curves is tested against the seed(framework) x checkpoint mean square (split-plot F, seeds random: the seed
pairs' differences are the reference; degrees of freedom corrected for non-sphericity, Greenhouse-Geisser /
Huynh-Feldt), and the framework mean curves get the pair verdict's other checks from a
parametric resampling of that seed variation (the variance drawn from its scaled inverse chi-square, so a few
seeds give wide intervals). With one run per framework, framework and seed are confounded and the output says so.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

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


def analyse(curves: dict[str, Curve], pairs: list[dict[str, Any]], settings: CompareSettings) -> dict[str, Any]:
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
        out["comparisons"].append(_framework_pair(fa, groups[fa], fb, groups[fb], pairs, settings))
    return out


def _pair_row(p: dict[str, Any]) -> dict[str, Any]:
    return {"a": p["a"], "b": p["b"], "pearson": p.get("pearson"),
            "interaction_p": (p.get("interaction") or {}).get("p_value"), "verdict": p.get("verdict")}


def _framework_pair(fa: str, ca: list[Curve], fb: str, cb: list[Curve], pairs: list[dict[str, Any]],
                    settings: CompareSettings) -> dict[str, Any]:
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
    steps = sorted(set.intersection(*[set(c.steps.tolist()) for c in ca + cb]))
    k = len(steps)

    def mat(cs_: list[Curve]) -> np.ndarray:
        return np.array([[c.lifts[int(np.searchsorted(c.steps, s))] for s in steps] for c in cs_])

    ma, mb = mat(ca), mat(cb)
    anova = shape.profile_anova({fa: ma, fb: mb}) if k >= 2 else None
    out.update({"checkpoints": [int(s) for s in steps], "anova": anova,
                "mean_curve_a": ma.mean(axis=0).tolist(), "mean_curve_b": mb.mean(axis=0).tolist()})
    if anova is None or k < 3:
        out["note"] = "fewer than 3 checkpoints shared by every run of both frameworks"
        out.update(decide(ShapeEvidence(fa, fb, k, None), settings))
        return out
    rng = np.random.default_rng(settings.seed + 7)
    n_draw = min(settings.n_boot, 4000)
    # seed variation of a framework mean: sigma^2 / n_seeds per checkpoint, sigma^2 drawn from its posterior
    sig2 = anova["seed_sd"] ** 2 * anova["df2"] / rng.chisquare(anova["df2"], size=(n_draw, 1))
    la, lb = ma.mean(axis=0), mb.mean(axis=0)
    da = la[None, :] + rng.normal(size=(n_draw, k)) * np.sqrt(sig2 / len(ca))
    db = lb[None, :] + rng.normal(size=(n_draw, k)) * np.sqrt(sig2 / len(cb))
    x = np.asarray(steps, dtype=np.float64)
    pr = float(cs.row_pearson(la, lb))
    pr_ci = cs.percentile_ci(cs.row_pearson(da, db), settings.level)
    dr = float(cs.row_pearson(shape.detrend(x, la), shape.detrend(x, lb)))
    dr_ci = cs.percentile_ci(cs.row_pearson(shape.detrend(x, da), shape.detrend(x, db)), settings.level)
    # pointwise intervals of the centred difference: each framework mean's checkpoint has variance seed_sd^2 / n
    from twinrun.core.compare import streams as st

    cov = np.diag(np.concatenate([np.full(k, anova["seed_sd"] ** 2 / len(ca)), np.full(k, anova["seed_sd"] ** 2 / len(cb))]))
    band = st.pointwise_band(np.concatenate([la, lb]), cov, float(anova["df2"]), BAND_LEVEL)
    out.update({"pearson": pr, "pearson_ci": list(pr_ci), "pearson_detrended": dr, "pearson_detrended_ci": list(dr_ci),
                "equivalence": st.equivalence_record(band, BAND_LEVEL, settings.delta),
                "interaction": {"method": "framework x checkpoint against seed(framework) x checkpoint, split-plot F",
                                **anova}})
    ev = ShapeEvidence(fa, fb, k, None, pearson=pr, pearson_ci=(float(pr_ci[0]), float(pr_ci[1])), detrended=dr,
                       detrended_ci=(float(dr_ci[0]), float(dr_ci[1])), interaction_p=anova["p_value"],
                       interaction_what="framework x checkpoint term (against seed x checkpoint)",
                       band_half_width=band["half_width_max"])
    out.update(decide(ev, settings))
    return out
