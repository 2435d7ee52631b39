"""Paired or nested seeds: the framework verdict's calibration on planted controls with the real structure (issue 50;
docs/compare.md, "Seeds pair"; rates in docs/measured.md).

Each draw plants two groups x n seeds, 8 checkpoints, as the committed controls look (experiments/controls):

* a drifting shared curve: success rising from 15% to 30% (logit scale, the verl seeds' mean);
* each seed's own start: an offset of sd 0.55 logit (about 10 pp: seed 1 sits ~20 pp below seeds 0 and 2) that is
  largest at checkpoint 1 and fades linearly to 0 at checkpoint 8. Paired data: the two groups' runs at seed i
  share it (the same warm start and task-group order). Independent data: every run draws its own;
* each run's own drift after the start: a random walk of 0.12 logit per checkpoint (paired runs diverge as they
  train: pair r of the centred curves ~0.5-0.9, as in the controls);
* cell noise 4 pp sd per (run, checkpoint): what 4 crossed streams x 32 games leave after the stream blocks;
  paired runs share all of it at checkpoint 1 (identical rows), less later, none from checkpoint 5 (SHARED_NOISE);
* truths: "flat" (the same algorithm in both groups) or "rise": group a misses a later rise, flat for two
  checkpoints then growing to 0.8 logit at checkpoint 8 (positive-6's measured difference, lr / 10).

Every draw is read with both designs (compare's own `_framework_pair`, seed_design paired and independent) and the
verdict counted: on flat truth a "differ" or "co-move, profiles differ" is a false claim (bound 7%); on the rise it
is a detection. r's interval (:func:`frameworks.r_interval`) is checked for containing the true r, the
correlation of the two groups' expected mean curves (by Monte Carlo over seeds), and its own estimate; beside it the
same interval at the stated level's own quantiles (before its calibration), and both for the detrended r; at the
controls' noise and at 0.4 x their drift and cell noise.

    nice -n 10 python bench/seed_design.py [--draws 400]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

K = 8
STEPS = np.arange(1.0, K + 1)
BASE = np.log(np.linspace(0.15, 0.35, K) / (1 - np.linspace(0.15, 0.35, K)))  # logit of the shared curve
FADE = np.linspace(1.0, 0.0, K)  # a seed's start offset, largest at checkpoint 1, gone by checkpoint 8
RISE = 0.8 * np.clip((STEPS - 2) / (K - 2), 0.0, 1.0)  # flat for two checkpoints, then 0.8 logit by the end
# the share of a cell's noise two paired runs have in common: their rows are identical game by game at checkpoint 1
# and agree less as training moves them apart, down to two other seeds' agreement by checkpoint 5 (measured on the
# committed negative control: 128, 122, 118, 110 of 128 games at checkpoints 1-4 against ~100 for other seeds)
SHARED_NOISE = np.clip(1.0 - (STEPS - 1) / 4.0, 0.0, 1.0)
START_SD, WALK_SD, CELL_SD, BASELINE = 0.55, 0.12, 0.04, 0.10


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def planted(rng: np.random.Generator, n: int, *, paired: bool, truth: str,
            noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Lift curves of two groups at n seeds: a[n, K], b[n, K] (row i: seed i). truth "flat" or "rise"; noise
    scales the runs' own drift and the cell noise (1: the controls')."""
    start_a = rng.normal(0, START_SD, (n, 1))
    start_b = start_a if paired else rng.normal(0, START_SD, (n, 1))
    shared = rng.normal(0, CELL_SD * noise, (n, K))
    c = SHARED_NOISE if paired else np.zeros(K)
    out = []
    for start, effect in ((start_a, -RISE if truth == "rise" else 0.0), (start_b, 0.0)):
        walk = np.cumsum(rng.normal(0, WALK_SD * noise, (n, K)), axis=1)
        walk -= walk[:, :1]  # both runs of a seed leave the same start
        cell = np.sqrt(c) * shared + np.sqrt(1.0 - c) * rng.normal(0, CELL_SD * noise, (n, K))
        rate = _expit(BASE + start * FADE + walk + effect) + cell
        out.append(rate - BASELINE)
    return out[0], out[1]


def true_r(truth: str, noise: float = 1.0, draws: int = 40_000, seed: int = 99) -> float:
    """r of the two groups' expected mean lift curves (Monte Carlo over seeds' starts and walks)."""
    rng = np.random.default_rng(seed)
    a, b = planted(rng, draws, paired=True, truth=truth, noise=noise)
    return float(np.corrcoef(a.mean(axis=0), b.mean(axis=0))[0, 1])


