"""ALFWorld episodes/s: twinrun's cached engine vs raw textworld, same games, same action sequences, one process.

    .venv/bin/python bench/env_overhead.py                      # ALFWORLD_DATA or --data; 6 games, 3 rounds
    .venv/bin/python bench/env_overhead.py --games 6 --rounds 5

Each game's action sequence is the handcoded expert's plan, recorded once. Every round then plays every game
(reset + that plan) through:
  raw        textworld.start(game, wrappers=[AlfredDemangler, AlfredInfos, AlfredExpert(handcoded)]) once per
             game, then env.reset() + env.step(a) each episode: raw TextWorld, the baseline
  raw-fresh  the same, but textworld.start every episode (what a naive loop pays)
  cached     AlfWorldEnv as twinrun runs it: per-game caches (translation, grammar), engines reused
  uncached   AlfWorldEnv over raw textworld (EngineCache(assets=None)): twinrun's own overhead, target >= 0.95
  pool       EnvPool with one worker process, cached (adds the pipe round trip per call)
in alternating order, so machine-load drift hits all of them alike. Reported per variant: episodes/s (reset + plan,
target cached/raw >= 2), steps/s over step calls only, reset ms, and the paired ratio to raw (median over
rounds). The cold line gives the first episode of each game with empty caches (translation and grammar parse
included) against raw-fresh.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from twinrun.core.envs import EnvPool
from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv, resolve_alfworld_data
from twinrun.core.envs.alfworld_engine import EngineCache, TextWorldAssets, start_textworld

Timing = tuple[float, float, int]  # reset seconds, step seconds, steps


def record_plans(games, max_steps: int) -> list[list[str]]:
    env = AlfWorldEnv()
    plans = []
    for g in games:
        env.reset(g, seed=0)
        acts: list[str] = []
        for _ in range(max_steps):
            acts.append(env.expert_plan()[0])
            if env.step(acts[-1]).done:
                break
        plans.append(acts)
    env.close()
    env.cache.close()
    return plans


class RawEnv:
    """raw textworld behind the bench's reset/step/close calls. started: path -> engine reused (raw); None: start
    one every episode (raw-fresh)."""

    def __init__(self, started: dict | None):
        self.started = started
        self.engine = None

    def reset(self, g, _seed):
        self.engine = self.started[g.path] if self.started is not None else start_textworld(g.path, "handcoded")
        self.engine.reset()

    def step(self, a):
        self.engine.step(a)

    def close(self):
        if self.started is None:
            self.engine.close()


class PoolEnv:
    """One lease per episode, like the executor uses the pool."""

    def __init__(self, pool: EnvPool):
        self.pool = pool
        self.lease = None

    def reset(self, g, seed):
        self.lease = self.pool.lease()
        return self.lease.reset(g, seed)

    def step(self, a):
        return self.lease.step(a)

    def close(self):
        self.lease.close()


def play(env, games, plans) -> Timing:
    reset_s = step_s = 0.0
    steps = 0
    gc.collect()  # the previous variant's garbage is not this variant's cost
    for g, plan in zip(games, plans):
        t0 = time.perf_counter()
        env.reset(g, 0)
        t1 = time.perf_counter()
        for a in plan:
            env.step(a)
        t2 = time.perf_counter()
        env.close()
        reset_s += t1 - t0
        step_s += t2 - t1
        steps += len(plan)
    return reset_s, step_s, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="ALFWorld data folder (default: $ALFWORLD_DATA)")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=30)
    args = ap.parse_args()

    root = resolve_alfworld_data(args.data, os.environ)
    cat = AlfWorldCatalog(root, args.split)
    games = [cat.games(t)[0] for t in cat.task_types()][: args.games]
    plans = record_plans(games, args.max_steps)
    n_games = len(games)
    print(f"games: {n_games} ({', '.join(g.task_type for g in games)}), steps per round: {sum(map(len, plans))}",
          flush=True)

    # cold: the first episode of each game with empty per-game caches, against a fresh textworld.start
    cold_cached = play(AlfWorldEnv(cache=EngineCache(assets=TextWorldAssets())), games, plans)
    cold_raw = play(RawEnv(None), games, plans)

    started = {g.path: start_textworld(g.path, "handcoded") for g in games}
    pool = EnvPool("alfworld", workers=1, options={"expert_type": "handcoded"})
    variants = {
        "raw": RawEnv(started),
        "raw-fresh": RawEnv(None),
        "cached": AlfWorldEnv(cache=EngineCache(assets=TextWorldAssets())),
        "uncached": AlfWorldEnv(cache=EngineCache(assets=None)),
        "pool": PoolEnv(pool),
    }
    for name in ("cached", "uncached", "pool"):  # warm: fill the caches, spawn the worker
        play(variants[name], games, plans)
    res: dict[str, list[Timing]] = {k: [] for k in variants}
    for r in range(args.rounds):
        for k, env in variants.items():
            res[k].append(play(env, games, plans))
        print(f"round {r + 1}: " + ", ".join(f"{k} {n_games / (v[-1][0] + v[-1][1]):.2f} ep/s" for k, v in res.items()),
              flush=True)
    pool.close()
    for v in ("cached", "uncached"):
        variants[v].cache.close()
    for e in started.values():
        e.close()

    def ep_rate(rows: list[Timing]) -> list[float]:
        return [n_games / (rs + ss) for rs, ss, _ in rows]

    def step_rate(rows: list[Timing]) -> list[float]:
        return [n / ss for _, ss, n in rows]

    def ratio(k: str, rate) -> float:
        return statistics.median(b / a for a, b in zip(rate(res["raw"]), rate(res[k])))

    notes = {"raw": "textworld.start once per game", "raw-fresh": "textworld.start every episode",
             "cached": "AlfWorldEnv, per-game caches", "uncached": "AlfWorldEnv over raw textworld",
             "pool": "EnvPool, 1 worker process, cached"}
    print()
    print(f"{'':10s} {'episodes/s':>10s} {'vs raw':>7s} {'steps/s':>8s} {'vs raw':>7s} {'reset ms':>9s}")
    for k in res:
        reset_ms = statistics.median(rs / n_games * 1000 for rs, _, _ in res[k])
        print(f"{k:10s} {statistics.median(ep_rate(res[k])):10.3f} {ratio(k, ep_rate):7.2f} "
              f"{statistics.median(step_rate(res[k])):8.2f} {ratio(k, step_rate):7.2f} {reset_ms:9.0f}  ({notes[k]})")
    cold = (n_games / sum(cold_cached[:2])) / (n_games / sum(cold_raw[:2]))
    print(f"\ncold (first episode per game, empty caches): cached {n_games / sum(cold_cached[:2]):.3f} ep/s, "
          f"raw-fresh {n_games / sum(cold_raw[:2]):.3f} ep/s, ratio {cold:.2f}")
    speedup = ratio("cached", ep_rate)
    print(f"cached/raw episodes/s (median of {args.rounds} paired rounds): {speedup:.2f}  target >= 2: "
          f"{'met' if speedup >= 2 else 'NOT met'}")
    own = ratio("uncached", step_rate)
    print(f"twinrun's wrapper over raw textworld, steps/s ratio: {own:.3f}  target >= 0.95: "
          f"{'met' if own >= 0.95 else 'NOT met'}")


if __name__ == "__main__":
    main()
