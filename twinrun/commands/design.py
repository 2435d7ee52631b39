"""`twinrun design --delta PP (--rho R | --pilot SWEEP_DIR)`: the streams that would decide a difference at the
protocol's games per stream, and what they cost in executor episodes, before a GPU hour is spent (docs/streams.md).

The games per stream are the protocol's (a stated --games-per-stream, the spec's environment.eval_games, a pilot's
games, else the whole split) and never more than the held-out split holds (:mod:`twinrun.core.envs.splits`).

The math lives in :mod:`twinrun.core.compare.design` (pure); this module parses and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


ENV_NAMES = {"alfworld": "ALFWorld", "sciworld": "ScienceWorld"}


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
    streams: str = typer.Option("1,2,3,4,6,8,12,16,24,32,48,64", "--streams",
                                help="the numbers of streams to tabulate (those up to --max-streams)"),
    max_streams: int = typer.Option(64, "--max-streams", min=1, help="the most streams per cell a design may name; "
                                    "where none up to it decides, the output says so"),
    games_per_stream: int | None = typer.Option(None, "--games-per-stream", help="the protocol's games per stream "
                                                "(default: the spec's environment.eval_games, else the pilot's "
                                                "games, else the whole split); never more than the split holds"),
    spec_path: Path | None = typer.Option(None, "--spec", help="experiment spec: games per stream from "
                                          "environment.eval_games (null: the whole split), the split from "
                                          "environment.name and eval_split"),
    split: str | None = typer.Option(None, "--split", help="the held-out split whose size caps the games per stream "
                                     "(default: the spec's environment.eval_split, else ALFWorld valid_seen)"),
    streams_design: str = typer.Option("crossed", "--streams-design", help="shape only: crossed (sweep --streams "
                                       "plays stream r of every arm with one plan: the stream blocks cancel, rho is "
                                       "the ICC left after them) or nested (rho the whole intra-stream correlation)"),
    as_json: bool = typer.Option(False, "--json", help="print the design as JSON"),
) -> None:
    """How many streams at the protocol's games per stream decide a difference of --delta points, and the cost."""
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
    proto = protocol(games_per_stream, spec_path, split, info.get("pilot_games"))
    kw: dict[str, Any] = dict(rate=rate, alpha=alpha, target=target, kind=kind, checkpoints=checkpoints, runs=runs,
                              streams=parse_int_list(streams, "--streams"), max_streams=max_streams,
                              split_games=proto["split_games"], split=proto["split_label"],
                              games_source=proto["source"], blocked=blocked)
    des = d.design_table(delta / 100, rho, proto["games"], **kw)
    des_upper = d.design_table(delta / 100, min(upper, 0.99), proto["games"], **kw) if upper is not None else None
    out = {"delta": delta / 100, "kind": kind, "rho": rho, "rho_source": "pilot" if pilot else "stated",
           "streams_design": "crossed" if blocked else "nested", "rho_assumes": assumes,
           "rate": rate, "alpha": alpha, "power": target, "checkpoints": checkpoints, "runs": runs, **info,
           "games_per_stream": proto["games"], "games_source": proto["source"],
           "split": {"env": proto["env"], "name": proto["split"], "games": proto["split_games"],
                     "label": proto["split_label"]},
           "max_streams": max_streams, "streams_needed": des.streams, "power_at_max_streams": des.power_at_cap,
           "rows": [r.__dict__ for r in des.rows],
           "at_rho_upper": None if des_upper is None else {
               "rho": upper, "streams_needed": des_upper.streams, "power_at_max_streams": des_upper.power_at_cap,
               "rows": [r.__dict__ for r in des_upper.rows]}}
    if des.streams is not None:  # what the fewest streams that decide cost: turns, episodes, curator GPUs
        from twinrun.core.sweeps.placement import sweep_cost

        out["sweep_cost"] = sweep_cost(checkpoints_per_run=checkpoints, runs=runs, streams=des.streams,
                                       games=proto["games"])
    if as_json:
        typer.echo(json.dumps(out, indent=1))
        return
    _print(out, des)


