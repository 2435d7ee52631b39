"""`twinrun advdiff FILE.jsonl`: how far the frameworks' own advantage semantics drift apart on the same rewards.

The math and the input format live in `twinrun.core.advantages.advdiff` (pure); this module only prints and plots.
matplotlib is imported only when `--plot` is given.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import typer

from twinrun.backends.registry import default_presets
from twinrun.core.advantages import PRESETS
from twinrun.core.advantages.advdiff import AdvdiffResult, compute_table, load_rows, resolve_presets


def register(app: typer.Typer) -> None:
    @app.command("advdiff")
    def advdiff(
        file: Path = typer.Argument(..., help="JSONL step rows: group, trajectory, step, reward (anchor, valid optional), or a run's rollouts.jsonl"),
        presets: str = typer.Option(
            ",".join(default_presets()), "--presets", help=f"comma-separated, from: {', '.join(PRESETS)}"
        ),
        as_json: bool = typer.Option(False, "--json", help="print the rows/groups/presets JSON instead of tables"),
        plot: Optional[Path] = typer.Option(None, "--plot", help="write per-group advantages side by side (PNG)"),
        max_rows: int = typer.Option(40, "--max-rows", min=0, help="rows shown in the table (all are in --json)"),
        anchor: Optional[str] = typer.Option(
            None, "--anchor", help="re-key a rollouts.jsonl's GiGPO anchors: position_outcome, position or exact_input"
        ),
    ) -> None:
        """Advantages of the same rewards under several frameworks' semantics, side by side."""
        names = resolve_presets(presets)
        result = compute_table(load_rows(file, anchor), names)
        if plot is not None:
            write_plot(result, plot)
        if as_json:
            typer.echo(json.dumps(result.to_json(), indent=1, allow_nan=False))
            return
        _print_tables(result, max_rows)
        if plot is not None:
            typer.echo(f"plot: {plot}")


def _print_tables(result: AdvdiffResult, max_rows: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped: do not squeeze the tables into 80 columns
        console = Console(width=160)
    out = result.to_json()
    console.print("[bold]presets[/bold] (the knobs each one used)")
    for name, p in out["presets"].items():
        console.print(f"  [bold]{name}[/bold]: " + ", ".join(f"{k}={v}" for k, v in p["knobs"].items()))
        console.print(f"      {p['description']}  [dim]({p['source']})[/dim]")

    d = result.data
    rows = Table(title=f"advantage per row ({len(d)} rows)")
    for col in ("group", "trajectory", "step", "reward", "valid", *result.presets):
        rows.add_column(col, justify="left" if col in ("group", "trajectory") else "right", overflow="fold")
    for i in range(min(len(d), max_rows)):
        r = d.rewards[i]
        rows.add_row(
            d.groups[i], d.trajectories[i], str(d.steps[i]), "null" if r != r else f"{r:g}",
            "" if d.valid[i] else "no", *(f"{result.advantages[p][i]:+.4f}" for p in result.presets),
        )
    console.print(rows)
    if len(d) > max_rows:
        console.print(f"({len(d) - max_rows} more rows: use --max-rows or --json)")

    if len(result.presets) > 1:
        groups = Table(title="per group: |difference| between two presets over the group's rows")
        for col in ("group", "rows", "trajectories", "presets", "max", "mean"):
            groups.add_column(col, justify="left" if col in ("group", "presets") else "right")
        for g in out["groups"]:
            for j, x in enumerate(g["diffs"]):
                first = j == 0
                groups.add_row(
                    g["group"] if first else "", str(g["rows"]) if first else "",
                    str(g["trajectories"]) if first else "", f"{x['a']} vs {x['b']}",
                    f"{x['max_abs']:.4f}", f"{x['mean_abs']:.4f}", end_section=j == len(g["diffs"]) - 1,
                )
        console.print(groups)


def write_plot(result: AdvdiffResult, path: Path, max_groups: int = 12) -> None:
    """One panel per group (the ``max_groups`` groups with the largest preset disagreement), one bar per preset
    for each row, rows labelled trajectory:step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    d = result.data
    groups = np.asarray(d.groups, dtype=object)
    spread = {
        name: max((float(mx[i]) for mx, _ in result.diffs.values()), default=0.0)
        for i, name in enumerate(result.group_names)
    }
    shown = sorted(result.group_names, key=lambda g: -spread[g])[:max_groups]
    shown = [g for g in result.group_names if g in shown]  # keep file order
    ncols = min(3, len(shown))
    nrows = -(-len(shown) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 3.2 * nrows), squeeze=False)
    width = 0.8 / len(result.presets)
    for ax, g in zip(axes.flat, shown):
        idx = np.flatnonzero(groups == g)
        x = np.arange(len(idx))
        for k, p in enumerate(result.presets):
            ax.bar(x + (k - (len(result.presets) - 1) / 2) * width, result.advantages[p][idx], width, label=p)
        ax.axhline(0.0, color="black", linewidth=0.5)
        ax.set_xticks(x, [f"{d.trajectories[i]}:{d.steps[i]}" for i in idx], rotation=60, fontsize=6)
        ax.set_title(f"group {g} (max |diff| {spread[g]:.3f})", fontsize=9)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    title = "advantage per row under each preset"
    if len(shown) < len(result.group_names):
        title += f" ({len(shown)} of {len(result.group_names)} groups: largest disagreement)"
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png")  # then rename: readers never see half a file
    plt.close(fig)
    os.replace(tmp, path)