def read(a: np.ndarray, b: np.ndarray, design: str, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """compare's framework verdict on planted curves (group "a" vs group "b"), under one seed design."""
    from twinrun.core.compare import frameworks as fw
    from twinrun.core.compare.curves import Curve
    from twinrun.core.compare.model import CompareSettings

    def curves(m: np.ndarray, g: str) -> list[Curve]:
        return [Curve(f"{g}-s{i}", STEPS, np.arange(K), row, np.zeros((2, K)), 1.0, framework=g, seed=i)
                for i, row in enumerate(m)]

    settings = CompareSettings(n_boot=n_boot, seed=seed, seed_design=design)
    return fw._framework_pair("a", curves(a, "a"), "b", curves(b, "b"), [], settings, (True, "planted"))


def r_intervals(a: np.ndarray, b: np.ndarray, design: str, seed: int, n_boot: int = 1000) -> dict[str, tuple]:
    """r's and detrended r's intervals from the draws compare's framework verdict makes (the same generator, so
    "now" is its pearson_ci), now and before the level's calibration (R_TAIL_SHRINK = 1: the stated level's own
    quantiles)."""
    from twinrun.core.compare import frameworks as fw
    from twinrun.core.compare import shape
    from twinrun.core.compare import stats as cs

    paired = design == "paired"
    anova = shape.paired_profile_anova(a, b) if paired else shape.profile_anova({"a": a, "b": b})
    da, db, _, _ = (fw._paired_draws if paired else fw._nested_draws)(a, b, anova, min(n_boot, 4000),
                                                                         np.random.default_rng(seed + 7))
    la, lb = a.mean(axis=0), b.mean(axis=0)
    r, rd = float(cs.row_pearson(la, lb)), cs.row_pearson(da, db)
    d = float(cs.row_pearson(shape.detrend(STEPS, la), shape.detrend(STEPS, lb)))
    dd = cs.row_pearson(shape.detrend(STEPS, da), shape.detrend(STEPS, db))
    before = 1.0 - fw.R_TAIL_SHRINK * 0.05  # the level whose tails are the old 95% interval's
    return {"r": fw.r_interval(r, rd, 0.95), "r_before": fw.r_interval(r, rd, before),
            "d": fw.r_interval(d, dd, 0.95), "d_before": fw.r_interval(d, dd, before)}


def true_detrended_r(truth: str, noise: float = 1.0, draws: int = 40_000, seed: int = 99) -> float:
    """Detrended r of the two groups' expected mean lift curves (as true_r)."""
    from twinrun.core.compare import shape

    rng = np.random.default_rng(seed)
    a, b = planted(rng, draws, paired=True, truth=truth, noise=noise)
    xa, xb = shape.detrend(STEPS, a.mean(axis=0)), shape.detrend(STEPS, b.mean(axis=0))
    return float(np.corrcoef(xa, xb)[0, 1])


def rates(n: int, *, paired: bool, truth: str, draws: int, seed: int,
          noise: float = 1.0) -> dict[str, dict[str, float]]:
    """Per reading design: the share of draws whose verdict claims a difference ("differ" or "co-move"), whose
    interaction p < 0.05, and whose r interval holds the true r (rise only; flat truth's r is 1, on the edge)."""
    from twinrun.core.compare.verdict import CO_MOVE, DIFFER

    rng = np.random.default_rng(seed)
    truths = {"r": true_r(truth, noise), "d": true_detrended_r(truth, noise)} if truth == "rise" else None
    keys = ("claim", "p05", "r", "cover", "cover_before", "cover_d", "cover_d_before", "holds_r")
    out: dict[str, dict[str, float]] = {d: dict.fromkeys(keys, 0.0) for d in ("paired", "independent")}
    for i in range(draws):
        a, b = planted(rng, n, paired=paired, truth=truth, noise=noise)
        for d in out:
            res = read(a, b, d, seed=i)
            out[d]["claim"] += res["verdict"] in (DIFFER, CO_MOVE)
            out[d]["p05"] += res["anova"]["p_value"] < 0.05
            out[d]["r"] += res["pearson"] if np.isfinite(res["pearson"]) else 0.0
            lo, hi = res["pearson_ci"]
            out[d]["holds_r"] += lo <= res["pearson"] <= hi
            if truths is not None:
                iv = r_intervals(a, b, d, seed=i)
                assert iv["r"] == tuple(res["pearson_ci"]), "the bench's draws are not the verdict's"
                for key, (name, t) in {"cover": ("r", "r"), "cover_before": ("r_before", "r"),
                                       "cover_d": ("d", "d"), "cover_d_before": ("d_before", "d")}.items():
                    out[d][key] += iv[name][0] <= truths[t] <= iv[name][1]
    return {d: {k: v / draws for k, v in m.items()} for d, m in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=400)
    args = ap.parse_args()
    t0 = time.time()
    print("(mean r: the framework verdict's r of the two mean curves, averaged over draws)")
    print(f"true r of the rise case's expected mean curves: {true_r('rise'):.3f}, detrended "
          f"{true_detrended_r('rise'):.3f} (noise x 0.4: {true_r('rise', 0.4):.3f}, {true_detrended_r('rise', 0.4):.3f})")
    print("| truth | data | seeds | read as | claims differ/co-move | interaction p < 0.05 | r CI covers true r "
          "(now) | (before: 95% quantiles) | detrended r CI covers (now) | (before) | r CI holds r | mean r |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for truth, noise in (("flat", 1.0), ("rise", 1.0), ("rise", 0.4)):
        for paired in (True, False):
            for n in (3, 6):
                res = rates(n, paired=paired, truth=truth, draws=args.draws, noise=noise,
                            seed=1000 * n + 10 * paired + (truth == "rise") + int(100 * (noise != 1.0)))
                for d, m in res.items():
                    cov = (" | ".join(f"{m[k]:.1%}" for k in ("cover", "cover_before", "cover_d", "cover_d_before"))
                           if truth == "rise" else "– | – | – | –")
                    label = truth if noise == 1.0 else f"{truth}, drift and cell noise x {noise:g}"
                    print(f"| {label} | {'paired' if paired else 'independent'} | {n} | {d} | {m['claim']:.1%} | "
                          f"{m['p05']:.1%} | {cov} | {m['holds_r']:.0%} | {m['r']:.2f} |", flush=True)
    print(f"{args.draws} draws per row, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
