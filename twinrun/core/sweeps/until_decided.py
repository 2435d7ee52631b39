"""`sweep --until-decided` (issue 41): play a sweep's streams in batches (looks) and stop when the verdicts are
decided under the group-sequential rule of :mod:`twinrun.core.compare.sequential` (docs/streams.md).

The sweep is planned with `max_streams` streams (its manifest holds every stream plan from the start, so a stream's
order and seeds do not depend on when it is played); look j plays every arm (each checkpoint of each run, and the
baseline) of streams [0, n_j), resuming what is there, then takes the verdict and records the look in sweep.json
(`sequential`). Core's sweeps may not import compare: the verdict comes in as a callable from the caller
(:mod:`twinrun.app.until_decided`). A killed sweep resumes inside its look (each arm resumes from its rows); a
sweep whose manifest says it stopped plays nothing more."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.records import atomic_write_json
from twinrun.core.sweeps.plan import BASELINE, MANIFEST, SweepError, arm_name, discover_checkpoints, load_plan


def plan_looks(max_streams: int, per_look: int) -> tuple[int, ...]:
    """The streams at each look: the first at max(2, per_look) (a test between streams needs two), then every
    per_look more, the last at max_streams."""
    if max_streams < 2:
        raise SweepError(f"--max-streams: {max_streams} (fix: 2 or more; a look needs two streams)")
    if per_look < 1:
        raise SweepError(f"--streams-per-look: {per_look} (fix: 1 or more)")
    looks = list(range(max(2, per_look), max_streams + 1, per_look))
    if not looks or looks[-1] != max_streams:
        looks.append(max_streams)
    return tuple(looks)


def look_arms(run_dirs: dict[str, Path], n: int) -> list[str]:
    """Every arm of streams [0, n): the baseline's and each checkpoint's (the names the plan gives them)."""
    names = [BASELINE if r == 0 else f"{BASELINE}#r{r}" for r in range(n)]
    for run, d in run_dirs.items():
        for step, _ in discover_checkpoints(d):
            names += [arm_name(run, step, r) for r in range(n)]
    return names


def check_resume(out_dir: str | Path, looks: Sequence[int], rule: str | None = None) -> dict[str, Any] | None:
    """The sequential record of a folder being resumed (None: a new folder); a folder planned with other looks, or
    an unfinished one whose looks were taken under another rule (`rule`: its description; another spending or
    futility rule would mix two sets of levels in one sweep), is refused in one line, before anything is written."""
    plan = load_plan(out_dir)
    seq = plan.sequential if plan is not None else None
    if seq is not None and list(seq.get("looks_at", [])) != list(looks):
        raise SweepError(f"--until-decided: {str(Path(out_dir))!r} was planned with looks at "
                         f"{','.join(map(str, seq['looks_at']))} streams, not {','.join(map(str, looks))} (fix: the "
                         "same --max-streams and --streams-per-look to resume it, or a new --out folder)")
    if seq is not None and rule and seq.get("looks") and not seq.get("stop") and seq.get("rule") not in (None, rule):
        raise SweepError(f"--until-decided: {str(Path(out_dir))!r} took its looks under the rule {seq['rule']!r}, "
                         f"not {rule!r} (fix: resume it with the twinrun version and futility setting that started "
                         "it, or a new --out folder)")
    if plan is not None and seq is None and any(a.replicate > 0 for a in plan.arms) and (plan.streams or 1) != looks[-1]:
        return None  # check_streams refuses it with its own line
    return seq


def record(out_dir: str | Path, seq: dict[str, Any]) -> None:
    """Write the sequential record into sweep.json (atomically; the rest of the manifest unchanged)."""
    plan = load_plan(out_dir)
    if plan is None:
        raise SweepError(f"{Path(out_dir) / MANIFEST}: missing after a look was played (fix: rerun the sweep)")
    plan.sequential = seq
    atomic_write_json(Path(out_dir) / MANIFEST, plan.to_dict())


def run_looks(out_dir: str | Path, looks: Sequence[int], rule: str, play: Callable[[int], Any],
              take: Callable[[int], dict[str, Any]], *, log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Play look by look until a look stops. play(n): play every arm of streams [0, n) (resuming); take(j): the
    look's record (sequential.Look.to_dict(): streams, levels, pair verdicts, "stop"). Returns the sequential
    record, also written to sweep.json after every look."""
    seq = check_resume(out_dir, looks, rule)
    if seq is not None and seq.get("stop"):
        log(f"until decided: already stopped at {seq['stopped_at']} streams ({seq['stop']}); nothing to play")
        return seq
    seq = {"looks_at": list(looks), "rule": rule, "looks": [], "stop": None, "stopped_at": None, "verdicts": None}
    for j, n in enumerate(looks):
        play(n)
        look = take(j)
        seq["looks"] = [lk for lk in seq["looks"] if lk["look"] != look["look"]] + [look]
        log(f"look {look['look']}: {n} streams, nominal alpha {look['alpha']:.2g}: "
            + "; ".join(f"{p['a']} vs {p['b']}: {p['verdict']}" for p in look["pairs"])
            + (f" -> stop ({look['stop']})" if look["stop"] else ""))
        if look["stop"]:
            seq.update(stop=look["stop"], stopped_at=n,
                       verdicts={f"{p['a']} vs {p['b']}": p["verdict"] for p in look["pairs"]},
                       what_more={f"{p['a']} vs {p['b']}": p.get("n_to_decide") for p in look["pairs"]
                                  if p.get("n_to_decide") is not None})
        record(out_dir, seq)
        if look["stop"]:
            break
    return seq
