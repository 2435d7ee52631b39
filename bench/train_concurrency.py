"""Executor concurrency inside training: does a training step keep C executor calls in flight?

    .venv/bin/python bench/train_concurrency.py                          # ALFWorld, L = 0.5 s, C in 8 32
    .venv/bin/python bench/train_concurrency.py --env null --concurrency 32 --rollouts-per-slot 8 \
        --group-size 4 --steps 1 --trl-schedules barrier ready           # the harness alone, TRL before/after

Both backends train the smoke arm (experiments/smoke-cpu.yaml, per_position) with ``executor.kind: openai``
against a real OpenAI-compatible HTTP server on loopback (`twinrun.testing.local_openai.LocalOpenAIServer`, in its
own process so its threads do not share the trainer's GIL) that answers every call after a fixed latency L with
``look``. ``--env alfworld`` plays real ALFWorld games, each episode exactly ``--turns`` calls (the machine's
engine CPU is in the numbers); ``--env null`` plays the null environment (core/envs/null.py: no engine CPU),
whose episode lengths are heavy-tailed: turns = clip(round(LogNormal(ln 8, 0.8)), 2, 50), mean ~10.5, p90 ~21,
p99 50, so what is left is the harness. Each step holds ``--rollouts-per-slot`` x C rollouts
(``groups_per_step`` = that / rollouts_per_group); the executor's bound keeps at most C calls in flight. TRL runs
once per ``--trl-schedules`` entry: ``ready`` (its default: a rollout's next position starts when its own turn is
generated) and ``barrier`` (every rollout's turn p in one call: the earlier schedule, the before).

Per step, from the run's own records (metrics.jsonl, rollouts.jsonl) and the server's call times:
  ideal       = executor calls x L / C: the executor time with C calls in flight at every instant
  window      = first episode start to last episode end (core.in_flight); ideal/window is the share of ideal
                executor throughput over the rollout phase
  lost        = core.in_flight.executor_losses: the idle share of C x window, charged at each instant to what the
                rollouts not in a call were doing: environment (in an episode, not in a call: engine steps and the
                executor's client), barrier (waiting for the slowest episode of the position: TRL's barrier
                schedule), curator (waiting for its own turn: generation, and ops applied), drain (no rollout left
                to fill the slot: the straggler tail, set by the episode lengths and the rollouts per slot)
  occupancy   = episodes_in_flight_mean / C, call share = calls x L / episode-seconds: ideal/window = their product
                (with more than C rollouts per step occupancy can pass 1: episodes wait for a call slot)
  in flight   = episodes_in_flight_mean / _max (metrics.jsonl): executor episodes running at once, time-weighted
  server peak = the most calls the server held at once over the run (<= C: the executor's bound holds)
What bounds it: a rollout plays its positions one after another (position i+1's episode needs the repo after the
curator's turn at i), and a step ends with its slowest rollout. With heavy-tailed episodes and C rollouts per step
the drain alone costs ~40-60% of C x window whatever the harness does (a zero-cost harness, simulated); with 8 x C
rollouts and |G| = 4 it is ~7%, so the harness's own losses (barrier, curator) are what the bench can see.
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

    ends: list[float] = []  # unix time each call is answered (it began `latency` before)

    def answer(req):
        ends.append(time.time())
        return ANSWER

    with LocalOpenAIServer(answer, latency_s=latency) as srv:
        conn.send(srv.base_url)
        while conn.recv() != "stop":
            conn.send({"calls": srv.calls, "max_in_flight": srv.max_in_flight, "ends": list(ends)})
            srv.max_in_flight = 0
            ends.clear()
            srv.applied.clear()
            srv.received.clear()


def overrides(args: argparse.Namespace, base_url: str, c: int) -> list[str]:
    per_group = args.rollouts_per_group
    rollouts = c * args.rollouts_per_slot
    if rollouts % per_group:
        raise SystemExit(f"--concurrency {c} x --rollouts-per-slot {args.rollouts_per_slot}: not a multiple of "
                         f"--rollouts-per-group {per_group}")
    if args.env == "null":
        from twinrun.core.envs.null import TURNS_MAX

        env = ["environment.name=null_env", "environment.task_types=null", "environment.workers=1",
               f"executor.max_turns={TURNS_MAX}"]  # the episode's own length decides, never the cap
    else:
        env = [f"environment.workers={args.env_workers}", f"executor.max_turns={args.turns}"]
    micro = [f"batch.micro_batch_per_device={args.micro_batch}"] if args.micro_batch else []
    if args.curator_model:
        micro.append(f"curator.model={args.curator_model}")
    return [
        *micro, "curator.context=per_position", "curator.history=0", f"curator.max_response_tokens={args.response_tokens}",
        f"steps={args.steps}", f"checkpoint_every={args.steps}",
        f"batch.groups_per_step={rollouts // per_group}", f"batch.rollouts_per_group={per_group}",
        f"environment.group_size={args.group_size}", *env,
        "curation.correctness=ground_truth",
        "executor.kind=openai", "executor.skill_effect=0", f"executor.base_url={base_url}", "executor.model=bench",
        f"executor.concurrency={c}", "executor.retries=0", "executor.timeout_s=600",
    ]


def rollout_spans(rec: dict) -> list[tuple[float, float]]:
    """A rollouts.jsonl row's own episodes, (start, end) in position order."""
    out = []
    for p in rec["positions"]:
        start, wall = p.get("episode_started_at"), p.get("episode_wall_s")
        if start is not None and wall is not None and not p.get("episode_shared"):
            out.append((float(start), float(start) + float(wall)))
    return out


