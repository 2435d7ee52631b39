"""How often `compare --training` says "differ" on planted step curves with the committed controls' structure
(docs/compare.md, "Training curves"; rates in docs/measured.md).

Each metric's noise is measured on the controls' same-algorithm runs at paired seeds (trl-sI vs verl-sI, I = 0-2,
and verl-sI vs verl2-sI, I = 0-4; experiments/controls/data/rows.jsonl.gz): a run's own deviation (half the
variance of a pair's difference, its lag-1 autocorrelation) and a seed's profile shared by its two runs (the rest of
the spread between seeds' mean curves, its autocorrelation), both AR(1) over steps around the metrics' mean curve.
A planted run of group g at seed i is mean + seed profile_i (shared by both groups when seeds pair, its own per
group when they do not) + its own deviation. Every draw goes through the real verdict
(:func:`twinrun.core.compare.training.verdicts`, all metrics together, weighted Holm).

Cases: same truth (false "differ" per metric, per family and for any metric) at 3 and 6 paired seeds, unpaired
seeds, 16 steps binned into 8 windows, and noise that grows 3x over training; a reward that falls by DELTA from
step 5 (one group), read after 5, 6 and 8 steps (the live check): power and the first window.

    nice -n 10 python bench/training_verdict.py [--draws 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np

from twinrun.core.compare import training as tr
from twinrun.core.compare.training_runs import METRICS, read_run

CONTROLS = Path(__file__).resolve().parent.parent / "experiments" / "controls"  # rows.py and data/rows.jsonl.gz
PAIRS = [(f"trl-s{i}", f"verl-s{i}") for i in range(3)] + [(f"verl-s{i}", f"verl2-s{i}") for i in range(5)]
FALL_STEP = 5


def _ar1_corr(x: np.ndarray) -> float:
    """Pooled lag-1 autocorrelation of the rows of x[n, T] (each row centred)."""
    c = x - x.mean(axis=1, keepdims=True)
    num = float((c[:, 1:] * c[:, :-1]).sum())
    den = float((c**2).sum())
    return float(np.clip(num / den, 0.0, 0.95)) if den > 0 else 0.0


def _control_runs() -> dict[str, object]:
    """The committed controls' runs by name, read from their rows rebuilt as a sweep folder (rows.py)."""
    spec = importlib.util.spec_from_file_location("controls_rows", CONTROLS / "rows.py")
    rows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rows)
    with tempfile.TemporaryDirectory() as tmp:
        sweep = rows.unpack(Path(tmp) / "sweep")
        return {f.stem: read_run(f) for f in sorted((sweep / "metrics").glob("*.jsonl"))}


def measure_noise() -> dict[str, dict[str, object]]:
    """metric -> {"mean": [T], "run_sd", "run_rho", "seed_sd", "seed_rho"} from the controls' paired runs."""
    runs = _control_runs()
    out: dict[str, dict[str, object]] = {}
    for m in METRICS:
        a = np.array([runs[x].values[m] for x, _ in PAIRS])
        b = np.array([runs[y].values[m] for _, y in PAIRS])
        if np.isnan(a).any() or np.isnan(b).any() or np.ptp(np.concatenate([a, b])) == 0:
            continue  # not recorded (kl) or constant (clip fraction 0, r_cnt 0): nothing to plant
        d = a - b
        run_var = float((d**2).mean()) / 2
        pair_mean = (a + b) / 2
        dev = pair_mean - pair_mean.mean(axis=0)
        seed_var = max(float((dev**2).sum() / (dev.shape[0] - 1) / dev.shape[1]) - run_var / 2, 0.0)
        out[m] = {"mean": pair_mean.mean(axis=0), "run_sd": run_var**0.5, "run_rho": _ar1_corr(d),
                  "seed_sd": seed_var**0.5, "seed_rho": _ar1_corr(dev)}
    return out


def ar1(rng: np.random.Generator, shape: tuple[int, ...], sd: float, rho: float) -> np.ndarray:
    """Stationary AR(1) rows along the last axis, marginal sd `sd`."""
    z = rng.normal(0.0, sd, shape)
    out = np.empty(shape)
    out[..., 0] = z[..., 0]
    for t in range(1, shape[-1]):
        out[..., t] = rho * out[..., t - 1] + np.sqrt(1 - rho**2) * z[..., t]
    return out


