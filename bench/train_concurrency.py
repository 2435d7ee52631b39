"""Executor concurrency inside training: does a training step keep C executor calls in flight?

    .venv/bin/python bench/train_concurrency.py                          # L = 0.5 s, C in 8 32, trl and verl
    .venv/bin/python bench/train_concurrency.py --backends trl --concurrency 8 --steps 2

Both backends train the smoke arm (experiments/smoke-cpu.yaml, per_position) with ``executor.kind: openai``
against a real OpenAI-compatible HTTP server on loopback (`twinrun.testing.local_openai.LocalOpenAIServer`, in its
own process so its threads do not share the trainer's GIL) that answers every call after a fixed latency L with
``look`` (so every episode plays exactly ``--turns`` calls). Each step holds C rollouts (``groups_per_step`` =
C / rollouts_per_group): a rollout's positions run one after another (position i+1's episode needs the repo after
the curator's turn at i), so C rollouts are what lets C episodes run at once.

Per step, from the run's own records (metrics.jsonl, rollouts.jsonl):
  ideal       = executor calls x L / C: the executor time with C calls in flight at every instant (the issue's
                episodes x turns x latency / concurrency)
  ideal/step  the share of ideal throughput the whole step reaches (its wall time holds curator generation, the
              update, verl's old_log_prob: none of them the executor's)
  window      = first episode start to last episode end (core.in_flight); ideal/window is the share of ideal
                executor throughput over the rollout phase (target >= 0.8). It factors exactly:
                  ideal/window = occupancy x call share
                occupancy   = episodes_in_flight_mean / C: rollouts waiting for the curator's turn between positions
                              (TRL generates all rollouts' turn i as one batch, so position i+1 starts when the
                              slowest episode of position i has ended; verl's CPU rollout serves one request at a
                              time) leave fewer than C episodes running
                call share  = calls x L / episode-seconds: the share of an episode's wall time spent in its calls;
                              the rest is the environment (ALFWorld reset and steps on environment.workers engine
                              processes: a game new to a worker costs ~0.5 s CPU to load) and the client
  in flight   = episodes_in_flight_mean / _max (metrics.jsonl): executor episodes running at once, time-weighted
  server peak = the most calls the server held at once over the run (<= C: the executor's bound holds)
What bounds it: a rollout plays its positions one after another (position i+1's episode needs the repo after the
curator's turn at i), so at most groups_per_step x rollouts_per_group episodes run at once; the bench sizes each
step to C rollouts, the fewest that can keep C calls in flight. Above that, occupancy and call share are what a
step loses; on a 2-core machine the environment engine is the larger loss at C = 32 (C episodes' game loads and
steps queue on 2 engine processes), and more calls per episode (--turns) amortise it.
The last step of each run is the steady-state row (step 1 includes start-up: warm caches, first compiles).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANSWER = "<think>looking around</think>\n<action>look</action>"


def _serve(latency: float, conn) -> None:
    from twinrun.testing.local_openai import LocalOpenAIServer

    with LocalOpenAIServer(lambda req: ANSWER, latency_s=latency) as srv:
        conn.send(srv.base_url)
        while conn.recv() != "stop":
            conn.send({"calls": srv.calls, "max_in_flight": srv.max_in_flight})
            srv.max_in_flight = 0


def overrides(args: argparse.Namespace, base_url: str, c: int) -> list[str]:
    per_group = args.rollouts_per_group
    if c % per_group:
        raise SystemExit(f"--concurrency {c}: not a multiple of --rollouts-per-group {per_group}")
    return [
        "curator.context=per_position", "curator.history=0", f"curator.max_response_tokens={args.response_tokens}",
        f"steps={args.steps}", f"checkpoint_every={args.steps}",
        f"batch.groups_per_step={c // per_group}", f"batch.rollouts_per_group={per_group}",
        f"environment.group_size={args.group_size}", f"environment.workers={args.env_workers}",
        "curation.correctness=ground_truth",
        "executor.kind=openai", f"executor.base_url={base_url}", "executor.model=bench",
        f"executor.concurrency={c}", f"executor.max_turns={args.turns}", "executor.retries=0",
        "executor.timeout_s=60",
    ]


def step_rows(run: Path, latency: float, c: int) -> list[dict]:
    from twinrun.core.in_flight import episode_intervals, ideal_executor_s
    from twinrun.core.records import RunPaths, read_jsonl

    paths = RunPaths(run)
    rollouts = list(read_jsonl(paths.rollouts))
    out = []
    for m in read_jsonl(paths.metrics):
        recs = [r for r in rollouts if int(r["step"]) == int(m["step"]) - 1]
        spans = episode_intervals(recs)
        window = max(e for _, e in spans) - min(s for s, _ in spans)
        busy = sum(e - s for s, e in spans)  # episode-seconds: window x in_flight_mean
        calls = int(m["executor_calls"])
        out.append({"step": m["step"], "calls": calls, "episodes": m["executor_episodes"],
                    "unmeasured": m["unmeasured_episodes"], "ideal_s": ideal_executor_s(calls, latency, c),
                    "step_s": m["wall_s"].get("step"), "window_s": window, "episode_s": busy / len(spans),
                    "occupancy": m["episodes_in_flight_mean"] / c, "call_share": calls * latency / busy,
                    "in_flight_mean": m["episodes_in_flight_mean"], "in_flight_max": m["episodes_in_flight_max"],
                    "wall_s": m["wall_s"]})
    return out


def train_once(backend: str, spec, out: Path, cache: Path) -> None:
    quiet = (lambda line: print("   ", line, flush=True)) if os.environ.get("BENCH_VERBOSE") else (lambda line: None)
    if backend == "trl":
        from twinrun.backends.trl.train import train

        train(spec, out, cache_dir=cache, log=quiet)
    else:
        from twinrun.backends.verl.train import train

        train(spec, out, cache_dir=cache, log=quiet)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency", type=float, default=0.5, help="server latency L per call, seconds")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--backends", nargs="+", default=["trl", "verl"], choices=["trl", "verl"])
    ap.add_argument("--turns", type=int, default=4, help="executor calls per episode (executor.max_turns)")
    ap.add_argument("--group-size", type=int, default=2, help="|G|: positions per rollout")
    ap.add_argument("--rollouts-per-group", type=int, default=2)
    ap.add_argument("--response-tokens", type=int, default=16, help="curator.max_response_tokens (generation cost)")
    ap.add_argument("--env-workers", type=int, default=2, help="environment.workers (ALFWorld engine processes)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None,
                    help="keep the runs here (default: a temporary folder, removed at the end)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TWINRUN_CACHE", ".cache/twinrun")))
    ap.add_argument("--json", type=Path, default=None, help="also write every row here")
    args = ap.parse_args()

    from twinrun.core.spec import load_spec

    root = args.out or Path(tempfile.mkdtemp(prefix="train-concurrency-"))
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(args.latency, child), daemon=True)
    server.start()
    base_url = parent.recv()
    print(f"server {base_url} (pid {server.pid}), L = {args.latency:g} s, {args.turns} calls per episode, "
          f"|G| = {args.group_size}, C rollouts per step; runs in {root}", flush=True)
    head = (f"{'backend':7s} {'C':>3s} {'step':>4s} {'calls':>5s} {'ideal s':>7s} {'step s':>6s} {'ideal/step':>10s} "
            f"{'window s':>8s} {'ideal/window':>12s} {'in flight mean/max':>18s} {'occupancy':>9s} {'episode s':>9s} "
            f"{'call share':>10s} {'server peak':>11s}")
    rows, summary = [], []
    try:
        for backend in args.backends:
            for c in args.concurrency:
                spec = load_spec(REPO / "experiments" / "smoke-cpu.yaml", overrides(args, base_url, c))
                out = root / f"{backend}-c{c}"
                t0 = time.perf_counter()
                print(f"{backend} C={c}: training {args.steps} steps of {c} rollouts ...", flush=True)
                parent.send("stats")
                parent.recv()
                train_once(backend, spec, out, args.cache.resolve())
                parent.send("stats")
                peak = parent.recv()["max_in_flight"]
                run_s = time.perf_counter() - t0
                print(f"{backend} C={c}: done in {run_s:.0f} s", flush=True)
                for r in step_rows(out, args.latency, c):
                    r.update(backend=backend, concurrency=c, server_peak=peak, run_s=run_s)
                    rows.append(r)
                summary.append(rows[-1])
        print(f"\nL = {args.latency:g} s, {args.turns} calls per episode "
              f"(ideal episode {args.turns * args.latency:g} s), |G| = {args.group_size}, C rollouts per step")
        print(head)
        for r in rows:
            step_s, ideal = r["step_s"] or float("nan"), r["ideal_s"]
            print(f"{r['backend']:7s} {r['concurrency']:3d} {r['step']:4d} {r['calls']:5d} {ideal:7.2f} "
                  f"{step_s:6.2f} {ideal / step_s:10.2f} {r['window_s']:8.2f} {ideal / r['window_s']:12.2f} "
                  f"{r['in_flight_mean']:11.1f} / {r['in_flight_max']:<4d} {r['occupancy']:9.2f} {r['episode_s']:9.2f} "
                  f"{r['call_share']:10.2f} {r['server_peak']:11d}")
        print("\nsteady state (last step of each run); ideal/window = occupancy x call share, target >= 0.8:")
        worst = 1.0
        for r in summary:
            share = r["ideal_s"] / r["window_s"]
            worst = min(worst, share)
            bound = "occupancy" if r["occupancy"] < r["call_share"] else "call share (env engine in the episode)"
            per_step = r["ideal_s"] / (r["step_s"] or float("nan"))
            print(f"  {r['backend']:5s} C={r['concurrency']:<3d} ideal/window {share:.2f} = {r['occupancy']:.2f} x "
                  f"{r['call_share']:.2f} (bound: {bound}); ideal/step {per_step:.2f}; "
                  f"in flight {r['in_flight_mean']:.1f} / {r['in_flight_max']} of {r['concurrency']}; "
                  f"run {r['run_s']:.0f} s")
        print(f"worst ideal/window: {worst:.2f}  target >= 0.8: {'met' if worst >= 0.8 else 'NOT met'}")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    finally:
        parent.send("stop")
        server.join(timeout=10)
        if args.out is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