def step_rows(run: Path, latency: float, c: int, call_ends: list[float], barrier: bool) -> list[dict]:
    from twinrun.core.advantages.in_flight import episode_intervals, executor_losses, ideal_executor_s
    from twinrun.core.records import RunPaths, read_jsonl

    paths = RunPaths(run)
    rollouts = list(read_jsonl(paths.rollouts))
    out = []
    for m in read_jsonl(paths.metrics):
        recs = [r for r in rollouts if int(r["step"]) == int(m["step"]) - 1]
        spans = episode_intervals(recs)
        lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
        window = hi - lo
        calls_iv = [(e - latency, e) for e in call_ends if lo - 1 <= e <= hi + 1]
        losses = executor_losses(calls_iv, [rollout_spans(r) for r in recs], c, barrier=barrier)
        busy = sum(e - s for s, e in spans)  # episode-seconds: window x in_flight_mean
        calls = int(m["executor_calls"])
        out.append({"step": m["step"], "calls": calls, "episodes": m["executor_episodes"],
                    "unmeasured": m["unmeasured_episodes"], "ideal_s": ideal_executor_s(calls, latency, c),
                    "step_s": m["wall_s"].get("step"), "window_s": window, "episode_s": busy / len(spans),
                    "occupancy": m["episodes_in_flight_mean"] / c, "call_share": calls * latency / busy,
                    "in_flight_mean": m["episodes_in_flight_mean"], "in_flight_max": m["episodes_in_flight_max"],
                    "rollouts": len(recs), "losses": losses, "wall_s": m["wall_s"]})
    return out


def train_once(backend: str, spec, out: Path, cache: Path, schedule: str) -> None:
    quiet = (lambda line: print("   ", line, flush=True)) if os.environ.get("BENCH_VERBOSE") else (lambda line: None)
    if backend == "trl":
        from twinrun.backends.trl.train import train

        train(spec, out, cache_dir=cache, log=quiet, position_schedule=schedule)
    else:
        from twinrun.backends.verl.train import train

        train(spec, out, cache_dir=cache, log=quiet)


