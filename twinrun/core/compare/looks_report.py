"""The per-look section of report.md (issue 41): for a sweep played with `sweep --until-decided` (its looks in
sweep.json's `sequential`) or a `compare --looks` replay (looks.json), one row per look and pair: the streams, each
claim's statistic beside its boundary at that look, the verdict and where the rule stopped; and the writing of a
replay's result under `compare --looks --out DIR` (looks.json and report.md, atomically, after the guard)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.compare.model import CompareError
from twinrun.core.records import atomic_write_json, atomic_write_text

LOOKS_FILE = "looks.json"
STOPS = {"decided": "every pair's verdict decided under the look's levels",
         "futility": "futility (non-binding): every undecided pair showed neither a difference nor agreement",
         "last look": "the last look (max streams): undecided pairs stay 'no evidence'"}


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    return "–" if v is None else fmt.format(v)


def _inter(p: Mapping[str, Any], alpha: float) -> str:
    f, fb, pv = p.get("interaction_f"), p.get("f_boundary"), p.get("interaction_p")
    left = f"F {_f(f, '{:.2f}')} vs {_f(fb, '{:.2f}')}; " if f is not None or fb is not None else ""
    mark = " ✓" if pv is not None and pv < alpha else ""
    return f"{left}p {_f(pv, '{:.2g}')} vs {alpha:.2g}{mark}"


def _agree(p: Mapping[str, Any], band_level: float) -> str:
    reach, delta = p.get("band_reach"), p.get("delta")
    mark = " ✓" if reach is not None and delta is not None and reach <= delta else ""
    return (f"{_f(None if reach is None else 100 * reach, '{:.1f}')} pp vs ±"
            f"{_f(None if delta is None else 100 * delta, '{:g}')} pp ({band_level:.4g}){mark}")


def _r(p: Mapping[str, Any]) -> str:
    r, ci = p.get("pearson"), p.get("pearson_ci") or [None, None]
    if r is None:
        return "–"
    return f"{r:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci[0] is not None and ci[1] is not None else "")


def looks_section(seq: Mapping[str, Any], h: str = "##", where: str | None = None) -> list[str]:
    """The markdown section: the rule, a table of every look (one row per pair) and the stop."""
    looks = seq.get("looks") or []
    head = f"{h} Looks (group-sequential)" + (f": {where}" if where else "")
    lines = [head, "", f"Rule: {seq.get('rule', '–')}. Looks at {', '.join(map(str, seq.get('looks_at') or []))} "
             "streams. Each claim's statistic at a look is shown against that look's boundary (✓: crossed): "
             "differ/co-move needs the run x checkpoint interaction past its boundary (F against the critical F "
             "at the look's nominal level a_j, equivalently p < a_j, Holm over pairs); agree needs the band at the "
             "look's level within ±delta (and r's lower bound above rho0); r's interval names the kind of "
             "difference.", ""]
    rows = ["| look | streams | pair | differ/co-move: interaction | agree: band reach (level) | r [interval] | "
            "verdict | stop |", "|---|---|---|---|---|---|---|---|"]
    for lk in looks:
        stop = lk.get("stop") or ""
        for i, p in enumerate(lk.get("pairs") or [{}]):
            reason = f" ({p['reason']})" if p.get("reason") else ""
            rows.append(f"| {lk['look']} | {lk['streams']} | {p.get('a', '–')} vs {p.get('b', '–')} | "
                        f"{_inter(p, lk['alpha'])} | {_agree(p, lk['band_level'])} | {_r(p)} | "
                        f"{p.get('verdict', '–')}{reason} | {stop if i == 0 else ''} |")
    lines += rows + [""]
    if seq.get("stopped_at") is not None:
        played = seq.get("streams_played")
        spare = (played - seq["stopped_at"]) if played else 0
        lines.append(f"Stopped at {seq['stopped_at']} streams: {STOPS.get(seq.get('stop'), seq.get('stop'))}."
                     + (f" The {spare} stream(s) played after it would not have been needed ({spare / played:.0%} "
                        "of the sweep's episodes)." if spare > 0 else ""))
        more = seq.get("what_more") or {}
        if more:
            lines.append("What more would decide: " + "; ".join(f"{k}: {v}" for k, v in more.items()) + ".")
    else:
        lines.append("Not stopped yet: the sweep is between looks (resume it to play the next).")
    return lines + [""]


def sequential_records(inputs: Sequence[str | Path]) -> list[tuple[str, dict[str, Any]]]:
    """(folder, sweep.json's `sequential`) for every sweep folder among `inputs` played with --until-decided."""
    out = []
    for p in inputs:
        manifest = Path(p) / "sweep.json"
        if manifest.is_file():
            seq = json.loads(manifest.read_text(encoding="utf-8")).get("sequential")
            if seq:
                out.append((str(p), seq))
    return out


def check_out_dir(out: str | Path, flag: str = "--out") -> Path:
    """The guard before the first write: `out` is a folder or can be made one, by this user."""
    path = Path(out).expanduser()
    root = next(q for q in (path.absolute(), *path.absolute().parents) if q.exists())
    if not root.is_dir():
        raise CompareError(f"{flag}: {str(out)!r} " + ("is a file" if root == path.absolute() else
                           f"cannot be made: {str(root)!r} is a file") + " (fix: a folder path)")
    if not os.access(root, os.W_OK | os.X_OK):
        raise CompareError(f"{flag}: {str(out)!r} cannot be written: {str(root)!r} is not writable by this user "
                           "(fix: a folder you can write)")
    return path


def write_looks(res: Mapping[str, Any], out: str | Path, where: str | None = None) -> Path:
    """`compare --looks --out DIR`: DIR/looks.json (the replay) and DIR/report.md (its per-look section), each
    written atomically. Returns the report's path."""
    from twinrun.core.compare.render import clean

    d = check_out_dir(out)
    atomic_write_json(d / LOOKS_FILE, clean(dict(res)))
    text = "\n".join(["# twinrun sequential replay", ""] + looks_section(res, "##", where))
    path = d / "report.md"
    atomic_write_text(path, text + "\n")
    return path