def plant(rng: np.random.Generator, noise: dict[str, dict[str, object]], n: int, steps: int, paired: bool,
          grow: float = 1.0, fall: float = 0.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """metric -> (a[n, steps], b[n, steps]) planted step curves (a's reward falls by `fall` from FALL_STEP)."""
    out = {}
    scale = np.linspace(1.0, grow, steps)
    for m, p in noise.items():
        base = np.asarray(p["mean"])
        mean = np.interp(np.linspace(0, base.size - 1, steps), np.arange(base.size), base)
        seed_a = ar1(rng, (n, steps), float(p["seed_sd"]), float(p["seed_rho"]))
        seed_b = seed_a if paired else ar1(rng, (n, steps), float(p["seed_sd"]), float(p["seed_rho"]))
        a = mean + (seed_a + ar1(rng, (n, steps), float(p["run_sd"]), float(p["run_rho"]))) * scale
        b = mean + (seed_b + ar1(rng, (n, steps), float(p["run_sd"]), float(p["run_rho"]))) * scale
        if m == "reward_mean" and fall:
            a = a - fall * (np.arange(1, steps + 1) >= FALL_STEP)
        out[m] = (a, b)
    return out


def read(mats: dict[str, tuple[np.ndarray, np.ndarray]], design: str, observed: int, n_windows: int = 8):
    """The verdicts after `observed` steps, steps binned into n_windows."""
    steps = list(range(1, observed + 1))
    bins = tr.windows(steps, n_windows)
    idx = np.arange(1, mats[next(iter(mats))][0].shape[1] + 1)
    wm = {m: (np.array([tr.window_means(idx, r, bins) for r in a]), np.array([tr.window_means(idx, r, bins) for r in b]))
          for m, (a, b) in mats.items()}
    return tr.verdicts(wm, design), bins


def same_truth(rng, noise, draws, n, steps, paired, grow=1.0) -> dict[str, float]:
    hits = {m: 0 for m in noise}
    fam = {f: 0 for f in sorted({METRICS[m][0] for m in noise})}
    anyhit = 0
    for _ in range(draws):
        res, _ = read(plant(rng, noise, n, steps, paired, grow), "paired" if paired else "independent", steps)
        diff = [m for m, r in res.items() if r["verdict"] == tr.DIFFER]
        for m in diff:
            hits[m] += 1
        for f in fam:
            fam[f] += any(METRICS[m][0] == f for m in diff)
        anyhit += bool(diff)
    return {**{m: h / draws for m, h in hits.items()}, **{f"family {f}": v / draws for f, v in fam.items()},
            "any metric": anyhit / draws}


def fall_power(rng, noise, draws, n, delta, observed) -> dict[str, float]:
    found, first = 0, []
    for _ in range(draws):
        res, bins = read(plant(rng, noise, n, 8, True, fall=delta), "paired", observed)
        r = res["reward_mean"]
        if r["verdict"] == tr.DIFFER:
            found += 1
            first.append(bins[r["first_window"]][-1])
    first_a = np.array(first) if first else np.array([np.nan])
    return {"power": found / draws, "first_step_median": float(np.nanmedian(first_a)),
            "first_at_or_before_fall": float(np.mean(first_a <= FALL_STEP)) if first else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    noise = measure_noise()
    t0 = time.perf_counter()
    print("noise (controls): " + "; ".join(f"{m} run sd {p['run_sd']:.3g} (rho {p['run_rho']:.2f}), seed sd "
                                           f"{p['seed_sd']:.3g} (rho {p['seed_rho']:.2f})" for m, p in noise.items()))
    cases = [("same, 3 paired seeds, 8 steps", 3, 8, True, 1.0), ("same, 6 paired seeds, 8 steps", 6, 8, True, 1.0),
             ("same, 3 unpaired seeds, 8 steps", 3, 8, False, 1.0),
             ("same, 3 paired seeds, 16 steps in 8 windows", 3, 16, True, 1.0),
             ("same, 3 paired seeds, noise growing 3x", 3, 8, True, 3.0)]
    cols = None
    for label, n, steps, paired, grow in cases:
        r = same_truth(rng, noise, a.draws, n, steps, paired, grow)
        if cols is None:
            cols = list(r)
            print("\n| same truth | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 1))
        print(f"| {label} | " + " | ".join(f"{100 * r[c]:.1f}%" for c in cols) + " |")
    print(f"\n| reward falls by DELTA from step {FALL_STEP} | seeds | steps read | power | first window's last step "
          "(median) | first window at or before the fall |\n|---|---|---|---|---|---|")
    for n in (3, 6):
        for delta in (0.1, 0.2, 0.3, 0.5):
            for observed in (5, 6, 8):
                r = fall_power(rng, noise, a.draws, n, delta, observed)
                print(f"| {delta} | {n} | {observed} | {100 * r['power']:.1f}% | {r['first_step_median']:.0f} | "
                      f"{100 * r['first_at_or_before_fall']:.0f}% |")
    print(f"\n{a.draws} draws per case, seed {a.seed}, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
