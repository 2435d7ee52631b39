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

import os
import shutil

import _common as bench


def main() -> None:
    args = bench.options(__doc__, "1,4,8", "stream counts R, comma-separated")
    bench.environment()
    from twinrun.models.curator_policy import hf_policy_factory
    from twinrun.testing.local_openai import LocalOpenAIServer

    tmp, cache, run = bench.one_checkpoint("sweep-bench-", args.cache)

    def local(arm, s):
        return hf_policy_factory(arm, s, cache_dir=cache)

    def sweep_once(out, base_url, streams, games, batch):
        spec = bench.curator_spec(base_url, streams, args.tokens, batch=batch)
        return bench.sweep_once(spec, run, out, local, games, streams)

    load0 = os.getloadavg()
    rows = []
    with LocalOpenAIServer(lambda req: bench.ANSWER) as srv:
        sweep_once(tmp / "warm", srv.base_url, 1, 1, False)  # imports, caches
        for r in (int(x) for x in args.streams.split(",")):
            walls = {}
            for batch in (False, True):
                walls[batch] = sweep_once(tmp / f"r{r}-{int(batch)}", srv.base_url, r, args.games, batch)
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
