"""`twinrun card SWEEP --out DIR [--compare FILE] [--select RUN@STEP] [--push REPO]`: a Hub-ready model folder."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("card")(card_cmd)


def card_cmd(
    sweep: Path = typer.Argument(..., metavar="SWEEP", help="a sweep --out folder (sweep.json + arms/)"),
    out: Path = typer.Option(..., "--out", help="the card folder (README.md, card.json, one subfolder per checkpoint)"),
    compare_json: Path | None = typer.Option(None, "--compare", help="the sweep's compare.json (compare --out) or "
                                             "compare --json output; default: compare the sweep now"),
    baseline: str = typer.Option("baseline", "--baseline", help="baseline arm (when comparing now)"),
    family: str = typer.Option("run", "--family", help="multiplicity families when comparing now: run or all (for "
                               "custom families, run compare --family custom --out and pass its compare.json)"),
    select: list[str] = typer.Option([], "--select", help="RUN@STEP to publish (repeatable; default: each run's "
                                     "peak and final checkpoint)"),
    adjust: str = typer.Option("holm", "--adjust", help="the adjusted p-value shown: holm, bh or bonferroni"),
    license: str = typer.Option("apache-2.0", "--license", help="the card's license (match the base model's)"),
    dataset: list[str] = typer.Option([], "--dataset", help="front-matter datasets (default: the environment)"),
    push: str | None = typer.Option(None, "--push", help="upload the folder to this Hub repo (needs a token)"),
    private: bool = typer.Option(False, "--private", help="with --push: create the repo private"),
) -> None:
    """Write a Hub-ready folder: the selected checkpoints with lift, CI, p and adjusted p from the comparison."""
    from twinrun.core.compare.card import build_card, load_comparison, push_card

    if compare_json is not None:
        result = load_comparison(compare_json)
    else:
        from twinrun.core.compare import CompareSettings, compare

        result = compare([sweep], baseline, CompareSettings(family=family))
    folder = build_card(sweep, result, out, select=select, adjust=adjust, license=license, datasets=dataset or None,
                        repo_id=push, log=typer.echo)
    typer.echo(f"card: {folder / 'README.md'}")
    if push:
        push_card(folder, push, private=private, log=typer.echo)
