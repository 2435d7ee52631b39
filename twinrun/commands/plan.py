"""`twinrun plan SPEC`: the knob table and per-step counts for every backend; exit 2 if counts differ."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from twinrun.commands._common import SetOption, print_json, spec_from_cli


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def plan(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="experiment spec (YAML)"),
    sets: list[str] = SetOption,
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    backend: list[str] = typer.Option([], "--backend", help="only these backends (default: the spec's)"),
    against: Path | None = typer.Option(None, "--against", metavar="OTHER_SPEC",
                                        help="also show OTHER_SPEC's per-step counts and every field that differs"),
) -> None:
    """Compile SPEC for each backend without importing either framework and compare the arms."""
    from twinrun.app.plan import build_plan

    spec = spec_from_cli(spec_path, sets)
    other = spec_from_cli(against, []) if against is not None else None
    result = build_plan(spec, backend or None, other=other)
    if as_json:
        print_json(result)
    else:
        _print(result)
    if not result["counts_equal"]:
        if not as_json:
            Console(stderr=True).print(
                "[bold red]refused:[/] per-step counts differ between backends: "
                + ", ".join(result["mismatched_counts"])
                + " (fix: remove the override or align the batch knobs)"
            )
        raise typer.Exit(2)


def _print(result: dict) -> None:
    console = Console(width=200)  # the knob table is wide; wrapping it in 80 columns hides the reasons
    names = list(result["backends"])
    console.print(f"[bold]plan[/] {result['spec']['name']} (spec {result['spec']['hash']})")
    for n in names:
        console.print(f"  {n}: {result['backends'][n]['framework']}")
    t = Table(title="knobs", show_lines=False)
    for col in ["knob", "neutral", *names, "status", "why"]:
        t.add_column(col, overflow="fold")
    for row in result["knobs"]:
        style = "green" if row["status"] == "equal" else "yellow"
        t.add_row(row["name"], str(row["neutral"]), *[str(row[n]) for n in names], f"[{style}]{row['status']}[/]", row["why"])
    console.print(t)
    c = Table(title="realised per-step counts")
    c.add_column("count")
    for n in names:
        c.add_column(n)
    c.add_column("status")
    for k in next(iter(result["backends"].values()))["counts"]:
        vals = [result["backends"][n]["counts"][k] for n in names]
        ok = len(set(vals)) == 1
        c.add_row(k, *map(str, vals), "[green]equal[/]" if ok else "[bold red]DIFFERENT[/]")
    console.print(c)
    r = Table(title="rollout knobs (core: the same for every backend)")
    for col in ["knob", "value", "source", "note"]:
        r.add_column(col, overflow="fold")
    for row in result["rollout_knobs"]:
        r.add_row(row["name"], _show(row["value"]), row["source"], escape(row["note"]))
    console.print(r)
    for n in names:
        console.print(f"[bold]{n} native config[/] (every value pinned):")
        for k, v in result["backends"][n]["config"].items():
            console.print(f"  {k}={v}", highlight=False)
    if "against" in result:
        _print_against(console, result["spec"]["name"], result["against"])
    from twinrun.core.sweeps.placement import cost_line

    console.print(cost_line(result["sweep_cost"]) + f" ({result['sweep_cost']['games_source']})", highlight=False)


def _show(value: object) -> str:
    return "null" if value is None else escape(str(value))


def _print_against(console: Console, name: str, against: dict) -> None:
    other = against["spec"]["name"]
    counts = against["counts"]
    c = Table(title=f"per-step counts: {name} (this) against {other} (other)")
    c.add_column("count")
    for col in counts:
        c.add_column(col)
    for k in next(iter(counts.values())):
        c.add_row(k, *[str(counts[col][k]) for col in counts])
    console.print(c)
    d = Table(title=f"fields that differ from {other}")
    for col in ["field", "this", "other", "source (this)"]:
        d.add_column(col, overflow="fold")
    for row in against["differences"]:
        d.add_row(row["name"], _show(row["this"]), _show(row["other"]), row["source"])
    console.print(d)
