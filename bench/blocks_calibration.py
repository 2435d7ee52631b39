"""Calibration of compare's blocked analysis of crossed streams (issue 42) on planted sweeps with known truth.

Planted: two runs x 8 checkpoints x 140 games, 4 streams per arm played crossed (one plan per stream shared by
every arm), a block per run's stream shared by all its checkpoints (sd 0.7 logit; optionally a block shared by
both runs' stream r too), a cell-specific stream part (sd `cell`), game difficulty sd 1.5, a baseline without
memory. Each draw is seeded (table seed = compare seed = the draw's index). Prints one markdown row per case:
the verdict rates with their draws, and for flat truth the interaction p-values' spread.

    nice .venv/bin/python bench/blocks_calibration.py [--draws 200] [--n-boot 2000] [--cases a,b]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy import stats

from twinrun.core.compare import CompareSettings, compare_games
from twinrun.core.compare.synthetic import planted_table

DIFFER, CO_MOVE = "shapes differ", "co-move, profiles differ"

# name: (planted case, table options, stream_design)
CASES: dict[str, tuple[str, dict, str]] = {
    "flat, blocks 0.7, cell 0.1": ("flat", dict(crossed=True, block_sd=0.7, stream_sd=0.1), "auto"),
    "flat, blocks 0.7, cell 0.1, nested analysis": ("flat", dict(crossed=True, block_sd=0.7, stream_sd=0.1), "nested"),
    "flat, blocks 0.5 per run + 0.5 shared by runs, cell 0.1": (
        "flat", dict(crossed=True, block_sd=0.5, shared_block_sd=0.5, stream_sd=0.1), "auto"),
    "flat, blocks 0.7, cell 0.3": ("flat", dict(crossed=True, block_sd=0.7, stream_sd=0.3), "auto"),
    "same shape, blocks 0.7, cell 0.1": ("same-shape", dict(crossed=True, block_sd=0.7, stream_sd=0.1), "auto"),
    "opposite 0.3, blocks 0.7, cell 0.1": ("opposite-0.3", dict(crossed=True, block_sd=0.7, stream_sd=0.1), "auto"),
    "opposite 0.3, blocks 0.7, cell 0.1, nested analysis": (
        "opposite-0.3", dict(crossed=True, block_sd=0.7, stream_sd=0.1), "nested"),
    "opposite 0.3, blocks 0.7, cell 0.15": ("opposite-0.3", dict(crossed=True, block_sd=0.7, stream_sd=0.15), "auto"),
    "opposite 0.3, blocks 0.7, cell 0.2": ("opposite-0.3", dict(crossed=True, block_sd=0.7, stream_sd=0.2), "auto"),
    "flat, nested sweep (not crossed), stream sd 0.5 from the 3rd game": (
        "flat", dict(stream_sd=0.5, first_writes=2), "auto"),
}


def run_case(case: str, opts: dict, design: str, draws: int, n_boot: int) -> dict:
    verdicts: dict[str, int] = {}
    ps, designs, shares, sdb, sdn = [], set(), [], [], []
    for seed in range(draws):
        t = planted_table(case, seed=seed, n_games=140, streams=4, **opts)
        doc = compare_games(t, "baseline", CompareSettings(n_boot=n_boot, seed=seed, stream_design=design))
        pair = doc["pairs"][0]
        verdicts[pair["verdict"]] = verdicts.get(pair["verdict"], 0) + 1
        ps.append(pair["interaction"]["p_value"])
        designs.add(doc["streams"]["design"])
        b = doc["streams"].get("blocks")
        if b:
            shares.append(b["share"])
            sdb.append(b["sd_blocked"])
            sdn.append(b["sd_nested"])
    ps_a = np.array(ps, dtype=float)
    return {"verdicts": verdicts, "p": ps_a, "design": "/".join(sorted(designs)),
            "share": float(np.median(shares)) if shares else None,
            "sd": (float(np.mean(sdn)), float(np.mean(sdb))) if sdb else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--cases", default="", help="substrings of case names separated by ; (default: all)")
    args = ap.parse_args()
    pick = [c for c in CASES if not args.cases or any(s in c for s in args.cases.split(";"))]
    print(f"load average at start: {os.getloadavg()}; draws {args.draws}; n_boot {args.n_boot}")
    print("| case | analysis | draws | differ | co-move | agree | no evidence | interaction p: share < 0.05, "
          "median, KS vs uniform | block share (median) | error SD nested / blocked (pp) | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in pick:
        case, opts, design = CASES[name]
        t0 = time.time()
        r = run_case(case, opts, design, args.draws, args.n_boot)
        v, n = r["verdicts"], args.draws
        p = r["p"]
        ks = stats.kstest(p, "uniform").pvalue
        cell = lambda k: f"{v.get(k, 0)} ({100 * v.get(k, 0) / n:.1f}%)"  # noqa: E731
        sd = f"{100 * r['sd'][0]:.1f} / {100 * r['sd'][1]:.1f}" if r["sd"] else "–"
        share = f"{r['share']:.2f}" if r["share"] is not None else "–"
        print(f"| {name} | {r['design']} | {n} | {cell(DIFFER)} | {cell(CO_MOVE)} | {cell('shapes agree')} | "
              f"{cell('no evidence either way at this sample size')} | {np.mean(p < 0.05):.3f}, {np.median(p):.2f}, "
              f"{ks:.2g} | {share} | {sd} | {time.time() - t0:.0f} |", flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
