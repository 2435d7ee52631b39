"""`compare --looks 2,4,8`: the group-sequential rule (:mod:`.sequential`) replayed on a sweep's streams in their
order, and the one look `sweep --until-decided` takes after each batch of streams.

Look j is the sweep cut to its first n_j streams (every arm with ``replicate < n_j``, the baseline's streams too),
compared at that look's nominal levels. The replay says at which look the rule would have stopped, with what
verdict, and what the streams after it spent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.compare.games import compare_games
from twinrun.core.compare.model import CompareError, CompareSettings, GameTable
from twinrun.core.compare.sequential import Look, SequentialRule, stopped, take_look


def table_streams(table: GameTable) -> int:
    """The fewest streams any (run, checkpoint) cell or the baseline holds (the streams every look can use)."""
    cells: dict[tuple, set[int]] = {}
    for a in table.arms:
        key = ("baseline",) if a.role == "baseline" else (a.run, a.checkpoint)
        cells.setdefault(key, set()).add(a.replicate)
    return min((len(v) for v in cells.values()), default=0)


def fewest_streams(table: GameTable) -> tuple[int, str, int]:
    """(the fewest streams a cell holds, that cell's arm name (stream 0's), the most any cell holds): which arm keeps
    the looks short."""
    cells: dict[tuple, dict[int, str]] = {}
    for a in table.arms:
        key = ("baseline",) if a.role == "baseline" else (a.run, a.checkpoint)
        cells.setdefault(key, {})[a.replicate] = a.name
    if not cells:
        return 0, "", 0
    key = min(cells, key=lambda k: (len(cells[k]), k != ("baseline",), str(k)))
    names = cells[key]
    return len(names), names[min(names)].split("#r")[0], max(len(v) for v in cells.values())


def first_streams(table: GameTable, n: int) -> GameTable:
    """The sweep as it stood after its first `n` streams: arms with replicate < n (a stream's rows do not depend on
    later streams, so this is exactly what a sweep stopped at n would hold)."""
    keep = [i for i, a in enumerate(table.arms) if a.replicate < n]
    sub = replace(table, arms=[table.arms[i] for i in keep], outcomes=table.outcomes[keep])
    if table.stream_orders is not None:
        sub.stream_orders = table.stream_orders[:n]
    if n < 2:
        sub.crossed = False
    return sub


def design_of(table: GameTable, settings: CompareSettings) -> str:
    return "crossed" if table.crossed and settings.stream_design in ("auto", "crossed") else "nested"


def n_checkpoints(table: GameTable) -> int:
    """The checkpoints of the largest run curve (the layout the boundaries are simulated for)."""
    per_run: dict[str, set] = {}
    for a in table.arms:
        if a.role == "checkpoint" and a.run is not None:
            per_run.setdefault(a.run, set()).add(a.checkpoint)
    return max((len(v) for v in per_run.values()), default=0)


def look_settings(settings: CompareSettings, alpha: float) -> CompareSettings:
    """Compare's settings at a look: every two-sided claim at the look's nominal level."""
    return replace(settings, alpha=alpha, level=1.0 - alpha)


def check_rule(table: GameTable, rule: SequentialRule, where: str) -> None:
    have, arm, most = fewest_streams(table)
    held = f"{have} stream" + ("" if have == 1 else "s")
    if have < 2:
        others = f" (other arms up to {most})" if most > have else ""
        raise CompareError(f"--looks: arm {arm!r} of {where} holds {held}{others}; looks need >= 2 streams of every "
                           "arm, the baseline's too (fix: a sweep that plays every arm with --streams 2 or more)")
    if rule.looks[-1] > have:
        raise CompareError(f"--looks: last look at {rule.looks[-1]} streams, but arm {arm!r} of {where} holds {held} "
                           f"(fix: looks up to {have}, e.g. --looks "
                           f"{','.join(str(n) for n in range(2, have + 1, 2)) or have})")
    if n_checkpoints(table) < 3:
        raise CompareError(f"--looks: {where} has {n_checkpoints(table)} checkpoints per run; a shape needs >= 3 (fix: "
                           "a sweep of runs with 3 or more checkpoints)")


def one_look(table: GameTable, baseline: str, settings: CompareSettings, rule: SequentialRule, j: int
             ) -> tuple[Look, dict[str, Any]]:
    """Look j (0-based): compare on the first rule.looks[j] streams at the look's levels -> (the look, its compare
    result)."""
    sub = first_streams(table, rule.looks[j])
    levels = rule.levels(n_checkpoints(table), design_of(table, settings))
    doc = compare_games(sub, baseline, look_settings(settings, levels["interaction"][j]))
    return take_look(doc, rule, j, levels, rho0=settings.rho0, delta=settings.delta), doc


def replay(table: GameTable, baseline: str, settings: CompareSettings, rule: SequentialRule, *,
           where: str = "the sweep", all_looks: bool = True) -> dict[str, Any]:
    """Every look of `rule` on `table` (all_looks: also those after the stop, to show what they would have said)
    -> {"rule", "looks": [...], "stopped_at", "stop", "verdicts", "streams_spent", "streams_played"}."""
    check_rule(table, rule, where)
    looks: list[Look] = []
    for j in range(len(rule.looks)):
        look, _ = one_look(table, baseline, settings, rule, j)
        looks.append(look)
        if look.stop and not all_looks:
            break
    return summary(rule, looks, table_streams(table))


def summary(rule: SequentialRule, looks: Sequence[Look], played: int | None = None) -> dict[str, Any]:
    stop = stopped(looks)
    return {
        "rule": rule.describe(), "looks_at": list(rule.looks), "alpha": rule.alpha, "spending": rule.kind,
        "looks": [lk.to_dict() for lk in looks],
        "stopped_at": stop.streams if stop else None, "stop": stop.stop if stop else None,
        "verdicts": {f"{p['a']} vs {p['b']}": p["verdict"] for p in stop.pairs} if stop else None,
        "streams_spent": stop.streams if stop else None, "streams_played": played,
    }


def replay_inputs(inputs: Sequence[str | Path], baseline: str, settings: CompareSettings,
                  looks: Sequence[int], *, kind: str = "hsd", futility_p: float = 0.5) -> dict[str, Any]:
    """`compare --looks`: load one sweep's per-game arms and replay the rule on them."""
    from twinrun.core.compare.load import load_game_table

    paths = [Path(p) for p in inputs]
    if any(p.suffix.lower() == ".csv" for p in paths):
        raise CompareError("--looks: a summary CSV holds no streams (fix: pass the sweep folder with >= 2 streams)")
    if settings.across:
        raise CompareError("--looks: with --across (fix: replay one sweep at a time)")
    rule = SequentialRule(tuple(looks), alpha=settings.alpha, kind=kind, futility_p=futility_p)
    table = load_game_table(paths, games_hash=settings.games_hash, stream_design=settings.stream_design)
    return replay(table, baseline, settings, rule, where=", ".join(str(p) for p in paths))


def format_replay(res: dict[str, Any]) -> list[str]:
    """The console lines: one per look, then where the rule stopped."""
    lines = [f"sequential replay: {res['rule']}"]
    for lk in res["looks"]:
        verdicts = "; ".join(f"{p['a']} vs {p['b']}: {p['verdict']}"
                             + (f" (p {p['interaction_p']:.2g})" if p.get("interaction_p") is not None
                                and np.isfinite(p["interaction_p"]) else "") for p in lk["pairs"])
        mark = f"  <- stops ({lk['stop']})" if lk["stop"] and lk["streams"] == res["stopped_at"] else ""
        lines.append(f"  look {lk['look']}: {lk['streams']} streams, nominal alpha {lk['alpha']:.2g}, band "
                     f"{lk['band_level']:.3f}: {verdicts}{mark}")
    if res["stopped_at"] is not None:
        spare = (res["streams_played"] or res["stopped_at"]) - res["stopped_at"]
        lines.append(f"would have stopped at {res['stopped_at']} streams ({res['stop']})"
                     + (f"; the {spare} stream(s) played after it spent {spare / res['streams_played']:.0%} of the "
                        "sweep's episodes" if spare > 0 and res["streams_played"] else ""))
    return lines