def zero_cost_harness(rollouts: int, c: int, group_size: int, seeds: int = 5) -> float:
    """ideal/window a harness with no cost (no environment CPU, curator turns in zero time, no barrier) would
    reach on null-environment episodes: an event simulation of `rollouts` rollouts of `group_size` episodes each
    (lengths from core.envs.null.episode_plan) sharing C call slots in first-come order. Mean over seeds."""
    import heapq

    from twinrun.core.envs.null import episode_plan

    shares = []
    for seed in range(seeds):
        turns = [[episode_plan(f"sim/{seed}/{r}", p)[0] for p in range(group_size)] for r in range(rollouts)]
        queue, events, free, now = list(range(rollouts)), [], c, 0.0
        state = [[0, 0] for _ in range(rollouts)]  # (position, calls done in its episode)
        while True:
            while free and queue:  # a call takes one latency unit
                free -= 1
                heapq.heappush(events, (now + 1.0, queue.pop(0)))
            if not events:
                break
            now, r = heapq.heappop(events)
            free += 1
            p, done = state[r]
            done += 1
            if done >= turns[r][p]:  # its episode ended: its next one starts at once (no curator cost)
                p, done = p + 1, 0
            state[r] = [p, done]
            if p < group_size:
                queue.append(r)
        end = now
        shares.append(sum(map(sum, turns)) / c / end)
    return sum(shares) / len(shares)


