"""Learning check on CPU: do both backends' curators learn, end to end, from the same warm start?

Trains the smoke arm (experiments/smoke-cpu.yaml: the tiny warm-started curator, the skill-sensitive scripted
stand-in executor) under TRL and verl for `--steps` steps with the learning settings below, sweeps every
`--every`-th checkpoint on the held-out games with a same-sweep baseline, and prints:

* per step and backend: r_task (success rate over positions 2..|G| of the step's curation rollouts) and the
  total reward;
* per backend: the rise of r_task, late steps minus early steps (the last and first `--window` steps), with a 95%
  Welch t interval over steps: it "rises beyond noise" when the interval's lower end is above 0;
* per backend: the held-out lift over the baseline at each swept checkpoint;
* the comparison's verdict on the two checkpoint curves (twinrun compare, as in the report).

Both backends draw the same task groups at every step (same spec seed), so a rise that both share is not one
backend's luck. Exit status 0 when both rise beyond noise, 1 when either does not (the numbers are printed either
way), 2 when the run failed. `--resume` (default) continues an interrupted check in the same --out.

    python bench/learning.py [--steps 20] [--every 5] [--out runs/learn] [--set key=value ...]

The learning settings (spec overrides, stated in every printout): 4 rollouts per group (GRPO needs samples that
differ) and learning rate 1e-4 (the smoke arm's own, stated again so the check does not drift with the demo; the
paper's 1e-5 is for an 8B model and leaves the tiny curator's samples unchanged).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "experiments" / "smoke-cpu.yaml"
LEARNING_SETS = ["batch.rollouts_per_group=4", "optimizer.lr=1.0e-4"]


def step_rows(metrics: Path) -> list[dict]:
    rows = []
    if metrics.exists():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            if r.get("kind", "step") == "step" and "step" in r:
                rows.append(r)
    by_step = {r["step"]: r for r in rows}  # a resumed step keeps its last row
    return [by_step[s] for s in sorted(by_step)]


def rise(values: list[float], window: int) -> dict:
    """Late minus early mean of per-step values, with a 95% Welch t interval (the two windows' steps as
    independent draws: each step plays fresh task groups). Tested as rates over seeded draws: under a flat truth
    it claims a rise in about 2.5% of draws."""
    from scipy import stats

    early, late = np.asarray(values[:window], float), np.asarray(values[-window:], float)
    d = float(late.mean() - early.mean())
    ve, vl = early.var(ddof=1) / len(early), late.var(ddof=1) / len(late)
    se = float(np.sqrt(ve + vl))
    if se == 0.0:
        lo = hi = d
    else:
        df = (ve + vl) ** 2 / (ve ** 2 / (len(early) - 1) + vl ** 2 / (len(late) - 1))
        half = float(stats.t.ppf(0.975, df)) * se
        lo, hi = d - half, d + half
    return {"early": float(early.mean()), "late": float(late.mean()), "rise": d, "ci": [lo, hi], "rises": bool(lo > 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--every", type=int, default=5, help="checkpoint (and sweep) every N steps")
    ap.add_argument("--window", type=int, default=5, help="steps in the early and late windows")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "learn")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="more spec overrides")
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="print the numbers of an existing --out")
    a = ap.parse_args()
    if a.window * 2 > a.steps:
        print(f"--window: {a.window} needs --steps >= {2 * a.window} (fix: fewer window steps or more steps)")
        return 2
    sets = [*LEARNING_SETS, f"steps={a.steps}", f"checkpoint_every={a.every}", *a.sets]
    print(f"learning check: {SPEC.name} with {' '.join(sets)}; out {a.out}", flush=True)
    t0 = time.time()
    if not a.report_only:
        cmd = [sys.executable, "-m", "twinrun.cli", "run", str(SPEC), "--out", str(a.out)]
        cmd += [] if a.no_resume else ["--resume"]
        for s in sets:
            cmd += ["--set", s]
        rc = subprocess.call(cmd, env=dict(os.environ))
        if rc != 0:
            print(f"learning check: twinrun run failed (exit {rc}); rerun to resume")
            return 2
    wall = time.time() - t0

    backends = sorted(p.name for p in (a.out / "runs").iterdir() if (p / "metrics.jsonl").exists())
    rows = {b: step_rows(a.out / "runs" / b / "metrics.jsonl") for b in backends}
    print("\nper-step reward (r_task / total) by backend")
    print("step  " + "  ".join(f"{b:>16}" for b in backends))
    for s in range(1, a.steps + 1):
        cells = []
        for b in backends:
            r = next((x for x in rows[b] if x["step"] == s), None)
            rt = ((r or {}).get("reward_terms") or {}).get("r_task")
            cells.append(f"{rt:6.3f} / {r['reward_mean']:6.3f}" if r and rt is not None else f"{'-':>16}")
        print(f"{s:4d}  " + "  ".join(f"{c:>16}" for c in cells))
    ok = True
    print(f"\nrise of r_task: mean of the last {a.window} steps minus the first {a.window} (95% Welch t interval over steps)")
    summary = {"sets": sets, "wall_s": round(wall, 1), "backends": {}}
    for b in backends:
        vals = [((x.get("reward_terms") or {}).get("r_task")) for x in rows[b]]
        vals = [v for v in vals if v is not None]
        if len(vals) < 2 * a.window:
            print(f"  {b}: {len(vals)} steps with r_task, fewer than {2 * a.window}")
            ok = False
            continue
        r = rise(vals, a.window)
        ok &= r["rises"]
        summary["backends"][b] = r
        print(f"  {b}: {r['early']:.3f} -> {r['late']:.3f}, rise {r['rise']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
              f" -> {'rises beyond noise' if r['rises'] else 'no rise beyond noise'}")
    compare_json = a.out / "report" / "compare.json"
    if compare_json.exists():
        res = json.loads(compare_json.read_text())
        base = res["baseline"]
        print(f"\nheld-out lift over the baseline ({100 * base['success_rate']:.1f}%, {base['n_measured']} games) per checkpoint")
        for run, cur in sorted(res["runs"].items()):
            pts = ", ".join(f"{c}: {100 * v:+.1f} pp" for c, v in zip(cur["checkpoints"], cur["lifts"]))
            print(f"  {run}: {pts}")
            summary["backends"].setdefault(run, {})["lifts"] = dict(zip(map(str, cur["checkpoints"]), cur["lifts"]))
        for pair in res.get("pairs", []):
            print(f"\nverdict {pair['a']} vs {pair['b']}: {pair['verdict']}. {pair['explanation']}")
            summary["verdict"] = {"pair": [pair["a"], pair["b"]], "verdict": pair["verdict"],
                                  "explanation": pair["explanation"]}
    print(f"\nwall {wall:.0f} s; {'both backends learn' if ok else 'not every backend rose beyond noise'}")
    (a.out / "learning.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
