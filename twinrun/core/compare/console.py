"""The comparison on a terminal (rich), in the report's order (issue 52): first what was compared, each framework
pair's verdict with its reason, the peak table and what would decide it (:func:`print_first_screen`, which `twinrun
run` prints too); then every pair's verdict, the frameworks, runs, streams and arms, flags and skipped statistics."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twinrun.core.compare import first_screen as fs


def plain(markdown: str) -> str:
    """A markdown line as terminal text: bold marks and code ticks dropped, a link shown as its text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return text.replace("**", "").replace("`", "")


def print_first_screen(console: Any, result: Mapping[str, Any], notes: tuple[str, ...] = ()) -> None:
    """What was compared, the headline verdicts (bold) with their reasons, the peak table and the next step."""
    from rich.table import Table
    from rich.text import Text

    console.print(plain(fs.compared_line(result)), markup=False, highlight=False)
    for n in notes:
        console.print(plain(n), markup=False, highlight=False)
    heads = fs.headline_pairs(result)
    for label, rec in heads[:fs.MAX_VERDICTS]:
        console.print(Text.assemble((f"{label}: {rec['verdict']}.", "bold"),
                                    " " + fs.reason(rec.get("explanation") or "")))
    for line in fs.verdict_lines(result)[len(heads[:fs.MAX_VERDICTS]):]:
        console.print(plain(line), markup=False, highlight=False)
    header, rows, note = fs.table_rows(result)
    if rows:
        t = Table()
        for col in header:
            t.add_column(col)
        for r in rows:
            t.add_row(*r)
        console.print(t)
        if note:
            console.print(plain(note), markup=False, highlight=False)
    console.print(Text.assemble(("next: ", "bold"), plain(fs.next_line(result)).removeprefix("Next: ")))


def print_console(result: Mapping[str, Any], report_path: Path | None = None) -> None:
    """The comparison on a terminal: the first screen, then the detail in the report's order."""
    from rich.console import Console

    console = Console(width=160)
    if result.get("kind") == "transfer":
        for t in result["transfer"]:
            console.print(f"[bold]transfer {t['a']} vs {t['b']}[/]: {t['explanation']}")
        for sw in result["sweeps"]:
            console.rule(f"executor {sw['executor']}")
            _print_comparison(console, sw)
    else:
        _print_comparison(console, result)
    if report_path is not None:
        console.print(f"report: {report_path} (and {Path(report_path).with_suffix('.html').name} beside it)")


def _print_comparison(console: Any, result: Mapping[str, Any]) -> None:
    print_first_screen(console, result)
    console.rule("detail")
    if result.get("pairs"):
        console.print(f"[dim]criterion:[/] {result['pairs'][0]['criterion']}", highlight=False)
    for p in result["pairs"]:
        console.print(f"[bold]{p['a']} vs {p['b']}: {p['verdict']}[/]\n  {p['explanation']}", highlight=False)
    fw = result.get("frameworks") or {}
    if fw.get("note"):
        console.print(f"[yellow]frameworks:[/] {fw['note']}", highlight=False)
    for c in fw.get("comparisons") or []:
        if c.get("verdict"):
            console.print(f"[bold]framework {c['a']} vs {c['b']}: {c['verdict']}[/]\n  {c['explanation']}",
                          highlight=False)
            if c.get("seed_design"):
                from twinrun.core.compare.render import seed_design_line

                console.print(f"  {seed_design_line(c['seed_design'])}", markup=False, highlight=False)
    _runs_table(console, result)
    from twinrun.core.compare.report_tables import streams_sentence

    if streams_sentence(result):
        console.print(streams_sentence(result), markup=False, highlight=False)
    _arms_table(console, result)
    for fl in result["flags"]:
        console.print(f"[yellow]flag:[/] {fl}", highlight=False)
    for s in result["skipped"]:
        console.print(f"[dim]skipped:[/] {s}", highlight=False)
    base = result["baseline"]
    console.print(f"baseline {base['arm']}: {100 * base['success_rate']:.1f}% over {base['n_measured']} measured games"
                  + (f", {base['n_unmeasured']} unmeasured" if base.get("n_unmeasured") else ""), markup=False,
                  highlight=False)


def _f(v: float | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    return "–" if v is None else fmt.format(scale * v)


def _arms_table(console: Any, result: Mapping[str, Any]) -> None:
    from rich.table import Table

    t = Table(title="arms vs baseline")
    for col in ("arm", "family (size)", "n", "unmeas.", "lift pp [CI]", "b/c", "p", "Holm", "BH", "MDE pp"):
        t.add_column(col)
    for a in result["arms"]:
        ci = a["lift_ci"]
        t.add_row(a["arm"] + (" [yellow]⚠[/]" if a.get("flagged") else ""),
                  "–" if not a.get("family") else f"{a['family']} ({a.get('family_size')})", str(a["n_measured"]),
                  "–" if a["n_unmeasured"] is None else str(a["n_unmeasured"]),
                  f"{_f(a['lift'], 100, '{:+.1f}')} \\[{_f(ci[0], 100, '{:+.1f}')}, {_f(ci[1], 100, '{:+.1f}')}]",
                  "–" if a["b"] is None else f"{a['b']}/{a['c']}", _f(a["p_value"]), _f(a["p_holm"]), _f(a["p_bh"]),
                  _f(a["mde"], 100, "{:.1f}"))
    console.print(t)


def _runs_table(console: Any, result: Mapping[str, Any]) -> None:
    from rich.table import Table

    r = Table(title="runs")
    for col in ("run", "peak", "peak share", "crossings", "final vs peak (honest)", "Cochran Q p"):
        r.add_column(col)
    for name, c in sorted(result["runs"].items()):
        if not c.get("checkpoints"):
            continue
        q = c.get("cochran_q")
        fvp = c.get("final_vs_peak") or {}
        est = (f"{100 * fvp['estimate']:+.1f} pp" if fvp.get("estimate") is not None else
               f"p {fvp['p_value']:.3g}" if fvp.get("p_value") is not None else "–")
        r.add_row(name, str(c["peak_checkpoint"]), f"{100 * c['peak_share']:.0f}%", str(c["crossings"]),
                  est + (" below peak" if fvp.get("below_peak") else ""), "–" if not q else f"{q['p_value']:.3g}")
    console.print(r)