def protocol(stated: int | None, spec_path: Path | None, split: str | None, pilot_games: int | None) -> dict[str, Any]:
    """The protocol's games per stream and the split that caps them: a stated --games-per-stream, else the spec's
    environment.eval_games (null: the whole split), else the pilot's games, else the whole split. The environment
    and split are the spec's (--split overrides the split), else ALFWorld valid_seen."""
    from twinrun.core.envs.splits import held_out_games
    from twinrun.core.errors import TwinrunError

    env, eval_games, where = "alfworld", None, None
    if spec_path is not None:
        from twinrun.core.spec import load_spec

        e = load_spec(spec_path).environment
        env, eval_games, where = e.name, e.eval_games, f"environment.eval_games in {str(spec_path)!r}"
        split = split or e.eval_split
    split = split or "valid_seen"
    n_split = held_out_games(env, split)
    label = f"{ENV_NAMES.get(env, env)} {split}"
    if stated is not None:
        games, source = stated, "--games-per-stream"
    elif where is not None and eval_games is not None:
        games, source = eval_games, where
    elif where is None and pilot_games is not None:
        games, source = pilot_games, "--pilot (its games per stream)"
    elif n_split is not None:
        games, source = n_split, "the whole split"
    else:
        raise TwinrunError(f"--games-per-stream: {label} has no size known here, so the whole split cannot be "
                           "counted (fix: --games-per-stream N, the protocol's games per stream)")
    return {"games": games, "source": source, "env": env, "split": split, "split_games": n_split,
            "split_label": label}


def _print(out: dict[str, Any], des: Any) -> None:
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
                  f"{out['checkpoints']} checkpoints x {out['runs']} runs (frameworks x seeds) + baseline")
    sp = out["split"]
    held = (f"{sp['label']} holds {sp['games']}" if sp["games"] is not None
            else f"{sp['label']}'s size is not known here: not checked")
    console.print(f"games per stream: {out['games_per_stream']}, the protocol's (from {out['games_source']}; {held}); "
                  f"streams vary, up to {out['max_streams']} per cell")
    console.print(f"rho is taken as {out['rho_assumes']}")
    if out.get("pilot_blocked"):
        b = out["pilot_blocked"]
        console.print(f"pilot: crossed streams, {100 * b['block_share']:.0f}% [{100 * b['block_share_ci'][0]:.0f}, "
                      f"{100 * b['block_share_ci'][1]:.0f}] of the between-stream variance is each run's stream block; "
                      f"ICC left after the blocks {b['icc']:.4f} (whole ICC {out['pilot_icc']['icc']:.4f})")
    t = Table(title=f"streams per cell at {out['games_per_stream']} games per stream (DEFF = 1 + (m - 1) rho)")
    for col in ("streams", "games per stream", "power", "DEFF", "executor episodes", "decides"):
        t.add_column(col, justify="right")
    for r in des.rows:
        t.add_row(str(r.streams), str(r.games), f"{r.power:.3f}", f"{r.deff:.2f}", f"{r.episodes:,}",
                  "yes" if r.decides else "no")
    console.print(t)
    console.print(_verdict(out["streams_needed"], out["power_at_max_streams"], out))
    if out.get("sweep_cost"):
        from twinrun.core.sweeps.placement import cost_line

        console.print(cost_line(out["sweep_cost"]), highlight=False)
    up = out.get("at_rho_upper")
    if up is not None:
        console.print(f"at rho's upper bound {up['rho']:.4f}: " + _verdict(up["streams_needed"],
                                                                            up["power_at_max_streams"], out))
    console.print("[dim]stream-level t-test, between-stream variance pooled over the layout's cells "
                  "(docs/streams.md); one stream per cell: normal test with the stated rho[/]")


def _verdict(need: int | None, power_cap: float, out: dict[str, Any]) -> str:
    m = out["games_per_stream"]
    if need is not None:
        eps = (out["checkpoints"] * out["runs"] + 1) * need * m
        return f"fewest that decide: {need} streams x {m} games per stream ({eps:,} executor episodes)"
    return (f"no number of streams up to {out['max_streams']} decides at {m} games per stream (power "
            f"{power_cap:.3f} at {out['max_streams']}); more games per stream are not the protocol's: a larger "
            "--delta, a lower rho (crossed streams for a shape), or a higher --max-streams")


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.4f}"
