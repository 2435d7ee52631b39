"""A pool of environment worker processes: parallel episodes without sharing a thread-unsafe engine.

textworld (ALFWorld) is not thread-safe and a ScienceWorld JVM serves one episode at a time, so every engine
lives in a worker *process* that hosts many env slots (64 ALFWorld envs fit in ~0.5 GB) and serves one request
at a time. The parent talks to each worker over a pipe from one dedicated thread per worker, so:

- sync callers (TRL tool methods) call ``lease.step(a)``; async callers (verl's agent loop, the executor) await
  ``lease.astep(a)`` from any event loop; either way requests to one worker are serialised and different workers
  run in parallel;
- a worker that dies or hangs is restarted and the affected episodes raise :class:`InfrastructureError`
  (-> `unmeasured`), never a task failure.

``workers=0`` hosts the engines in the parent process behind one dedicated thread (tests, benches; no spawn
cost). Workers are spawned (not forked): the parent may hold threads, an event loop or torch.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing as mp
import threading
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from twinrun.core.envs.base import EnvError, GameRef, Observation, Step, TextEnv
from twinrun.core.errors import InfrastructureError, TwinrunError

ENV_KINDS = ("alfworld", "sciworld", "null_env")  # null_env: the harness-measurement stand-in (envs/null.py)


# ------------------------------------------------------------------------------------------------------------
# Worker side


class EnvHost:
    """Owns the env slots of one worker. Touched by one thread only."""

    def __init__(self, kind: str, options: dict[str, Any]):
        if kind not in ENV_KINDS:
            raise EnvError(f"environment.name: {kind!r} is unknown (fix: one of {', '.join(ENV_KINDS)})")
        self.kind = kind
        self.options = dict(options)
        self.envs: dict[int, TextEnv] = {}
        self._idle: list[TextEnv] = []  # ScienceWorld envs whose JVM is kept for the next slot
        self._cache: Any = None

    def _new_env(self) -> TextEnv:
        if self.kind == "null_env":
            from twinrun.core.envs.null import NullEnv

            return NullEnv()
        if self.kind == "alfworld":
            from twinrun.core.envs.alfworld import AlfWorldEnv
            from twinrun.core.envs.alfworld_engine import DEFAULT_MAX_GAMES, EngineCache, shared_assets

            if self._cache is None:
                games = int(self.options.get("cache_games", DEFAULT_MAX_GAMES))
                self._cache = EngineCache(int(self.options.get("cache_size", 16)),
                                          assets=shared_assets(games) if games > 0 else None)
            return AlfWorldEnv(expert_type=self.options.get("expert_type", "handcoded"), cache=self._cache)
        from twinrun.core.envs.scienceworld import SciWorldEnv

        if self._idle:
            return self._idle.pop()
        return SciWorldEnv(
            heap=self.options.get("heap", "512m"),
            step_limit=int(self.options.get("step_limit", 100)),
            gold_path=bool(self.options.get("gold_path", True)),
            simplification=self.options.get("simplification", ""),
        )

    def handle(self, op: str, slot: int, arg: Any) -> Any:
        if op == "reset":
            env = self.envs.get(slot)
            if env is None:
                env = self.envs[slot] = self._new_env()
            game, seed = arg
            return env.reset(GameRef.from_dict(game), seed)
        if op == "step":
            return self._env(slot).step(arg)
        if op == "plan":
            return self._env(slot).expert_plan()
        if op == "close":
            env = self.envs.pop(slot, None)
            if env is not None:
                env.close()
                if self.kind == "sciworld":
                    self._idle.append(env)
            return None
        if op == "stats":
            assets = getattr(self._cache, "assets", None)
            return {"slots": len(self.envs), "starts": getattr(self._cache, "starts", 0),
                    "loads": getattr(self._cache, "loads", 0), "idle": len(self._idle),
                    "assets": dict(assets.stats) | assets.sizes() if assets is not None else {}}
        raise EnvError(f"env worker: unknown op {op!r}")

    def _env(self, slot: int) -> TextEnv:
        try:
            return self.envs[slot]
        except KeyError:
            raise EnvError(f"env slot {slot}: no episode is running (fix: reset(game) first)") from None

    def shutdown(self) -> None:
        for env in list(self.envs.values()) + self._idle:
            try:
                env.close()
                if hasattr(env, "shutdown"):
                    env.shutdown()
            except Exception:  # noqa: BLE001
                pass
        self.envs.clear()
        self._idle.clear()
        if self._cache is not None:
            self._cache.close()


def _worker_main(conn: Any, kind: str, options: dict[str, Any]) -> None:
    host = EnvHost(kind, options)
    try:
        while True:
            try:
                op, slot, arg = conn.recv()
            except (EOFError, OSError):
                break
            if op == "exit":
                break
            try:
                conn.send(("ok", host.handle(op, slot, arg)))
            except TwinrunError as e:
                conn.send(("input", str(e)))
            except InfrastructureError as e:
                conn.send(("infra", str(e)))
            except Exception as e:  # noqa: BLE001 - anything else the engine throws is infrastructure
                conn.send(("infra", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))
    finally:
        host.shutdown()
        conn.close()


# ------------------------------------------------------------------------------------------------------------
# Parent side


class _Worker:
    """One worker process (or the in-process host) plus the single thread that talks to it."""

    def __init__(self, index: int, kind: str, options: dict[str, Any], in_process: bool, call_timeout_s: float):
        self.index = index
        self.kind = kind
        self.options = options
        self.in_process = in_process
        self.call_timeout_s = call_timeout_s
        self.active = 0  # open leases, for least-loaded placement
        self.generation = 0  # bumped on every restart: leases of an older generation are gone
        self.restarts = 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"twinrun-env-{index}")
        self._host: EnvHost | None = None
        self._proc: Any = None
        self._conn: Any = None

    # runs on self._thread only
    def _ensure(self) -> None:
        if self.in_process:
            if self._host is None:
                self._host = EnvHost(self.kind, self.options)
            return
        if self._proc is None or not self._proc.is_alive():
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(child, self.kind, self.options), daemon=True,
                               name=f"twinrun-env-{self.index}")
            proc.start()
            child.close()
            self._proc, self._conn = proc, parent

    def _call(self, generation: int, op: str, slot: int, arg: Any) -> Any:
        if generation != self.generation:
            raise InfrastructureError(f"env worker {self.index} was restarted; this episode's env is gone")
        self._ensure()
        if self.in_process:
            assert self._host is not None
            try:
                return self._host.handle(op, slot, arg)
            except (TwinrunError, InfrastructureError):
                raise
            except Exception as e:  # noqa: BLE001
                raise InfrastructureError(f"env {op} failed: {type(e).__name__}: {e}") from e
        try:
            self._conn.send((op, slot, arg))
            if not self._conn.poll(self.call_timeout_s):
                self._restart()
                raise InfrastructureError(f"env worker {self.index}: {op} took over {self.call_timeout_s:.0f} s; restarted")
            status, value = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError) as e:
            self._restart()
            raise InfrastructureError(f"env worker {self.index} died during {op} ({type(e).__name__}); restarted") from e
        if status == "ok":
            return value
        if status == "input":
            raise EnvError(value)
        raise InfrastructureError(value)

    def _restart(self) -> None:
        self.generation += 1
        self.restarts += 1
        self._stop_process()

    def _stop_process(self) -> None:
        if self._proc is not None:
            try:
                self._conn.send(("exit", 0, None))
            except Exception:  # noqa: BLE001
                pass
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
            self._conn.close()
            self._proc, self._conn = None, None

    def _close(self) -> None:
        if self._host is not None:
            self._host.shutdown()
            self._host = None
        self._stop_process()

    # any thread
    def submit(self, generation: int, op: str, slot: int, arg: Any = None) -> Future:
        return self._thread.submit(self._call, generation, op, slot, arg)

    def close(self) -> None:
        try:
            self._thread.submit(self._close).result(timeout=30)
        except Exception:  # noqa: BLE001
            pass
        self._thread.shutdown(wait=False)


class EnvPool:
    """`workers` engine processes (0 = in this process), each hosting any number of env slots.

    kind: "alfworld" | "sciworld". options: engine options (alfworld: expert_type, cache_size = idle engines kept,
    cache_games = games whose translation and grammar are cached, 0 = raw textworld; sciworld: heap, step_limit,
    gold_path, simplification). call_timeout_s: a worker that does not answer within it is
    restarted and the call raises InfrastructureError."""

    def __init__(self, kind: str, *, workers: int, options: dict[str, Any] | None = None, call_timeout_s: float = 300.0):
        if kind not in ENV_KINDS:
            raise EnvError(f"environment.name: {kind!r} is unknown (fix: one of {', '.join(ENV_KINDS)})")
        if workers < 0:
            raise EnvError(f"environment.workers: {workers} must be >= 0 (fix: 0 = in-process, else processes)")
        self.kind = kind
        in_process = workers == 0
        self._workers = [
            _Worker(i, kind, dict(options or {}), in_process, call_timeout_s) for i in range(max(1, workers))
        ]
        self._slots = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def size(self) -> int:
        return len(self._workers)

    def lease(self) -> EnvLease:
        """An env slot on the least-loaded worker; close it when the episode ends (or use `with`)."""
        if self._closed:
            raise EnvError("env pool: closed (fix: create a new pool)")
        with self._lock:
            worker = min(self._workers, key=lambda w: (w.active, w.index))
            worker.active += 1
            slot = next(self._slots)
        return EnvLease(self, worker, slot)

    def stats(self) -> list[dict[str, Any]]:
        out = []
        for w in self._workers:
            try:
                s = w.submit(w.generation, "stats", 0).result(timeout=30)
            except Exception as e:  # noqa: BLE001
                s = {"error": str(e)}
            out.append({"worker": w.index, "active": w.active, "restarts": w.restarts, **s})
        return out

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for w in self._workers:
                w.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EnvLease:
    """One env slot in a pool: the TextEnv calls, sync and async (``a``-prefixed, usable from any event loop)."""

    def __init__(self, pool: EnvPool, worker: _Worker, slot: int):
        self._pool = pool
        self._worker = worker
        self._slot = slot
        self._generation = worker.generation
        self._closed = False

    def _fut(self, op: str, arg: Any = None) -> Future:
        if self._closed:
            raise EnvError("env lease: closed (fix: take a new lease from the pool)")
        return self._worker.submit(self._generation, op, self._slot, arg)

    # sync
    def reset(self, game: GameRef, seed: int | None = None) -> Observation:
        return self._fut("reset", (game.to_dict(), seed)).result()

    def step(self, action: str) -> Step:
        return self._fut("step", action).result()

    def expert_plan(self) -> list[str]:
        return self._fut("plan").result()

    # async
    async def areset(self, game: GameRef, seed: int | None = None) -> Observation:
        return await asyncio.wrap_future(self._fut("reset", (game.to_dict(), seed)))

    async def astep(self, action: str) -> Step:
        return await asyncio.wrap_future(self._fut("step", action))

    async def aexpert_plan(self) -> list[str]:
        return await asyncio.wrap_future(self._fut("plan"))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._pool._lock:
            self._worker.active -= 1
        if self._generation == self._worker.generation:
            self._worker.submit(self._generation, "close", self._slot)  # fire and forget: ordered after our calls

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> EnvLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
