"""Where a sweep's curators run (docs/scale.md#sweeps-on-gpus): each checkpoint's curator on its own GPU.

The unit of placement is a **checkpoint**: its R stream arms share one curator (one model in memory; with
``sweep.batch_streams`` one batch), so a GPU holds one checkpoint's model, never two, unless the user asks
(``sweep.arms_per_gpu``). ``sweep --gpus 0-7`` plays the checkpoints in **waves** of (GPUs x arms_per_gpu), each
wave's checkpoints at once, one per slot; under Ray each checkpoint's task asks for one GPU (``num_gpus``) and Ray
places it. The baseline has no curator and needs no GPU. Where each arm ran (device, physical GPU ids, wave, host)
is written into sweep.json before its wave starts (:func:`twinrun.core.sweeps.plan.record_placement`).

Pure logic: no torch, no CUDA. The tests give it a device list, as a GPU node would.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from twinrun.core.sweeps.plan import ArmPlan, SweepError


def parse_gpus(text: str | None) -> list[int]:
    """``--gpus``: "0-7", "0,2,5", "0-3,6" -> sorted unique GPU ids; "" or None -> [] (no GPUs: CPU)."""
    if not text:
        return []
    ids: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise SweepError(f"--gpus: {text!r}: {part!r} is not a GPU id or range (fix: e.g. --gpus 0-7 or --gpus 0,2,5)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        ids.update(range(lo, hi + 1))
    return sorted(ids)


@dataclass(frozen=True)
class Unit:
    """One checkpoint (or the baseline) with its stream arms, in stream order: what shares a curator."""

    key: str  # "RUN@STEP", or "baseline"
    arms: tuple[str, ...]
    needs_gpu: bool


def units(arms: Sequence[ArmPlan]) -> list[Unit]:
    """Group arms by checkpoint (all streams of one checkpoint together, stream 0 first), baseline first."""
    groups: dict[str, list[ArmPlan]] = {}
    for a in arms:
        key = "baseline" if a.role == "baseline" else f"{a.run}@{a.checkpoint_step}"
        groups.setdefault(key, []).append(a)
    out = [Unit(k, tuple(a.arm for a in sorted(v, key=lambda a: a.replicate)), k != "baseline")
           for k, v in groups.items()]
    return sorted(out, key=lambda u: u.needs_gpu)  # stable: the baseline, then the plan's order


@dataclass(frozen=True)
class Slot:
    gpu: int
    wave: int

    @property
    def device(self) -> str:
        """The torch device of a curator loaded in this process (one process sees every listed GPU)."""
        return f"cuda:{self.gpu}"


def waves(checkpoints: Sequence[Unit], gpus: Sequence[int], arms_per_gpu: int = 1) -> list[list[tuple[Unit, Slot]]]:
    """The checkpoints in waves: each wave fills every GPU with ``arms_per_gpu`` checkpoints (1: one each),
    in order; the last wave may be partial. No GPUs: one checkpoint per wave (the CPU path, one at a time)."""
    if arms_per_gpu < 1:
        raise SweepError(f"sweep.arms_per_gpu: {arms_per_gpu} (fix: 1 or more)")
    slots = [g for g in gpus for _ in range(arms_per_gpu)] if gpus else []
    size = len(slots) or 1
    out: list[list[tuple[Unit, Slot]]] = []
    for w, start in enumerate(range(0, len(checkpoints), size)):
        chunk = checkpoints[start:start + size]
        out.append([(u, Slot(slots[k] if slots else -1, w)) for k, u in enumerate(chunk)])
    return out


def gpu_need(checkpoints: int, gpus: int | None = None, arms_per_gpu: int = 1) -> dict[str, int]:
    """A sweep's GPU need: every checkpoint's curator on a GPU of its own gives ``gpus_all_at_once`` (one
    wave); with ``gpus`` given, how many waves that takes."""
    at_once = math.ceil(checkpoints / arms_per_gpu)
    out = {"curator_gpus_all_at_once": at_once}
    if gpus:
        out["gpus"] = gpus
        out["waves"] = math.ceil(checkpoints / (gpus * arms_per_gpu)) if checkpoints else 0
    return out


PAPER_GAMES = 140  # the paper's held-out ALFWorld games: what a cost is stated for when eval_games is unset


def sweep_cost(*, checkpoints_per_run: int, runs: int, streams: int, games: int, gpus: int | None = None,
               arms_per_gpu: int = 1, batched: bool = True) -> dict[str, int]:
    """What a sweep spends, before it runs: every checkpoint's curator makes one turn per game of each of its
    streams; every arm (checkpoints and the baseline) plays each game once per stream; each checkpoint's curator
    holds a GPU of its own (``gpu_need``); batched, a checkpoint's R streams share each curator call."""
    ckpts = checkpoints_per_run * runs
    turns = ckpts * streams * games
    return {"checkpoints": ckpts, "streams": streams, "games": games, "curator_turns": turns,
            "curator_calls": ckpts * games if batched else turns,
            "executor_episodes": (ckpts + 1) * streams * games,
            **gpu_need(ckpts, gpus, arms_per_gpu)}


def spec_sweep_cost(spec: object, gpus: int | None = None) -> dict[str, object]:
    """sweep_cost of a spec's own sweep: ceil(steps / checkpoint_every) checkpoints per backend, its backends as
    runs, sweep.streams, environment.eval_games (unset: the paper's 140, said so in ``games_source``)."""
    s: object = spec
    games = s.environment.eval_games  # type: ignore[attr-defined]
    per_run = math.ceil(s.steps / s.checkpoint_every)  # type: ignore[attr-defined]
    cost: dict[str, object] = dict(sweep_cost(
        checkpoints_per_run=per_run, runs=len(s.backends), streams=s.sweep.streams,  # type: ignore[attr-defined]
        games=games or PAPER_GAMES, gpus=gpus, arms_per_gpu=s.sweep.arms_per_gpu,  # type: ignore[attr-defined]
        batched=s.sweep.batch_streams))  # type: ignore[attr-defined]
    cost["games_source"] = "environment.eval_games" if games else f"eval_games unset: the paper's {PAPER_GAMES}"
    from twinrun.core.sweeps.plan import eval_dtype, eval_dtype_source

    on_gpu = bool(gpus)  # the dtype every checkpoint is evaluated at (the sweep's own, issue 53)
    cost["curator_dtype"] = eval_dtype(spec, gpu=on_gpu)
    cost["dtype_source"] = eval_dtype_source(spec, gpu=on_gpu)
    return cost


def cost_line(cost: dict[str, object]) -> str:
    """One line: checkpoints, streams, games, curator turns (and calls), executor episodes, GPUs."""
    waves = f", {cost['waves']} waves on {cost['gpus']} GPUs" if cost.get("gpus") else ""
    calls = (f" in {cost['curator_calls']:,} calls (streams batched)"
             if cost["curator_calls"] != cost["curator_turns"] else "")
    dtype = (f"; every checkpoint evaluated at {cost['curator_dtype']} ({cost['dtype_source']})"
             if cost.get("curator_dtype") else "")
    return (f"sweep: {_n(cost['checkpoints'], 'checkpoint')} x {_n(cost['streams'], 'stream')} x "
            f"{_n(cost['games'], 'game')}: {cost['curator_turns']:,} curator turns{calls}, "
            f"{cost['executor_episodes']:,} executor episodes (baseline included), "
            f"{_n(cost['curator_gpus_all_at_once'], 'curator GPU')} for one wave (one per checkpoint){waves}{dtype}")


def _n(count: object, noun: str) -> str:
    """``1 stream``, ``2 streams``: a count with its noun in the number it takes."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
