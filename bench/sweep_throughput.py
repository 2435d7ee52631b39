"""Games per second of one sweep arm (one checkpoint) with R streams: one at a time vs batched, in one run.

    .venv/bin/python bench/sweep_throughput.py [--streams 1,4,8] [--games 4] [--tokens 128] [--cache DIR]

For each R, the same checkpoint (the tiny Qwen3, random weights, fp32, built locally) is swept on the same games
twice in this process: ``sweep.batch_streams: false`` (each stream its own arm, one curator call per game, a batch
of one: the path every sweep took before issue 39) and ``true`` (the R streams advance together and each curator
call generates for R inputs, left-padded). Printed: games per second (R x games / wall seconds, model loading
included) and the ratio batched / one at a time, with the load average while it ran.

What is measured is the sweep's own cost per game: the curator's generation (``--tokens`` new tokens at most per
turn; a random model ends a turn at its end-of-sequence token at random) and the harness. The executor is a real
OpenAI-compatible HTTP server on loopback answering at once, the environment the null environment (no engine
CPU: core/envs/null.py), so the engine's CPU on this small machine does not hide the curator's. On a GPU node the
executor is a vLLM server either way and the episodes of R streams run concurrently in both modes' favour.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ANSWER = "<think>looking around</think>\n<action>look</action>"


def sweep_once(spec_path: Path, run: Path, out: Path, cache: Path, base_url: str, streams: int, games: int,
               tokens: int, batch: bool) -> float:
    from twinrun.core.spec import load_spec
    from twinrun.core.sweeps import sweep as sw
    from twinrun.models.curator_policy import hf_policy_factory

    spec = load_spec(spec_path, [
        "environment.name=null_env", "environment.task_types=null", "environment.workers=1",
        "executor.kind=openai", "executor.skill_effect=0", f"executor.base_url={base_url}", "executor.model=bench",
        "executor.retries=0", "executor.max_turns=8", "executor.self_judge_error=0", "curation.correctness=ground_truth",
        "curation.sweep_correctness=ground_truth",
        f"curator.max_response_tokens={tokens}", f"sweep.streams={streams}", f"sweep.batch_streams={str(batch).lower()}",
    ])
    arms = [sw.arm_name("b", 1, r) for r in range(streams)]  # the checkpoint's streams; no baseline
    t0 = time.perf_counter()
    sw.sweep(spec, {"b": run}, out, n_games=games, progress=False, arms=arms, environ={},
             policy_factory=lambda arm, s: hf_policy_factory(arm, s, cache_dir=cache))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--games", type=int, default=4, help="games per stream")
    ap.add_argument("--tokens", type=int, default=128, help="curator.max_response_tokens")
    ap.add_argument("--cache", type=Path, default=None, help="tiny-model cache folder (default: a temp folder)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from twinrun.models import build_tiny_qwen3
    from twinrun.testing.local_openai import LocalOpenAIServer

    tmp = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    cache = args.cache or tmp / "cache"
    run = tmp / "b"
    shutil.copytree(build_tiny_qwen3(cache), run / "checkpoints" / "step-000001")
    spec_path = repo / "experiments" / "smoke-cpu.yaml"
    load0 = os.getloadavg()
    rows = []
    with LocalOpenAIServer(lambda req: ANSWER) as srv:
        sweep_once(spec_path, run, tmp / "warm", cache, srv.base_url, 1, 1, args.tokens, False)  # imports, caches
        for r in (int(x) for x in args.streams.split(",")):
            walls = {}
            for batch in (False, True):
                walls[batch] = sweep_once(spec_path, run, tmp / f"r{r}-{int(batch)}", cache, srv.base_url, r,
                                          args.games, args.tokens, batch)
            n = r * args.games
            rows.append((r, n / walls[False], n / walls[True], walls[False] / walls[True]))
            print(f"R={r}: one at a time {rows[-1][1]:.3f} games/s, batched {rows[-1][2]:.3f} games/s, "
                  f"ratio {rows[-1][3]:.2f}", flush=True)
    load1 = os.getloadavg()
    print(f"\nsweep throughput: one checkpoint, {args.games} games per stream, curator turns <= {args.tokens} tokens "
          f"(tiny Qwen3, fp32, CPU); load average {load0[0]:.2f} at start, {load1[0]:.2f} at end ({os.cpu_count()} CPUs)")
    print(f"{'R':>3} {'one-at-a-time g/s':>18} {'batched g/s':>12} {'ratio':>6}")
    for r, one, bat, ratio in rows:
        print(f"{r:>3} {one:>18.3f} {bat:>12.3f} {ratio:>6.2f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
