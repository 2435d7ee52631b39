"""The curation rollout as a TRL ``environment_factory`` environment, and the broker that drives its sessions.

TRL 1.16 turns every public function of the environment class (except ``reset`` / ``get_reward``) into a tool
(``inspect.getmembers(type(env), inspect.isfunction)``, names not starting with ``_``). The curator must see
exactly ONE tool, ``curate`` (core's :data:`~twinrun.core.curation.toolcalls.CURATE_TOOL`), so
:class:`CuratorEnvironment` has exactly three public functions: ``reset``, ``curate`` and nothing else; every helper
lives on the broker or is private. ``tests/backends/test_trl_environment.py`` asserts the surface TRL discovers.
The reward is not ``get_reward`` (TRL would add it as a second reward function next to the pinned
``reward_weights=[1.0]``): it is the one reward function :meth:`SessionBroker.reward_function`.

One ``curate`` call = one position's curator turn (DIVERGENCES.md): it applies the operations through the core
session, which plays the next position, and returns the next curator input chi_{i+1} as the tool result. After the
last position the tool result is :func:`~twinrun.models.warmstart.final_tool_result`.

Concurrency. TRL runs the tool calls of a batch one sample after another, so played naively every executor
episode of a step would run in sequence. The broker keeps the per-step episodes concurrent without changing what
TRL sees: position 1 of every rollout is played for the whole batch at once before generation
(:meth:`SessionBroker.begin_batch`); in the tool loop, the first ``curate`` call of an iteration submits the pending
turns of *every* sample of that iteration concurrently (read from TRL's in-flight ``completions``, which the
trainer hands over) and each call then returns its ready result (checked against the call TRL actually makes: a
mismatch raises, since the prefetched turn is already applied); remaining positions are finished concurrently in the
reward function.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinrun.core.curation import CurationResult, CurationRuntime, CurationSession, TaskGroup
from twinrun.core.errors import TwinrunError
from twinrun.core.curation.toolcalls import CURATE

# The tools TRL may discover on CuratorEnvironment. A test compares TRL's own discovery with this.
TOOL_NAMES = (CURATE,)


@dataclass
class TurnLog:
    """One ``curate`` call that reached the session."""

    segment: int | None  # 0-based index of the assistant message (model segment) that made the call
    position: int  # 1..|G| the turn applied to; |G|+1 = after the last position (nothing applied)
    prefetched: bool


@dataclass
class _Pending:
    key: str
    result: str
    log: TurnLog


class CuratorEnvironment:
    """One curation rollout. TRL calls ``reset(**row)`` then ``curate`` once per curator turn.

    Public functions are the tool surface: keep it to ``reset`` and ``curate`` (helpers go on the broker)."""

    def __init__(self, broker: SessionBroker):
        self._broker = broker
        self._session: CurationSession | None = None
        self._row: dict[str, Any] = {}
        self._turns: list[TurnLog] = []
        self._pending: deque[_Pending] = deque()
        self._last_message: int | None = None  # id() of the assistant message whose calls were last submitted
        self._result: CurationResult | None = None

    def reset(self, **row: Any) -> str:
        """Start this rollout's curation session for the dataset row (a task group); returns chi_1."""
        return self._broker._reset(self, row)

    def curate(self, operations: list[dict[str, Any]] | None = None, **other_arguments: Any) -> str:
        """Update the skill repository after the task you just saw, then play the next task.

        Args:
            operations: Zero or more skill operations applied in order, each
                {"function": "new_skill_insert" | "skill_update" | "skill_delete", "arguments": {...}}.
            other_arguments: Not part of the tool; any other argument makes the call invalid (counted in r_fc).

        Returns:
            The next curator input (the next task's trajectory and result), or a closing note after the last task.
        """
        return self._broker._curate(self, operations, other_arguments)


def dataset_row(group: TaskGroup, prompt: list[dict[str, str]]) -> dict[str, Any]:
    """One TRL dataset row per task group: the chat prompt (system + an empty user turn that ``reset`` fills with
    chi_1), and the group as JSON (a string column: no Arrow schema guessing over nested game references)."""
    return {"prompt": prompt, "group_id": group.group_id, "step": group.step,
            "task_group": json.dumps(group.to_row(), sort_keys=True)}


