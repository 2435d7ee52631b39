"""A checkpoint's streams played together (``sweep.batch_streams``, docs/scale.md#sweeps-on-gpus).

The R streams of one checkpoint are independent: each has its own order, seeds and repository. So they can advance
side by side: game k of every stream (their executor episodes concurrently, through the runtime's env pool and
executor), then **one curator call for the R curator inputs** (a policy with ``batch``: one left-padded batch,
each row with its own stream's sampling seed; a policy without it: one call per stream), then each stream applies
its turn and appends its row. Every row is the row :func:`twinrun.core.sweeps.arms.run_arm` writes for that stream
one game at a time (same games, seeds, repositories; the curator's text up to what padding changes in a batched
forward pass: ``tests/core/sweeps/test_sweep_batched.py``). Resume is per stream: a stream that had more rows
than another waits until the others reach it.

The unit a sweep places and schedules is a checkpoint (:mod:`twinrun.core.sweeps.placement`): its streams share
one curator, loaded once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from twinrun.core.errors import CheckpointUnreadable, EndpointUnavailable, InfrastructureError
from twinrun.core.records import JsonlWriter
from twinrun.core.sweeps.arms import (
    ArmOutcome,
    ArmStream,
    CuratorPolicy,
    PolicyFactory,
    _finished,
    call_policy,
    rows_done,
    run_arm,
)
from twinrun.core.sweeps.plan import SweepPlan

Turn = tuple[str | None, str | None]  # (text, infrastructure error)


async def _gather(coros: Sequence[Any]) -> list[Any]:
    return list(await asyncio.gather(*coros))


def curator_turns(policy: CuratorPolicy | None, requests: Sequence[tuple[str, list[Any], int]]) -> list[Turn]:
    """The curator's turns for several streams' inputs: one batched call when the policy has ``batch``
    (requests: (curator input, history window, the stream's curator seed)), else one call per input."""
    if policy is None:
        return [(None, None)] * len(requests)
    batch = getattr(policy, "batch", None)
    if batch is None:
        return [call_policy(policy, x, h) for x, h, _ in requests]
    try:
        return [(t, None) for t in batch(list(requests))]
    except (EndpointUnavailable, CheckpointUnreadable):
        raise  # the curator's server is gone, or its checkpoint cannot be loaded: the caller handles the streams
    except InfrastructureError as e:  # the whole batch failed (out of memory, device): every row says so
        return [(None, str(e))] * len(requests)


def run_streams(plan: SweepPlan, arm_names: Sequence[str], spec: Any, out_dir: str | Path, runtime: Any,
                policy: CuratorPolicy | None, *, on_row: Callable[[str, int], None] | None = None,
                before_write: Callable[[str, int], None] | None = None) -> dict[str, ArmOutcome]:
    """Play (or finish) the arms of one checkpoint's streams in lockstep; each resumes from its own rows. A curator
    whose server is gone (EndpointUnavailable) stops every stream before game k is written."""
    streams = [ArmStream(plan, a, spec, out_dir, runtime) for a in arm_names]
    resumed = {st.arm.arm: st.next_k for st in streams}
    n = len(plan.games)
    with ExitStack() as stack:
        writers = {st.arm.arm: stack.enter_context(JsonlWriter(st.path)) for st in streams}
        for k in range(min(resumed.values(), default=n), n):
            live = [st for st in streams if st.next_k == k]
            sessions = [st.session(k) for st in live]
            # the streams' episodes of game k at once: they share the executor's concurrency and the env pool
            for st, text in zip(live, runtime.loop.run(_gather([s.astart() for s in sessions]))):
                st.started(text)
            asks = [st.arm.role == "checkpoint" for st in live]
            try:
                turns = curator_turns(policy, [st.request() for st, ask in zip(live, asks) if ask])
            except EndpointUnavailable as e:  # every stream stops before game k is written; a rerun resumes there
                for st in streams:
                    st.stop(st.next_k, str(e))
                break
            it = iter(turns)
            for st, ask in zip(live, asks):
                text, error = next(it) if ask else (None, None)
                st.finish(k, text, error, writers[st.arm.arm], before_write)
                if on_row is not None:
                    on_row(st.arm.arm, k + 1)
    return {st.arm.arm: st.outcome(resumed[st.arm.arm]) for st in streams}


def play_unit(plan: SweepPlan, arms: Sequence[str], spec: Any, out_dir: str | Path, runtime: Any,
              factory: PolicyFactory, *, batch: bool, on_row: Callable[[str, int], None] | None = None,
              before_write: Callable[[str, int], None] | None = None) -> dict[str, ArmOutcome]:
    """One checkpoint (or the baseline): its finished streams read back, the rest played. batch: the streams
    together with one curator (made once, for the first unfinished stream's arm; every request carries its own
    stream's seed); else each stream on its own with its own curator, one after another."""
    n = len(plan.games)
    out = {a: _finished(out_dir, a, n) for a in arms if rows_done(out_dir, a) >= n}
    todo = [a for a in arms if a not in out]
    if not todo:
        return out
    first = plan.arm(todo[0])
    if batch:
        try:
            policy = factory(first, spec) if first.role == "checkpoint" else None
        except EndpointUnavailable as e:
            return {**out, **{a: _unplayed(out_dir, a, n, str(e)) for a in todo}}
        except CheckpointUnreadable as e:
            return {**out, **unmeasured_arms(plan, todo, spec, out_dir, runtime, str(e), on_row)}
        try:
            out.update(run_streams(plan, todo, spec, out_dir, runtime, policy, on_row=on_row,
                                   before_write=before_write))
        except CheckpointUnreadable as e:  # a policy that loads lazily: the streams' remaining games
            out.update(unmeasured_arms(plan, todo, spec, out_dir, runtime, str(e), on_row))
        finally:
            _close(policy)  # a served curator's server stops with its checkpoint's arms (interrupts included)
        return out
    for a in todo:
        arm = plan.arm(a)
        try:
            policy = factory(arm, spec) if arm.role == "checkpoint" else None
            try:
                out[a] = run_arm(plan, a, spec, out_dir, runtime, policy, on_row=on_row, before_write=before_write)
            finally:
                _close(policy)
        except EndpointUnavailable as e:
            out[a] = _unplayed(out_dir, a, n, str(e))
        except CheckpointUnreadable as e:
            out.update(unmeasured_arms(plan, [a], spec, out_dir, runtime, str(e), on_row))
        policy = None  # one checkpoint in memory at a time
    return out


def unmeasured_arms(plan: SweepPlan, arms: Sequence[str], spec: Any, out_dir: str | Path, runtime: Any, why: str,
                    on_row: Callable[[str, int], None] | None = None) -> dict[str, ArmOutcome]:
    """The arms of a checkpoint that cannot be loaded (its files went bad after the sweep checked them): every
    game they have not played is written as an unmeasured row whose reason is `why` (one line), and the sweep goes
    on with the next checkpoint. Their rows are then complete: measuring the checkpoint again takes its files
    restored and its arm files removed (the plan refuses a changed checkpoint in the same folder)."""
    res: dict[str, ArmOutcome] = {}
    reason = f"checkpoint unreadable: {why}"
    for a in arms:
        st = ArmStream(plan, a, spec, out_dir, runtime)
        resumed = st.next_k
        with JsonlWriter(st.path) as writer:
            for k in range(resumed, st.n):
                st.skip(k, reason, writer)
                if on_row is not None:
                    on_row(a, k + 1)
        outcome = st.outcome(resumed)
        outcome.unmeasured_why = reason
        res[a] = outcome
    return res


def _unplayed(out_dir: str | Path, arm: str, n: int, why: str) -> ArmOutcome:
    """An arm whose curator could not be reached at its start (a user endpoint gone since the sweep's probe): its
    rows so far, the rest unmeasured; a rerun resumes it."""
    done = _finished(out_dir, arm, n) if rows_done(out_dir, arm) else ArmOutcome(arm, n, 0, 0, 0, 0.0)
    rows = rows_done(out_dir, arm)
    return ArmOutcome(arm, rows, rows, done.unmeasured + n - rows, done.successes, 0.0,
                      stopped=f"curator unavailable at game {rows + 1} of {n}: {why}")


def _close(policy: Any) -> None:
    """Release a curator that holds something outside this process (a served curator: its launched server)."""
    close = getattr(policy, "close", None)
    if close is not None:
        close()
