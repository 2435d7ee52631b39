"""Environment overhead: raw textworld vs twinrun's ALFWorld env, same games, same action sequences.

    .venv/bin/python bench/env_overhead.py                      # ALFWORLD_DATA or --data; 4 games, 5 rounds
    .venv/bin/python bench/env_overhead.py --games 6 --rounds 5

Each game's action sequence is the handcoded expert's plan, recorded once. Every round then replays every
sequence through:
  raw        textworld.start(game, wrappers=[AlfredDemangler, AlfredInfos, AlfredExpert(handcoded)]) once per
             game, then env.reset() + env.step(a) each round (the engine with nothing around it)
  raw-fresh  the same, but textworld.start every episode (what a naive loop pays; reset cost only)
  twinrun    AlfWorldEnv (same wrappers; adds observation parsing, admissible filtering, RNG isolation, the
             started-game cache)
  pool       twinrun's EnvPool with one worker process (adds the pipe round trip per call)
in alternating order, so machine-load drift hits all of them alike. Reported: steps/s over step calls only (the
hot loop of an episode) and the paired ratio twinrun/raw (target >= 0.95), plus the reset cost per episode;
steps per CPU-second of this process (less sensitive to other processes on a shared machine); and an in-situ
split of twinrun's step time into engine time and twinrun's own time (the engine call is timed inside the
wrapper on the very same steps, so load drift between variants cannot move it).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from twinrun.core.envs import EnvPool
from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv, resolve_alfworld_data


def raw_start(path: str):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
    return textworld.start(path, request_infos=infos,
                           wrappers=[AlfredDemangler(shuffle=False), AlfredInfos, AlfredExpert(expert_type="handcoded")])


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


def run_raw(games, plans, started: dict | None) -> tuple[float, float, int, float]:
    """started: game path -> started env to reuse (raw); None starts every episode afresh (raw-fresh)."""
    reset_s = step_s = cpu_s = 0.0
    steps = 0
    gc.collect()  # the previous variant's garbage is not this variant's cost
    for g, plan in zip(games, plans):
        t0 = time.perf_counter()
        env = started[g.path] if started is not None else raw_start(g.path)
        env.reset()
        t1, c1 = time.perf_counter(), time.process_time()
        for a in plan:
            env.step(a)
        t2 = time.perf_counter()
        cpu_s += time.process_time() - c1
        if started is None:
            env.close()
        reset_s += t1 - t0
        step_s += t2 - t1
        steps += len(plan)
    return reset_s, step_s, steps, cpu_s


def run_twinrun(env, games, plans) -> tuple[float, float, int, float]:
    reset_s = step_s = cpu_s = 0.0
    steps = 0
    gc.collect()
    for g, plan in zip(games, plans):
        t0 = time.perf_counter()
        env.reset(g, 0)
        t1, c1 = time.perf_counter(), time.process_time()
        for a in plan:
            env.step(a)
        t2 = time.perf_counter()
        cpu_s += time.process_time() - c1
        env.close()
        reset_s += t1 - t0
        step_s += t2 - t1
        steps += len(plan)
    return reset_s, step_s, steps, cpu_s


class _TimedEngine:
    """Proxy around a started textworld env that accumulates the time spent inside the engine's step()."""

    def __init__(self, env, clock: list[float]):
        self._env = env
        self._clock = clock

    def step(self, command):
        t0 = time.perf_counter()
        try:
            return self._env.step(command)
        finally:
            self._clock[0] += time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self._env, name)


def instrument(env: AlfWorldEnv) -> list[float]:
    """Make `env`'s cache hand out timed engines; returns the engine-time accumulator [seconds]."""
    clock = [0.0]
    checkout, checkin = env.cache.checkout, env.cache.checkin
    env.cache.checkout = lambda path, expert: _TimedEngine(checkout(path, expert), clock)  # type: ignore[method-assign]
    env.cache.checkin = lambda path, expert, e: checkin(path, expert, e._env)  # type: ignore[method-assign]
    return clock