def group_of(row: Mapping[str, Any]) -> TaskGroup:
    return TaskGroup.from_row(json.loads(row["task_group"]))


def _call_key(operations: Any, other: Mapping[str, Any]) -> str:
    return json.dumps({"operations": operations, "other": dict(other)}, sort_keys=True, default=str)


def _as_turn(operations: Any, other: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool call as core parses it: extra arguments make it an invalid curate call, as in verl."""
    args: dict[str, Any] = dict(other)
    if operations is not None:
        args["operations"] = operations
    return [{"name": CURATE, "arguments": args}]


@dataclass
class BrokerStats:
    prefetched_calls: int = 0
    direct_calls: int = 0
    prefetch_mismatches: int = 0
    wall_s: dict[str, float] = field(default_factory=dict)

    def add_time(self, phase: str, seconds: float) -> None:
        self.wall_s[phase] = self.wall_s.get(phase, 0.0) + seconds


class SessionBroker:
    """Owns the curation runtime for one training process and drives the sessions of each generation batch."""

    def __init__(self, runtime: CurationRuntime, *, final_result: str):
        self.runtime = runtime
        self.final_result = final_result
        self.environments: Sequence[CuratorEnvironment] = ()  # TRL's per-sample environments of the batch
        self.live_completions: list[list[dict[str, Any]]] | None = None  # TRL's in-flight completions
        self._started: dict[tuple[str, int], tuple[CurationSession, str]] = {}
        self.stats = BrokerStats()

    # -- TRL's environment_factory
    def new_environment(self) -> CuratorEnvironment:
        return CuratorEnvironment(self)

    # -- batch lifecycle (called by the trainer)
    def begin_batch(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Create and start (play position 1 of) every rollout of the batch concurrently."""
        self.live_completions = None
        self.stats = BrokerStats()
        keys = [(str(r["group_id"]), int(r["rollout_index"])) for r in rows]
        if len(set(keys)) != len(keys):
            raise TwinrunError(f"trl batch: a (task group, rollout) pair repeats in one batch: {keys} "
                               "(fix: rollout indices must be distinct within a group)")
        sessions = [self.runtime.session(group_of(r), k[1]) for r, k in zip(rows, keys, strict=True)]
        t0 = time.perf_counter()

        async def start_all() -> list[str]:
            return list(await asyncio.gather(*(s.astart() for s in sessions)))

        inputs = self.runtime.loop.run(start_all())
        self.stats.add_time("executor_first_position", time.perf_counter() - t0)
        self._started = {k: (s, x) for k, s, x in zip(keys, sessions, inputs, strict=True)}

    def finish_batch(self, envs: Sequence[CuratorEnvironment]) -> list[CurationResult]:
        """Play every remaining position of every rollout (concurrently); returns results in ``envs`` order."""
        t0 = time.perf_counter()
        todo = [e for e in envs if e._result is None]

        async def finish_all() -> list[CurationResult]:
            return list(await asyncio.gather(*(e._session.afinish() for e in todo)))  # type: ignore[union-attr]

        for e, r in zip(todo, self.runtime.loop.run(finish_all()), strict=True):
            e._result = r
        self.stats.add_time("executor_finish", time.perf_counter() - t0)
        self.live_completions = None
        return [e._result for e in envs]  # type: ignore[misc]

    def reward_function(self) -> Any:
        """TRL's one reward function: core's composite reward of each rollout (None = unmeasured -> NaN)."""
        broker = self

        def composite_reward(environments: Sequence[CuratorEnvironment] | None = None, **_: Any) -> list[float | None]:
            if environments is None:
                raise TwinrunError("trl reward: no environments were passed (fix: use environment_factory)")
            return [r.total for r in broker.finish_batch(environments)]

        return composite_reward

    # -- environment callbacks
    def _reset(self, env: CuratorEnvironment, row: Mapping[str, Any]) -> str:
        env._row = {k: v for k, v in row.items() if k != "prompt"}
        env._turns, env._pending, env._last_message, env._result = [], deque(), None, None
        key = (str(row["group_id"]), int(row["rollout_index"]))
        started = self._started.pop(key, None)
        if started is None:  # not pre-started (a caller outside the trainer): start here
            env._session = self.runtime.session(group_of(row), key[1])
            return env._session.start()
        env._session, first_input = started
        return first_input

    def _curate(self, env: CuratorEnvironment, operations: Any, other: Mapping[str, Any]) -> str:
        if env._session is None:
            raise TwinrunError("curate: called before reset (fix: TRL calls reset(**row) first)")
        key = _call_key(operations, other)
        if not env._pending:
            self._prefetch_round()
        if env._pending:
            item = env._pending.popleft()
            if item.key == key:
                env._turns.append(item.log)
                self.stats.prefetched_calls += 1
                return item.result
            # TRL made a different call than the one read from its completions. The prefetched turn was already
            # applied to this position: submitting this call too would apply it to the next position and shift
            # every later turn by one. Never expected; stop rather than train on a corrupted session.
            self.stats.prefetch_mismatches += 1
            row = env._row or {}
            raise TwinrunError(
                f"curate: rollout {row.get('group_id')}/r{row.get('rollout_index')} position {item.log.position}: "
                f"TRL called curate with {key[:120]!r} but its completion held {item.key[:120]!r}, which was "
                "already applied (fix: report it; the prefetch reads TRL's in-flight completions, environment.py)"
            )
        self.stats.direct_calls += 1
        position = env._session.position
        t0 = time.perf_counter()
        nxt = env._session.submit(_as_turn(operations, other))
        self.stats.add_time("executor_tool_calls", time.perf_counter() - t0)
        env._turns.append(TurnLog(None, position, prefetched=False))
        return self.final_result if nxt is None else nxt

    def _prefetch_round(self) -> None:
        """Submit, concurrently, the curate calls of every sample's newest assistant message not yet submitted."""
        completions = self.live_completions
        if completions is None or len(completions) != len(self.environments):
            return
        jobs: list[tuple[CuratorEnvironment, int, list[tuple[str, Any, dict[str, Any]]]]] = []
        for env, msgs in zip(self.environments, completions, strict=True):
            if not msgs or env._session is None:
                continue
            last = msgs[-1]
            if last.get("role") != "assistant" or id(last) == env._last_message:
                continue
            calls = []
            for call in last.get("tool_calls") or []:
                fn = call.get("function") or {}
                args = fn.get("arguments")
                if call.get("type") != "function" or fn.get("name") != CURATE or not isinstance(args, dict):
                    continue  # TRL will not call the environment for these
                other = {k: v for k, v in args.items() if k != "operations"}
                calls.append((_call_key(args.get("operations"), other), args.get("operations"), other))
            env._last_message = id(last)
            if calls:
                segment = sum(1 for m in msgs if m.get("role") == "assistant") - 1
                jobs.append((env, segment, calls))
        if not jobs:
            return

        async def run_env(env: CuratorEnvironment, segment: int, calls: list) -> list[_Pending]:
            out = []
            for key, ops, other in calls:
                position = env._session.position  # type: ignore[union-attr]
                nxt = await env._session.asubmit(_as_turn(ops, other))  # type: ignore[union-attr]
                out.append(_Pending(key, self.final_result if nxt is None else nxt, TurnLog(segment, position, True)))
            return out

        async def run_all() -> list[list[_Pending]]:
            return list(await asyncio.gather(*(run_env(e, s, c) for e, s, c in jobs)))

        t0 = time.perf_counter()
        results = self.runtime.loop.run(run_all())
        self.stats.add_time("executor_tool_calls", time.perf_counter() - t0)
        for (env, _, _), pend in zip(jobs, results, strict=True):
            env._pending.extend(pend)


def environment_tools(env_type: type) -> list[str]:
    """The tool names TRL 1.16 derives from an environment class (its own rule, restated for the error message;
    the test checks TRL's actual discovery)."""
    import inspect

    return [n for n, _ in inspect.getmembers(env_type, predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")]


def check_tool_surface(env_type: type = CuratorEnvironment) -> None:
    found = environment_tools(env_type)
    if tuple(found) != TOOL_NAMES:
        raise TwinrunError(f"trl environment: tools {found} != {list(TOOL_NAMES)} (fix: make helper methods private)")
