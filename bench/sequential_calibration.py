"""Calibration of the group-sequential rule of `sweep --until-decided` / `compare --looks` (issue 41) on planted
streamed sweeps with known truth.

Planted: two runs x 8 checkpoints x 140 games, 8 streams per arm played crossed (one plan per stream shared by
every arm), a block per run's stream shared by its checkpoints (sd 0.7 logit), a cell-specific stream part (sd
0.1), game difficulty sd 1.5, a baseline without memory. Each draw is seeded (table seed = compare seed = the
draw's index). The rule looks at 2, 3, 4, 6, 8 streams (Lan-DeMets O'Brien-Fleming-type spending, alpha 0.05 per
claim, non-binding futility from 4 streams). Per case: the verdict rates at the stop, the mean streams spent (per
decided sweep and overall), and for the power cases the fixed design of the same power: the fixed test at 0.05 on
the first R streams (the blocked run x checkpoint interaction F on the cells' stream success rates, p < 0.05:
compare's test, computed directly) at R = 2..8, its power interpolated linearly in
R to the sequential rule's, and the ratio of the mean streams spent per decided sweep to that R.

    nice .venv/bin/python bench/sequential_calibration.py [--draws 200] [--n-boot 1000] [--cases a;b]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from twinrun.core.compare import CompareSettings
from twinrun.core.compare.looks import replay
from twinrun.core.compare.sequential import CO_MOVE, DIFFER, NO_EVIDENCE, SequentialRule
from twinrun.core.compare.synthetic import SHAPE, synthetic_game_table

LOOKS = (2, 3, 4, 6, 8)
STRUCTURE = dict(n_games=140, streams=LOOKS[-1], crossed=True, block_sd=0.7, stream_sd=0.1, game_sd=1.5)
SMALL = tuple(0.3 * s for s in SHAPE)
HALF = tuple(0.5 * s for s in SHAPE)

# name: (truth of run a, truth of run b, power case: find "differ" and compare with a fixed design)
CASES: dict[str, tuple[tuple[float, ...], tuple[float, ...], bool]] = {
    "flat truth": ((0.0,) * 8, (0.0,) * 8, False),
    "same shape": (SHAPE, SHAPE, False),
    "opposite 0.3": (SMALL, tuple(-s for s in SMALL), True),
    "shaped 0.5 vs flat": (HALF, (0.0,) * 8, True),
}


def fixed_streams_for(power: float, grid: list[int], fixed_power: list[float]) -> float | None:
    """The streams a fixed design needs for `power` (linear in R between grid points); None beyond the grid."""
    for i, (r, pw) in enumerate(zip(grid, fixed_power)):
        if pw >= power:
            if i == 0:
                return float(r)
            r0, p0 = grid[i - 1], fixed_power[i - 1]
            return r0 + (r - r0) * (power - p0) / max(pw - p0, 1e-12)
    return None


def blocked_interaction_p(t, n: int) -> float:
    """The fixed design's test on the first n streams: the run x checkpoint interaction F against the residual
    after each run's stream blocks, on the cells' stream success rates (the pooled baseline cancels in it)."""
    from scipy import stats

    runs = sorted({a.run for a in t.arms if a.run is not None})
    steps = sorted({a.checkpoint for a in t.arms if a.run is not None})
    y = np.full((len(runs), len(steps), n), np.nan)
    for arm, row in zip(t.arms, t.outcomes):
        if arm.run is not None and arm.replicate < n:
            y[runs.index(arm.run), steps.index(arm.checkpoint), arm.replicate] = np.nanmean(row)
    k = len(steps)
    cell = y.mean(axis=2)
    inter = cell - cell.mean(axis=1, keepdims=True)
    inter = inter - inter.mean(axis=0, keepdims=True)
    res = y - cell[..., None] - y.mean(axis=1, keepdims=True) + y.mean(axis=(1, 2), keepdims=True)
    df2 = len(runs) * (k - 1) * (n - 1)
    f = (n * (inter ** 2).sum() / (k - 1)) / ((res ** 2).sum() / df2)
    return float(stats.f.sf(f, k - 1, df2))


def run_case(name: str, draws: int, n_boot: int) -> dict:
    a, b, power_case = CASES[name]
    rule = SequentialRule(LOOKS)
    verdicts: dict[str, int] = {}
    spent, spent_decided = [], []
    grid = list(range(2, LOOKS[-1] + 1))
    fixed_hits = np.zeros(len(grid))
    for seed in range(draws):
        t = synthetic_game_table({"a": a, "b": b}, seed=seed, **STRUCTURE)
        res = replay(t, "baseline", CompareSettings(n_boot=n_boot, seed=seed), rule, all_looks=False)
        v = res["verdicts"]["a vs b"]
        verdicts[v] = verdicts.get(v, 0) + 1
        spent.append(res["stopped_at"])
        if v != NO_EVIDENCE:
            spent_decided.append(res["stopped_at"])
        if power_case:
            fixed_hits += np.array([blocked_interaction_p(t, n) < 0.05 for n in grid])
    out = {"verdicts": verdicts, "spent": float(np.mean(spent)),
           "spent_decided": float(np.mean(spent_decided)) if spent_decided else None}
    if power_case:
        fixed_power = (fixed_hits / draws).tolist()
        seq_power = verdicts.get(DIFFER, 0) / draws
        r_fix = fixed_streams_for(seq_power, grid, fixed_power)
        out.update(fixed_power=fixed_power, seq_power=seq_power, r_fix=r_fix,
                   ratio=(out["spent_decided"] / r_fix) if r_fix and out["spent_decided"] else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--cases", default="", help="substrings of case names separated by ; (default: all)")
    args = ap.parse_args()
    pick = [c for c in CASES if not args.cases or any(s in c for s in args.cases.split(";"))]
    print(f"load average at start: {os.getloadavg()}; draws {args.draws}; n_boot {args.n_boot}; looks {LOOKS}")
    print("| case | draws | differ | co-move | agree | no evidence | mean streams spent (all / decided) | fixed "
          "design power at 2..8 streams | fixed streams of the same power | spent per decided / fixed | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in pick:
        t0 = time.time()
        r = run_case(name, args.draws, args.n_boot)
        v, n = r["verdicts"], args.draws
        cell = lambda k: f"{v.get(k, 0)} ({100 * v.get(k, 0) / n:.1f}%)"  # noqa: E731
        dec = f"{r['spent_decided']:.2f}" if r["spent_decided"] is not None else "–"
        fp = ", ".join(f"{p:.2f}" for p in r["fixed_power"]) if "fixed_power" in r else "–"
        rf = f"{r['r_fix']:.2f}" if r.get("r_fix") else "–"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "–"
        print(f"| {name} | {n} | {cell(DIFFER)} | {cell(CO_MOVE)} | {cell('shapes agree')} | {cell(NO_EVIDENCE)} | "
              f"{r['spent']:.2f} / {dec} | {fp} | {rf} | {ratio} | {time.time() - t0:.0f} |", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