class _PoolEnv:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None, help="ALFWorld data folder (default: $ALFWORLD_DATA)")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=20)
    args = ap.parse_args()

    root = resolve_alfworld_data(args.data, os.environ)
    cat = AlfWorldCatalog(root, args.split)
    games = [cat.games(t)[0] for t in cat.task_types()][: args.games]
    plans = record_plans(games, args.max_steps)
    print(f"games: {len(games)} ({', '.join(g.task_type for g in games)}), steps per round: {sum(map(len, plans))}")

    env = AlfWorldEnv()
    engine_clock = instrument(env)
    pool = EnvPool("alfworld", workers=1, options={"expert_type": "handcoded"})
    pool_env = _PoolEnv(pool)
    run_twinrun(pool_env, games, plans)  # warm: spawn the worker, start the games once
    run_twinrun(env, games, plans)
    started = {g.path: raw_start(g.path) for g in games}
    run_raw(games, plans, started)
    res: dict[str, list[tuple[float, float, int, float]]] = {"raw": [], "twinrun": [], "pool": [], "raw-fresh": []}
    inside: list[float] = []  # per round: engine seconds inside twinrun's step calls
    for r in range(args.rounds):
        res["raw"].append(run_raw(games, plans, started))
        engine_clock[0] = 0.0
        res["twinrun"].append(run_twinrun(env, games, plans))
        inside.append(engine_clock[0])
        res["pool"].append(run_twinrun(pool_env, games, plans))
        res["raw-fresh"].append(run_raw(games, plans, None))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][2] / v[-1][1]:.2f} steps/s" for k, v in res.items()), flush=True)
    env.cache.close()
    pool.close()
    for e in started.values():
        e.close()

    def rate(rows):  # steps/s per round (wall clock)
        return [s / t for _, t, s, _ in rows]

    def cpu_rate(rows):  # steps per CPU second of this process (robust to other load; in-process variants only)
        return [s / c for _, _, s, c in rows]

    def reset_ms(rows):
        return statistics.median(rs / len(games) * 1000 for rs, _, _, _ in rows)

    def ratio(k):
        return statistics.median(b / a for a, b in zip(rate(res["raw"]), rate(res[k])))

    notes = {"raw": "engine only, started once", "twinrun": "AlfWorldEnv in this process",
             "pool": "EnvPool, 1 worker process", "raw-fresh": "textworld.start every episode"}
    print()
    print(f"{'':10s} {'steps/s':>9s} {'ratio vs raw':>13s} {'reset ms':>9s}")
    for k in res:
        print(f"{k:10s} {statistics.median(rate(res[k])):9.2f} {ratio(k):13.3f} {reset_ms(res[k]):9.0f}  ({notes[k]})")
    ratios_tw = [b / a for a, b in zip(rate(res["raw"]), rate(res["twinrun"]))]
    cpu_ratio = statistics.median(b / a for a, b in zip(cpu_rate(res["raw"]), cpu_rate(res["twinrun"])))
    print(f"\nCPU-time step rate (this process only): raw {statistics.median(cpu_rate(res['raw'])):.2f}, "
          f"twinrun {statistics.median(cpu_rate(res['twinrun'])):.2f} steps per CPU-s, ratio {cpu_ratio:.3f}")
    # the same steps, timed inside and outside the wrapper: immune to load drift between variants
    total_tw = sum(t for _, t, _, _ in res["twinrun"])
    steps_tw = sum(n for _, _, n, _ in res["twinrun"])
    overhead_us = (total_tw - sum(inside)) / steps_tw * 1e6
    print(f"in-situ: twinrun's own time per step {overhead_us:.0f} us of {total_tw / steps_tw * 1e3:.1f} ms; "
          f"engine share of twinrun's step time {sum(inside) / total_tw:.4f}")
    ok = statistics.median(ratios_tw) >= 0.95
    print(f"\ntwinrun/raw step-rate ratio (median of {args.rounds} paired rounds): "
          f"{statistics.median(ratios_tw):.3f}  target >= 0.95: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
