"""Executor episodes in flight during a training step, from the step's own records.

Every position of a rollouts.jsonl row carries its episode's interval (``episode_started_at``, unix seconds, and
``episode_wall_s``), so the count of episodes running at each instant is known after the fact, for every process
of the step (wall clocks line up across processes on one machine, and to NTP precision across nodes). Over the
step's executor window (first episode start to last episode end) the count is a step function; its time-weighted
mean (what sampling it at any fixed rate converges to) and its maximum are logged per step as
``episodes_in_flight_mean`` / ``episodes_in_flight_max`` by both backends (core.records.curation_step_metrics).

The mean counts the gaps too: while the curator generates between positions no episode runs, so a step whose
episodes all overlap perfectly but wait for generation shows a mean below its max. The ideal step of an executor
with concurrency C and per-call latency L is ``calls x L / C`` (:func:`ideal_executor_s`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def episode_intervals(records: Iterable[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) of every episode the rollouts played (a reused position-1 episode once); positions without
    timing (records written before the fields existed) are left out."""
    out = []
    for r in records:
        for p in r.get("positions", []):
            start, wall = p.get("episode_started_at"), p.get("episode_wall_s")
            if p.get("episode_shared") or start is None or wall is None:
                continue
            out.append((float(start), float(start) + max(0.0, float(wall))))
    return out


def in_flight(intervals: Sequence[tuple[float, float]]) -> tuple[float | None, int | None]:
    """(time-weighted mean, max) of the number of intervals open at once, over [first start, last end].
    (None, None) without intervals; a window of zero length gives (count, count)."""
    if not intervals:
        return None, None
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    lo, hi = events[0][0], events[-1][0]
    if hi <= lo:
        return float(len(intervals)), len(intervals)
    area, open_, peak, last = 0.0, 0, 0, lo
    for t, d in events:  # ends sort before starts at the same instant: touching intervals do not overlap
        area += open_ * (t - last)
        last = t
        open_ += d
        peak = max(peak, open_)
    return area / (hi - lo), peak


def step_in_flight(records: Iterable[Mapping[str, Any]]) -> tuple[float | None, int | None]:
    """``episodes_in_flight_mean`` / ``_max`` of one step's rollouts.jsonl rows."""
    return in_flight(episode_intervals(records))


def ideal_executor_s(calls: int, latency_s: float, concurrency: int) -> float:
    """The executor time of `calls` chat calls of `latency_s` each with `concurrency` in flight at every instant."""
    return calls * latency_s / concurrency


__all__ = ["episode_intervals", "ideal_executor_s", "in_flight", "step_in_flight"]
