"""Executor episodes in flight during a training step, from the step's own records.

Every position of a rollouts.jsonl row carries its episode's interval (``episode_started_at``, unix seconds, and
``episode_wall_s``), so the count of episodes running at each instant is known after the fact, for every process
of the step (wall clocks line up across processes on one machine, and to NTP precision across nodes). Over the
step's executor window (first episode start to last episode end) the count is a step function; its time-weighted
mean (what sampling it at any fixed rate converges to) and its maximum are logged per step as
``episodes_in_flight_mean`` / ``episodes_in_flight_max`` by both backends (core.advantages.step_metrics.curation_step_metrics).

The mean counts the gaps too: while the curator generates between positions no episode runs, so a step whose
episodes all overlap perfectly but wait for generation shows a mean below its max. The ideal step of an executor
with concurrency C and per-call latency L is ``calls x L / C`` (:func:`ideal_executor_s`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


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


def executor_losses(calls: Sequence[tuple[float, float]], rollouts: Sequence[Sequence[tuple[float, float]]],
                    concurrency: int, *, barrier: bool = False) -> dict[str, float]:
    """Where a step's executor capacity went: shares of ``concurrency x window`` (window = first episode start to
    last episode end), summing to 1.

    calls: (start, end) of every executor call (the server's view); rollouts: per rollout, its own episodes'
    (start, end) in position order. At each instant the executor has ``d = C - calls in flight`` idle slots; they
    are charged to what the rollouts not in a call are doing then, in proportion to how many do each:

    * ``environment``: inside an episode but not in a call (game engine steps, the executor's client);
    * ``barrier``: (``barrier=True``, every rollout's turn p generated in one call) episode p has ended, but the
      slowest episode p of the step has not;
    * ``curator``: between two of its episodes otherwise: its curator turn being generated (or waiting for the
      generator) and its operations applied;
    * ``drain``: idle slots with no rollout left to fill them (finished, or not started): the step's straggler
      tail, a property of the episodes' lengths and the rollouts per slot, not of the harness.

    ``calls`` is the share spent in calls (= ideal/window when each call takes the nominal latency)."""
    c = int(concurrency)
    spans = [e for r in rollouts for e in r]
    if not spans or c <= 0:
        return {"calls": 0.0, "environment": 0.0, "barrier": 0.0, "curator": 0.0, "drain": 0.0}
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    gaps: dict[str, list[tuple[float, float]]] = {"barrier": [], "curator": []}
    depth = max(len(r) for r in rollouts)
    last_end = [max((r[p][1] for r in rollouts if len(r) > p), default=hi) for p in range(depth)]
    for r in rollouts:
        for p in range(len(r) - 1):
            end, nxt = r[p][1], r[p + 1][0]
            cut = min(max(last_end[p], end), nxt) if barrier else end
            gaps["barrier"].append((end, cut))
            gaps["curator"].append((cut, nxt))
    kinds = {"call": list(calls), "episode": spans, **gaps}
    bounds = np.unique(np.clip(np.concatenate([np.ravel(v) for v in kinds.values() if v] + [[lo, hi]]), lo, hi))
    if len(bounds) < 2:
        return {"calls": 0.0, "environment": 0.0, "barrier": 0.0, "curator": 0.0, "drain": 0.0}
    mid, width = (bounds[:-1] + bounds[1:]) / 2, np.diff(bounds)
    n = {}
    for k, iv in kinds.items():
        if not iv:
            n[k] = np.zeros_like(mid)
            continue
        a = np.asarray(iv, dtype=float)
        n[k] = (np.searchsorted(np.sort(a[:, 0]), mid, "right")
                - np.searchsorted(np.sort(a[:, 1]), mid, "right")).astype(float)
    busy = np.minimum(n["call"], c)
    idle = c - busy
    waiting = {"environment": np.maximum(n["episode"] - n["call"], 0), "barrier": n["barrier"],
               "curator": n["curator"]}
    active = sum(waiting.values())
    scale = np.where(active > idle, idle / np.maximum(active, 1e-12), 1.0)
    out = {"calls": float((busy * width).sum())}
    for k, v in waiting.items():
        out[k] = float((v * scale * width).sum())
    out["drain"] = float((np.maximum(idle - active, 0) * width).sum())
    total = c * (hi - lo)
    return {k: v / total for k, v in out.items()}


def ideal_executor_s(calls: int, latency_s: float, concurrency: int) -> float:
    """The executor time of `calls` chat calls of `latency_s` each with `concurrency` in flight at every instant."""
    return calls * latency_s / concurrency


__all__ = ["episode_intervals", "executor_losses", "ideal_executor_s", "in_flight", "step_in_flight"]
