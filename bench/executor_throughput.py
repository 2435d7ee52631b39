"""Executor throughput: does the openai executor keep C calls in flight against a slow endpoint?

    .venv/bin/python bench/executor_throughput.py                       # L = 0.5 s, C in 1 8 32 128
    .venv/bin/python bench/executor_throughput.py --latency 0.25 --turns 6 --concurrency 1 8 32 128

A real OpenAI-compatible HTTP server (`twinrun.testing.local_openai.LocalOpenAIServer`, loopback) runs in a
separate process (so its threads do not share this process's GIL) and answers every chat completion after a
fixed latency L. For each C, C episodes run at once through the real ReAct loop and `OpenAIPolicy` (shared
semaphore of size C, real HTTP client), each for `--turns` turns. A perfect client makes C calls every L
seconds: the limit is C/L calls/s. Reported: calls/s, the limit, the ratio (target >= 0.9 at every C) and the
server's peak in-flight count.

The episodes play a stand-in environment (`NullEnv` below: constant observation, no engine, never done): this
bench measures the executor's client side, not a game engine (bench/env_overhead.py measures ALFWorld).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
from pathlib import Path

from twinrun.core.envs import GameRef, Observation, Step
from twinrun.core.executors import Executor, OpenAIPolicy
from twinrun.core.executors.react import ExecutorPrompts, PromptTemplate

ANSWER = "<think>the kettle is on the stove</think>\n<action>look</action>"
PROMPTS = Path(__file__).resolve().parents[1] / "experiments" / "prompts"


def _serve(latency: float, conn) -> None:
    from twinrun.testing.local_openai import LocalOpenAIServer

    with LocalOpenAIServer(lambda req: ANSWER, latency_s=latency) as srv:
        conn.send(srv.base_url)
        while True:
            msg = conn.recv()
            if msg == "stats":
                conn.send({"calls": srv.calls, "max_in_flight": srv.max_in_flight, "cpu_s": time.process_time()})
                srv.max_in_flight = 0
            else:
                break


class NullEnv:
    """Stand-in environment with no engine behind it (see the module docstring)."""

    OBS = Observation(
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
        "a fridge 1, a microwave 1, a sinkbasin 1 and a stoveburner 1.",
        "heat some egg and put it in countertop.",
        ("look", "inventory", "go to cabinet 1", "go to countertop 1", "go to fridge 1", "go to microwave 1"),
    )

    async def areset(self, game, seed=None):
        return self.OBS

    async def astep(self, action):
        return Step(self.OBS, 0.0, False, False)

    async def aexpert_plan(self):
        return []


async def run_level(base_url: str, concurrency: int, turns: int, prompts: ExecutorPrompts, before=None,
                    http_client: str = "auto"):
    policy = OpenAIPolicy(base_url=base_url, model="bench", concurrency=concurrency, retries=0, timeout_s=60,
                          http_client=http_client)
    ex = Executor(policy, prompts, max_turns=turns, history=3)
    game = GameRef("alfworld", "bench/game", "heat", "bench")
    # warm the connection pool so connection set-up is not timed
    await asyncio.gather(*[policy.complete([{"role": "user", "content": "warm"}]) for _ in range(concurrency)])
    policy.calls = 0
    snapshot = before() if before else None  # resets the server's peak counter after the warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    episodes = await asyncio.gather(*[ex.play(NullEnv(), game, seed=i) for i in range(concurrency)])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    transport = policy.transport
    await policy.aclose()
    bad = sum(e.record.outcome == "unmeasured" for e in episodes)
    run_level.transport = transport  # type: ignore[attr-defined]
    return wall, policy.calls, bad, cpu, snapshot


async def measure(parent, base_url, c, turns, prompts, http_client):
    """run_level plus the server's CPU seconds and peak in-flight count over the timed episodes only."""
    policy_run = run_level(base_url, c, turns, prompts, before=lambda: _stats(parent), http_client=http_client)
    wall, calls, bad, cpu, before = await policy_run
    after = _stats(parent)
    return wall, calls, bad, cpu, after["cpu_s"] - before["cpu_s"], after["max_in_flight"]


def _stats(parent) -> dict:
    parent.send("stats")
    return parent.recv()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency", type=float, default=0.5, help="server latency L in seconds")
    ap.add_argument("--turns", type=int, default=4, help="turns per episode")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--http-client", default="auto", choices=["auto", "aiohttp", "httpx"])
    args = ap.parse_args()
    prompts = ExecutorPrompts(PromptTemplate.from_file(PROMPTS / "executor_system.md", "executor_system"),
                              PromptTemplate.from_file(PROMPTS / "executor_input.md", "executor_input"))

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(args.latency, child), daemon=True)
    server.start()
    base_url = parent.recv()
    print(f"server {base_url} in pid {server.pid}, L = {args.latency:.3f} s, {args.turns} turns per episode")
    print(f"{'C':>5s} {'calls':>7s} {'wall s':>8s} {'calls/s':>9s} {'limit C/L':>10s} {'ratio':>7s} {'in flight':>10s}"
          f" {'client ms/call':>15s} {'server ms/call':>15s}")
    worst = 1.0
    try:
        for c in args.concurrency:
            wall, calls, bad, cpu, server_cpu, peak = asyncio.run(measure(parent, base_url, c, args.turns, prompts, args.http_client))
            rate, limit = calls / wall, c / args.latency
            worst = min(worst, rate / limit)
            print(f"{c:5d} {calls:7d} {wall:8.2f} {rate:9.1f} {limit:10.1f} {rate / limit:7.3f} {peak:10d}"
                  f" {cpu / calls * 1000:15.2f} {server_cpu / calls * 1000:15.2f}"
                  + (f"  ({bad} unmeasured!)" if bad else ""))
    finally:
        parent.send("stop")
        server.join(timeout=10)
    print(f"\nclient: {run_level.transport}")  # type: ignore[attr-defined]
    print(f"worst ratio over C: {worst:.3f}  target >= 0.9: {'met' if worst >= 0.9 else 'NOT met'}")


if __name__ == "__main__":
    main()
