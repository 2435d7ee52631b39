"""Benchmark: `compare` on 50 checkpoint arms x 140 games with 10,000 bootstrap resamples.

Prints wall and CPU seconds for the whole comparison (every statistic, 10 run pairs with their interaction tests) and, for the
bootstrap itself, the ratio against a naive per-resample Python loop computing the same numbers in this same
process (same resample index matrix; the results are checked equal).

    .venv/bin/python bench/compare.py [--runs 5] [--checkpoints 10] [--games 140] [--n-boot 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from itertools import combinations

import numpy as np

from twinrun.core.compare import stats as cs
from twinrun.core.compare import CompareSettings, compare_games, synthetic_game_table


def vectorised_bootstrap(diff: np.ndarray, mask: np.ndarray, idx: np.ndarray, runs: list[np.ndarray]) -> dict:
    """Per-arm lift resamples, per-run argmax shares, per-pair Pearson: all with matrix products."""
    w = cs.index_counts(idx, diff.shape[1])
    lifts = cs.weighted_means(diff, mask, w)  # [R, A]
    rng = np.random.default_rng(0)
    peaks = [cs.argmax_distribution(lifts[:, r], rng) for r in runs]
    pears = [cs.row_pearson(lifts[:, a], lifts[:, b]) for a, b in combinations(runs, 2)]
    return {"lifts": lifts, "peaks": peaks, "pearson": pears}


def naive_bootstrap(diff: np.ndarray, mask: np.ndarray, idx: np.ndarray, runs: list[np.ndarray]) -> dict:
    """The same numbers with one Python iteration per resample (numpy inside each iteration)."""
    n_boot, n_arms = idx.shape[0], diff.shape[0]
    lifts = np.empty((n_boot, n_arms))
    for r in range(n_boot):
        rows = idx[r]
        d = diff[:, rows]
        m = mask[:, rows]
        den = m.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            lifts[r] = np.where(den > 0, (d * m).sum(axis=1) / np.maximum(den, 1), np.nan)
    peaks = []
    for run in runs:
        counts = np.zeros(len(run))
        for r in range(n_boot):
            counts[int(np.argmax(lifts[r, run]))] += 1
        peaks.append(counts / n_boot)
    pears = []
    for a, b in combinations(runs, 2):
        pears.append(np.array([np.corrcoef(lifts[r, a], lifts[r, b])[0, 1] for r in range(n_boot)]))
    return {"lifts": lifts, "peaks": peaks, "pearson": pears}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--games", type=int, default=140)
    ap.add_argument("--n-boot", type=int, default=10_000)
    args = ap.parse_args()

    rng = np.random.default_rng(7)
    shapes = {f"run{r}": list(rng.normal(0, 0.5, args.checkpoints)) for r in range(args.runs)}
    table = synthetic_game_table(shapes, n_games=args.games, seed=1, unmeasured_share=0.03)
    n_arms = len(table.arms) - 1

    t0, c0 = time.perf_counter(), time.process_time()
    res = compare_games(table, "baseline", CompareSettings(n_boot=args.n_boot))
    t_compare, c_compare = time.perf_counter() - t0, time.process_time() - c0

    base = table.outcomes[0]
    pc = cs.paired_counts(table.outcomes[1:], base)
    idx = cs.resample_indices(args.games, args.n_boot, np.random.default_rng(0))
    runs = [np.arange(r * args.checkpoints, (r + 1) * args.checkpoints) for r in range(args.runs)]
    t0 = time.perf_counter()
    fast = vectorised_bootstrap(pc.diff, pc.mask, idx, runs)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = naive_bootstrap(pc.diff, pc.mask, idx, runs)
    t_slow = time.perf_counter() - t0
    assert np.allclose(fast["lifts"], slow["lifts"], equal_nan=True)
    for a, b in zip(fast["pearson"], slow["pearson"]):
        assert np.allclose(a, b, equal_nan=True)

    out = {
        "arms": n_arms, "games": args.games, "n_boot": args.n_boot, "run_pairs": len(res["pairs"]),
        "compare_all_statistics_s": round(t_compare, 3),
        "compare_all_statistics_cpu_s": round(c_compare, 3),  # process CPU time: robust to a shared machine
        "load_average_1min": round(os.getloadavg()[0], 2),
        "bootstrap_vectorised_s": round(t_fast, 3),
        "bootstrap_naive_loop_s": round(t_slow, 3),
        "naive_over_vectorised": round(t_slow / t_fast, 1),
        "interaction_methods": sorted({p["interaction"]["method"] for p in res["pairs"]}),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
