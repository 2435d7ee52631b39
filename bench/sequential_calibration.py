"""Calibration of the group-sequential rule of `sweep --until-decided` / `compare --looks` (issue 41) on planted
streamed sweeps with known truth.

Planted: two runs x 8 checkpoints x 140 games, 8 streams per arm played crossed (one plan per stream shared by
every arm), a block per run's stream shared by its checkpoints (sd 0.7 logit), a cell-specific stream part (sd
0.1), game difficulty sd 1.5, a baseline without memory. Each draw is seeded (table seed = compare seed = the
draw's index). The rule looks at 2, 3, 4, 6, 8 streams (Lan-DeMets spending, Hwang-Shih-DeCani gamma -2 unless
--spending says otherwise, alpha 0.05 per claim, non-binding futility from 4 streams). Per case: the verdict rates at
the stop, how many sweeps had an "opposite" r at some look without the interaction crossing (withheld: the
rule claims differ only through the interaction), the mean streams spent (per decided sweep and overall), and for
the power cases the fixed design of the same power: the fixed test at 0.05 on the first R streams (the blocked run x
checkpoint interaction F on the cells' stream success rates, p < 0.05: compare's test, computed directly) at
R = 2..8, its power interpolated linearly in R to the sequential rule's, and the ratio of the mean streams spent per
decided sweep to that R.

`--interaction-only N` adds, for the two null cases, the rate at which the interaction alone crosses its boundary at
some look on N planted sweeps (seeds 1000..; the same F as compare's, computed directly: seconds per thousand
draws), which pins down the claim's error rate far more tightly than the full-compare draws can.

    nice .venv/bin/python bench/sequential_calibration.py [--draws 200] [--flat-draws 400] [--n-boot 1000]
        [--cases a;b] [--spending hsd] [--interaction-only 10000]   (--cases none: the interaction-only part alone)
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from twinrun.core.compare import CompareSettings
from twinrun.core.compare.looks import replay
from twinrun.core.compare.sequential import CO_MOVE, DIFFER, NO_EVIDENCE, SequentialRule, interaction_levels
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


def interaction_only(name: str, draws: int, kind: str, start: int = 1000) -> dict:
    """The share of planted sweeps whose interaction crosses its boundary at some look (no futility, no other
    route): the claim's error rate under the null cases, from many cheap draws."""
    a, b, _ = CASES[name]
    levels = np.array(interaction_levels(LOOKS, len(a), 0.05, "crossed", kind))
    p = np.array([[blocked_interaction_p(synthetic_game_table({"a": a, "b": b}, seed=s, **STRUCTURE), n)
                   for n in LOOKS] for s in range(start, start + draws)])
    hit = p < levels
    return {"draws": draws, "rate": float(hit.any(axis=1).mean()),
            "cumulative": [float(hit[:, : j + 1].any(axis=1).mean()) for j in range(len(LOOKS))],
            "levels": levels.tolist()}


def run_case(name: str, draws: int, n_boot: int, kind: str = "hsd") -> dict:
    a, b, power_case = CASES[name]
    rule = SequentialRule(LOOKS, kind=kind)
    verdicts: dict[str, int] = {}
    withheld = 0
    spent, spent_decided = [], []
    grid = list(range(2, LOOKS[-1] + 1))
    fixed_hits = np.zeros(len(grid))
    for seed in range(draws):
        t = synthetic_game_table({"a": a, "b": b}, seed=seed, **STRUCTURE)
        res = replay(t, "baseline", CompareSettings(n_boot=n_boot, seed=seed), rule, all_looks=False)
        v = res["verdicts"]["a vs b"]
        verdicts[v] = verdicts.get(v, 0) + 1
        withheld += any(p["reason"] == "opposite-not-spent" for lk in res["looks"] for p in lk["pairs"])
        spent.append(res["stopped_at"])
        if v != NO_EVIDENCE:
            spent_decided.append(res["stopped_at"])
        if power_case:
            fixed_hits += np.array([blocked_interaction_p(t, n) < 0.05 for n in grid])
    out = {"verdicts": verdicts, "withheld": withheld, "spent": float(np.mean(spent)),
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
    ap.add_argument("--flat-draws", type=int, default=None, help="draws of the flat-truth case (default: --draws)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--cases", default="", help="substrings of case names separated by ; (default: all)")
    ap.add_argument("--spending", default="hsd", help="hsd (gamma -2), hsd:G, obf or pocock")
    ap.add_argument("--interaction-only", type=int, default=0, help="also N cheap draws of the interaction's "
                    "crossing rate in the null cases")
    args = ap.parse_args()
    pick = [c for c in CASES if not args.cases or any(s in c for s in args.cases.split(";"))]
    t_all = time.time()
    print(f"load average at start: {os.getloadavg()}; draws {args.draws} (flat truth {args.flat_draws or args.draws}); "
          f"n_boot {args.n_boot}; looks {LOOKS}; spending {args.spending}; levels "
          f"{[round(x, 5) for x in SequentialRule(LOOKS, kind=args.spending).levels(8)['interaction']]}")
    if args.interaction_only:
        for name in ("flat truth", "same shape"):
            if args.cases and name not in pick and args.cases != "none":
                continue
            t0 = time.time()
            r = interaction_only(name, args.interaction_only, args.spending)
            print(f"interaction only, {name}: crosses at some look in {r['rate']:.2%} of {r['draws']} draws "
                  f"(cumulative by look {[round(x, 4) for x in r['cumulative']]}; {time.time() - t0:.0f} s)", flush=True)
    print("| case | draws | differ | co-move | agree | no evidence | opposite withheld | mean streams spent (all / "
          "decided) | fixed design power at 2..8 streams | fixed streams of the same power | spent per decided / "
          "fixed | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in pick:
        t0 = time.time()
        n = (args.flat_draws or args.draws) if name == "flat truth" else args.draws
        r = run_case(name, n, args.n_boot, args.spending)
        v = r["verdicts"]
        cell = lambda k: f"{v.get(k, 0)} ({100 * v.get(k, 0) / n:.1f}%)"  # noqa: E731
        dec = f"{r['spent_decided']:.2f}" if r["spent_decided"] is not None else "–"
        fp = ", ".join(f"{p:.2f}" for p in r["fixed_power"]) if "fixed_power" in r else "–"
        rf = f"{r['r_fix']:.2f}" if r.get("r_fix") else "–"
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "–"
        print(f"| {name} | {n} | {cell(DIFFER)} | {cell(CO_MOVE)} | {cell('shapes agree')} | {cell(NO_EVIDENCE)} | "
              f"{r['withheld']} | {r['spent']:.2f} / {dec} | {fp} | {rf} | {ratio} | {time.time() - t0:.0f} |",
              flush=True)
    print(f"load average at end: {os.getloadavg()}; wall {time.time() - t_all:.0f} s")


if __name__ == "__main__":
    main()
