"""`twinrun design --delta PP (--rho R | --pilot SWEEP_DIR)`: the streams x games per checkpoint that would decide
a difference, and what they cost in executor episodes, before a GPU hour is spent (docs/streams.md).

The math lives in :mod:`twinrun.core.compare.design` (pure); this module parses and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer) -> None:
    app.command("design")(design_cmd)


def parse_int_list(value: str, option: str) -> list[int]:
    from twinrun.core.errors import TwinrunError

    try:
        out = [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise TwinrunError(f"{option}: {value!r} is not a comma-separated list of counts (fix: e.g. 1,2,4,8)") from None
    if not out or min(out) < 1:
        raise TwinrunError(f"{option}: {value!r} (fix: counts of 1 or more, e.g. 1,2,4,8)")
    return out


def design_cmd(
    delta: float = typer.Option(..., "--delta", help="the difference that matters, in success-rate points (10 = 0.10)"),
    rho: float | None = typer.Option(None, "--rho", help="intra-stream correlation, stated (e.g. 0.02 from a pilot)"),
    pilot: Path | None = typer.Option(None, "--pilot", help="a sweep folder with >= 2 streams: rho (with its interval), "
                                      "the success rate, checkpoints and runs are read from it"),
    kind: str = typer.Option("lift", "--kind", help="lift: a checkpoint's lift over the baseline; shape: a difference "
                             "between two runs' centred curves at one checkpoint"),
    rate: float | None = typer.Option(None, "--rate", help="success rate the variance is taken at (default: the "
                                      "pilot's, else 0.5, the largest variance)"),
    alpha: float = typer.Option(0.05, "--alpha", help="two-sided level of each test (a family of K arms under Holm: "
                                "alpha / K plans conservatively)"),
    target: float = typer.Option(0.8, "--power", help="the power a design must reach"),
    checkpoints: int | None = typer.Option(None, "--checkpoints", min=1, help="checkpoints per run (default: the "
                                           "pilot's, else 8)"),
    runs: int | None = typer.Option(None, "--runs", min=1, help="runs swept together (default: the pilot's, else 2)"),
    streams: str = typer.Option("1,2,3,4,6,8,12,16", "--streams", help="the numbers of streams to tabulate"),
    max_games: int = typer.Option(100_000, "--max-games", min=1, help="the most games per checkpoint considered"),
    streams_design: str = typer.Option("crossed", "--streams-design", help="shape only: crossed (sweep --streams "
                                       "plays stream r of every arm with one plan: the stream blocks cancel, rho is "
                                       "the ICC left after them) or nested (rho the whole intra-stream correlation)"),
    as_json: bool = typer.Option(False, "--json", help="print the design as JSON"),
) -> None:
    """How many streams x games per checkpoint decide a difference of --delta points, and what that costs."""
    from twinrun.core.compare import design as d
    from twinrun.core.errors import TwinrunError

    if (rho is None) == (pilot is None):
        raise TwinrunError("--rho/--pilot: give exactly one (fix: --rho 0.02, or --pilot SWEEP_DIR with >= 2 streams)")
    if kind not in ("lift", "shape"):
        raise TwinrunError(f"--kind: {kind!r} (fix: lift or shape)")
    if streams_design not in ("crossed", "nested"):
        raise TwinrunError(f"--streams-design: {streams_design!r} (fix: crossed or nested)")
    blocked = kind == "shape" and streams_design == "crossed"
    info: dict[str, Any] = {}
    upper = None
    if pilot is not None:
        p = d.pilot_from_sweep(pilot)
        if p.icc.icc is None:
            raise TwinrunError(f"--pilot: {str(pilot)!r}: {p.icc.method} (fix: state --rho)")
        rho = max(p.icc.icc, 0.0)  # a negative ANOVA estimate is read as no correlation
        upper = p.icc.ci[1]
        info["pilot_blocked"] = p.blocked
        if blocked and p.blocked is not None:  # a shape contrast sees only what the stream blocks leave
            rho, upper = max(p.blocked["icc"], 0.0), p.blocked["ci"][1]
        elif blocked:
            blocked = False  # the pilot's streams were not crossed: its ICC holds the blocks too, plan nested
            info["pilot_note"] = "the pilot's streams were not played with shared plans: planned as nested streams"
        rate = p.rate if rate is None else rate
        checkpoints = p.checkpoints if checkpoints is None else checkpoints
        runs = p.runs if runs is None else runs
        info.update({"pilot": str(pilot), "pilot_icc": p.icc.to_dict(), "pilot_streams": p.streams,
                     "pilot_games": p.games})
    assert rho is not None
    if kind == "lift":
        assumes = "the whole intra-stream correlation (a lift over the baseline keeps the stream blocks)"
    elif blocked:
        assumes = ("the intra-stream correlation left after each run's stream blocks (crossed streams: a pilot's "
                   "blocked ICC; the whole ICC over-states it), randomized-block error df 2 (K - 1)(R - 1)")
    else:
        assumes = "the whole intra-stream correlation (nested streams), error df 2 K (R - 1)"
    rate = 0.5 if rate is None else rate
    checkpoints = 8 if checkpoints is None else checkpoints
    runs = 2 if runs is None else runs
    kw: dict[str, Any] = dict(rate=rate, alpha=alpha, target=target, kind=kind, checkpoints=checkpoints, runs=runs,
                              streams=parse_int_list(streams, "--streams"), max_games=max_games, blocked=blocked)
    rows = d.design_table(delta / 100, rho, **kw)
    rows_upper = d.design_table(delta / 100, min(upper, 0.99), **kw) if upper is not None else None
    out = {"delta": delta / 100, "kind": kind, "rho": rho, "rho_source": "pilot" if pilot else "stated",
           "streams_design": "crossed" if blocked else "nested", "rho_assumes": assumes,
           "rate": rate, "alpha": alpha, "power": target, "checkpoints": checkpoints, "runs": runs, **info,
           "rows": [r.__dict__ for r in rows],
           "rows_at_rho_upper": None if rows_upper is None else [r.__dict__ for r in rows_upper]}
    if as_json:
        typer.echo(json.dumps(out, indent=1))
        return
    _print(out, rows, rows_upper, upper)


def _print(out: dict[str, Any], rows: list[Any], rows_upper: list[Any] | None, upper: float | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    what = ("a checkpoint's lift over the baseline" if out["kind"] == "lift"
            else "a difference between two runs' centred curves at one checkpoint")
    est = out.get("pilot_blocked") if out["streams_design"] == "crossed" and out.get("pilot_blocked") else \
        out.get("pilot_icc")
    src = "stated" if out["rho_source"] == "stated" else (
        f"from pilot {out['pilot']}: {est['icc']:.4f}, {100 * est['level']:.0f}% CI "
        f"[{_f(est['ci'][0])}, {_f(est['ci'][1])}] ({out['pilot_streams']} streams x {out['pilot_games']} games)")
    console.print(f"[bold]design[/]: detect {100 * out['delta']:g} points in {what}, two-sided alpha {out['alpha']}, "
                  f"power {out['power']}; rho {out['rho']:.4f} ({src}); success rate {out['rate']:.2f}; "
                  f"{out['checkpoints']} checkpoints x {out['runs']} runs + baseline")
    console.print(f"rho is taken as {out['rho_assumes']}")
    if out.get("pilot_blocked"):
        b = out["pilot_blocked"]
        console.print(f"pilot: crossed streams, {100 * b['block_share']:.0f}% [{100 * b['block_share_ci'][0]:.0f}, "
                      f"{100 * b['block_share_ci'][1]:.0f}] of the between-stream variance is each run's stream block; "
                      f"ICC left after the blocks {b['icc']:.4f} (whole ICC {out['pilot_icc']['icc']:.4f})")
    t = Table(title="streams x games per checkpoint that decide (DEFF = 1 + (m - 1) rho)")
    for col in ("streams", "games per checkpoint", "power", "DEFF", "executor episodes", "power with unlimited games"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r.streams), "no number of games" if r.games is None else str(r.games),
                  "–" if r.power is None else f"{r.power:.3f}", "–" if r.deff is None else f"{r.deff:.2f}",
                  "–" if r.episodes is None else f"{r.episodes:,}", f"{r.power_unlimited_games:.3f}")
    console.print(t)
    best = min((r for r in rows if r.episodes is not None), key=lambda r: r.episodes, default=None)
    if best is not None:
        console.print(f"cheapest of these: {best.streams} streams x {best.games} games ({best.episodes:,} executor "
                      "episodes)")
    if rows_upper is not None and upper is not None:
        need = [f"{r.streams}x{r.games}" for r in rows_upper if r.games is not None]
        console.print(f"at rho's upper bound {upper:.4f}: " + (", ".join(need) if need else "none of these decide"))
    console.print("[dim]stream-level t-test, between-stream variance pooled over the layout's cells "
                  "(docs/streams.md); one stream per cell: normal test with the stated rho[/]")


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.4f}"