def arms(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(backend, TRL position schedule) of every run: TRL's barrier schedule (the before) next to its default."""
    out = []
    for b in args.backends:
        if b == "trl":
            out += [("trl", sch) for sch in args.trl_schedules]
        else:
            out.append((b, "-"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", choices=["alfworld", "null"], default="alfworld",
                    help="alfworld: the real engine; null: core/envs/null.py, no CPU, heavy-tailed episode lengths")
    ap.add_argument("--latency", type=float, default=0.5, help="server latency L per call, seconds")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--backends", nargs="+", default=["trl", "verl"], choices=["trl", "verl"])
    ap.add_argument("--trl-schedules", nargs="+", default=["ready"], choices=["ready", "barrier"],
                    help="TRL per_position schedules to run (barrier: the earlier one, as the before)")
    ap.add_argument("--rollouts-per-slot", type=int, default=1,
                    help="rollouts per step = this x C (more than one lets finished rollouts' slots be refilled)")
    ap.add_argument("--turns", type=int, default=4, help="alfworld: executor calls per episode (executor.max_turns)")
    ap.add_argument("--group-size", type=int, default=2, help="|G|: positions per rollout")
    ap.add_argument("--rollouts-per-group", type=int, default=2)
    ap.add_argument("--response-tokens", type=int, default=16, help="curator.max_response_tokens (generation cost)")
    ap.add_argument("--env-workers", type=int, default=2, help="environment.workers (ALFWorld engine processes)")
    ap.add_argument("--micro-batch", type=int, default=None,
                    help="batch.micro_batch_per_device (default: the smoke arm's 1; the update is not measured)")
    ap.add_argument("--curator-model", default=None,
                    help="curator.model (default: the smoke arm's warm-started tiny-qwen3, built once per setting; "
                         "a local folder such as the untrained tiny model skips that build: the harness's cost is "
                         "the same whatever the curator writes)")
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
    if args.env == "null":
        from twinrun.core.envs.null import TURNS_MAX, TURNS_MEDIAN, TURNS_MIN, TURNS_SIGMA

        episodes = (f"null environment: turns = clip(round(LogNormal(ln {TURNS_MEDIAN}, {TURNS_SIGMA})), "
                    f"{TURNS_MIN}, {TURNS_MAX}) calls per episode")
    else:
        episodes = f"ALFWorld, {args.turns} calls per episode"
    print(f"server {base_url} (pid {server.pid}), L = {args.latency:g} s, {episodes}, |G| = {args.group_size}, "
          f"{args.rollouts_per_slot} x C rollouts per step; runs in {root}", flush=True)
    head = (f"{'backend':12s} {'C':>3s} {'R':>4s} {'step':>4s} {'calls':>6s} {'ideal s':>7s} {'step s':>7s} "
            f"{'window s':>8s} {'ideal/window':>12s} {'lost: env':>9s} {'barrier':>7s} {'curator':>7s} "
            f"{'drain':>6s} {'occupancy':>9s} {'call share':>10s} {'in flight mean/max':>18s} {'server peak':>11s}")
    rows, summary = [], []
    try:
        for backend, schedule in arms(args):
            label = backend if schedule == "-" else f"{backend}/{schedule}"
            for c in args.concurrency:
                spec = load_spec(REPO / "experiments" / "smoke-cpu.yaml", overrides(args, base_url, c))
                out = root / f"{label.replace('/', '-')}-c{c}"
                t0 = time.perf_counter()
                print(f"{label} C={c}: training {args.steps} steps of {c * args.rollouts_per_slot} rollouts ...",
                      flush=True)
                parent.send("stats")
                parent.recv()
                train_once(backend, spec, out, args.cache.resolve(), schedule if schedule != "-" else "ready")
                parent.send("stats")
                stats = parent.recv()
                run_s = time.perf_counter() - t0
                print(f"{label} C={c}: done in {run_s:.0f} s", flush=True)
                for r in step_rows(out, args.latency, c, stats["ends"], barrier=schedule == "barrier"):
                    r.update(backend=label, concurrency=c, server_peak=stats["max_in_flight"], run_s=run_s)
                    rows.append(r)
                summary.append(rows[-1])
                last = rows[-1]
                print(f"{label} C={c}: last step ideal/window {last['ideal_s'] / last['window_s']:.2f}, lost "
                      + ", ".join(f"{k} {v:.2f}" for k, v in last["losses"].items() if k != "calls"), flush=True)
                if args.json:  # after every run, so a long bench that is stopped keeps what it measured
                    args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"\nL = {args.latency:g} s, {episodes}, |G| = {args.group_size}, {args.rollouts_per_slot} x C rollouts "
              "per step")
        print("lost: shares of C x window without a call, charged to what the rollouts not in a call were doing "
              "(core.in_flight.executor_losses)")
        print(head)
        for r in rows:
            step_s, ideal, lost = r["step_s"] or float("nan"), r["ideal_s"], r["losses"]
            print(f"{r['backend']:12s} {r['concurrency']:3d} {r['rollouts']:4d} {r['step']:4d} {r['calls']:6d} "
                  f"{ideal:7.2f} {step_s:7.2f} {r['window_s']:8.2f} {ideal / r['window_s']:12.2f} "
                  f"{lost['environment']:9.2f} {lost['barrier']:7.2f} {lost['curator']:7.2f} {lost['drain']:6.2f} "
                  f"{r['occupancy']:9.2f} {r['call_share']:10.2f} "
                  f"{r['in_flight_mean']:11.1f} / {r['in_flight_max']:<4d} {r['server_peak']:11d}")
        print("\nsteady state (last step of each run); ideal/window = calls x L / (C x window):")
        bounds: dict[int, float] = {}
        for c in args.concurrency:
            if args.env == "null":
                bounds[c] = bound = zero_cost_harness(c * args.rollouts_per_slot, c, args.group_size)
                print(f"  C={c}: a harness with no cost would reach ideal/window {bound:.2f} on these episode lengths "
                      f"({c * args.rollouts_per_slot} rollouts of {args.group_size} positions; simulated)")
        for r in summary:
            share, lost = r["ideal_s"] / r["window_s"], r["losses"]
            worst = max(("environment", "barrier", "curator", "drain"), key=lambda k: lost[k])
            # the harness's own efficiency: ideal/window over what a free harness reaches at this step size (the
            # drain of a synchronous step is the algorithm's, not the harness's; issue 33)
            of_free = f" ({share / bounds[r['concurrency']]:.2f} of a free harness's)" if r["concurrency"] in bounds else ""
            print(f"  {r['backend']:12s} C={r['concurrency']:<3d} R={r['rollouts']:<4d} ideal/window {share:.2f}{of_free}; "
                  f"in calls {lost['calls']:.2f}, lost to environment {lost['environment']:.2f}, barrier "
                  f"{lost['barrier']:.2f}, curator {lost['curator']:.2f}, drain {lost['drain']:.2f} "
                  f"(largest: {worst}); run {r['run_s']:.0f} s")
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
