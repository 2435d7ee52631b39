"""report.md and report.html: the comparison in a fixed order of sections (:data:`SECTIONS`). First the first
screen (issue 52: what was compared, each framework pair's verdict with its reason, the lift figure, the peak table,
what would decide it; :mod:`.first_screen`), then the verdicts with their pre-registered criterion, looks,
frameworks and seeds, figures, runs, streams, arms, families, flags, skipped statistics, methods and settings,
provenance and the words used; or, for a comparison across executors, the transfer of lifts and each sweep's own
report.

:func:`write_report` takes the dict that :func:`twinrun.core.compare.compare` returns (or the `compare.json` it
wrote), draws the PNGs next to the report and writes `report.md`, `report.html` (:mod:`.report_html`) and
`compare.json` atomically. A new section is one function of (result, :class:`Context`) placed in SECTIONS.
:func:`twinrun.core.compare.console.print_console` prints the same result on a terminal, in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.compare import first_screen as fs
from twinrun.core.compare.report_tables import (  # noqa: F401  (streams_sentence, blocks_sentence: used by callers)
    _arms_section, _ci, _estimate_ci, _families_section, _num, _p, _pct, _pp, _runs_section, _streams_section, _table,
    blocks_sentence, streams_sentence,
)
from twinrun.core.compare.render import game_lists_note, seed_design_line
from twinrun.core.compare.exclusions import excluded_game_notes
from twinrun.core.records import atomic_write_json, atomic_write_text


def _family_rule(s: Mapping[str, Any]) -> str:
    if s["family"] == "run":
        return "one per run"
    if s["family"] == "all":
        return "all checkpoint arms in one"
    return "custom (" + ", ".join(f"{n}={g}" for n, g in s.get("family_map") or []) + ")"


def _verdict_section(result: Mapping[str, Any], h: str) -> list[str]:
    pairs = result.get("pairs") or []
    if not pairs:
        return []
    lines = [f"{h} Verdicts", "", f"Criterion (stated before looking): {pairs[0]['criterion']}", ""]
    lines.append(_table(
        ["runs", "relation", "ckpts", "Pearson r [CI]", "detrended r [CI]", "Spearman [CI]", "interaction p",
         "centred band (pp)", "ceiling (test-retest / sampling)", "verdict"],
        [[f"{p['a']} vs {p['b']}", p.get("relation") or "–", str(p["n_checkpoints"]),
          _estimate_ci(p["pearson"], p["pearson_ci"]),
          _estimate_ci(p.get("pearson_detrended"), p.get("pearson_detrended_ci")),
          _estimate_ci(p["spearman"], p["spearman_ci"]), _p((p.get("interaction") or {}).get("p_value")),
          "–" if not p.get("equivalence") else f"±{100 * p['equivalence']['half_width_max']:.1f} "
          f"(margin ±{100 * p['equivalence']['delta']:g})",
          f"{_num(p.get('ceiling_test_retest'))} / {_num(p.get('ceiling_sampling'))}", f"**{p['verdict']}**"]
         for p in pairs]))
    lines.append("")
    for p in pairs:
        inter = p.get("interaction") or {}
        note = f" ({inter['note']})" if inter.get("note") else ""
        lines.append(f"- **{p['a']} vs {p['b']}: {p['verdict']}.** {p['explanation']} "
                     f"Interaction test: {inter.get('method', '–')}{note}. Bootstrap: {p.get('bootstrap', '')}.")
    lines += ["", "Centred band: the largest reach from 0 of the pointwise 90% intervals of the difference of the two "
              "curves after each is centred on its own mean (all inside the margin = equivalence by intersection-union "
              "TOST). Detrended r: Pearson r after removing each curve's least-squares line over the steps.", ""]
    return lines


def _frameworks_section(result: Mapping[str, Any], h: str) -> list[str]:
    fw = result.get("frameworks") or {}
    if not fw:
        return []
    lines = [f"{h} Frameworks and seeds", ""]
    groups = fw.get("groups") or {}
    if groups:
        lines.append("Runs by framework: " + "; ".join(
            f"{f}: " + ", ".join(f"{g['run']} (seed {g['seed'] if g['seed'] is not None else '?'})" for g in gs)
            for f, gs in groups.items()) + ".")
    if fw.get("note"):
        lines.append(f"**{fw['note'][0].upper() + fw['note'][1:]}.**")
    for c in fw.get("comparisons") or []:
        head = (f"- **{c['a']} vs {c['b']}**: {c['seeds_a']} and {c['seeds_b']} seed(s); mean r of seed pairs "
                f"{_num(c.get('seed_pairs_mean_r'))}, of framework pairs {_num(c.get('framework_pairs_mean_r'))}.")
        if c.get("verdict"):
            a = c.get("anova") or {}
            head += (f" Framework verdict: **{c['verdict']}.** {c['explanation']} (F = {_num(a.get('statistic'))}, "
                     f"df {a.get('df1')}, {a.get('df2')}, p {_p(a.get('p_value'))})")
        else:
            head += f" {c.get('note', '')}."
        lines.append(head)
        if c.get("seed_design"):
            lines.append("  " + seed_design_line(c["seed_design"]))
    return lines + [""]


@dataclass(frozen=True)
class Context:
    """What the sections read besides the result. figures: caption -> PNG path relative to the report; h: the
    heading mark of a section; after_verdicts: lines after the verdicts (the per-look section of a sweep played
    until decided); notes: one-line notes for the first screen (e.g. that the executor is a stand-in); methods:
    paragraphs for Methods and settings (e.g. the stand-in's rule); provenance: paragraphs for Provenance (e.g. the
    evaluation dtype); extras: inputs a later section needs, by name."""

    figures: Mapping[str, str]
    h: str = "##"
    after_verdicts: Sequence[str] = ()
    notes: Sequence[str] = ()
    methods: Sequence[str] = ()
    provenance: Sequence[str] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)


Section = Callable[[Mapping[str, Any], Context], list[str]]
LIFT_FIGURE = "lift_curves.png"


def _lift_figure(figures: Mapping[str, str]) -> tuple[str, str] | None:
    return next(((c, rel) for c, rel in figures.items() if rel.endswith(LIFT_FIGURE)), None)


def _fig(caption: str, rel: str) -> list[str]:
    return [f"![{caption}]({rel})", "", f"*{caption}*", ""]


def _compared(result: Mapping[str, Any], ctx: Context) -> list[str]:
    left_out = (["Arms played on another game list were left out: [Provenance](#provenance) names them.", ""]
                if game_lists_note(result) else [])
    return [fs.compared_line(result), ""] + left_out


def _notes(result: Mapping[str, Any], ctx: Context) -> list[str]:
    return [line for n in ctx.notes for line in (n, "")]


def _headline(result: Mapping[str, Any], ctx: Context) -> list[str]:
    return [line for v in fs.verdict_lines(result) for line in (v, "")]


def _first_figure(result: Mapping[str, Any], ctx: Context) -> list[str]:
    lift = _lift_figure(ctx.figures)
    return _fig(*lift) if lift else []


def _peaks(result: Mapping[str, Any], ctx: Context) -> list[str]:
    table = fs.table_lines(result)
    return table + [""] if table else []


def _next(result: Mapping[str, Any], ctx: Context) -> list[str]:
    return [fs.next_line(result), "",
            "Words: [arm, stream, cell, lift, block, look, seed pairing](#words-used-here).", ""]


def _looks(result: Mapping[str, Any], ctx: Context) -> list[str]:
    return list(ctx.after_verdicts)


def _figures_section(result: Mapping[str, Any], ctx: Context) -> list[str]:
    lift = _lift_figure(ctx.figures)
    rest = [(c, rel) for c, rel in ctx.figures.items() if (c, rel) != lift]
    return [f"{ctx.h} Figures", ""] + [x for c, rel in rest for x in _fig(c, rel)] if rest else []


def _flags(result: Mapping[str, Any], ctx: Context) -> list[str]:
    return [f"{ctx.h} Flags", ""] + [f"- ⚠ {f}" for f in result["flags"]] + [""] if result.get("flags") else []


def _skipped(result: Mapping[str, Any], ctx: Context) -> list[str]:
    if not result.get("skipped"):
        return []
    return [f"{ctx.h} Statistics skipped or approximated", ""] + [f"- {x}" for x in result["skipped"]] + [""]


def _methods(result: Mapping[str, Any], ctx: Context) -> list[str]:
    s = result["settings"]
    base = result["baseline"]
    src = ("per-game arms of one sweep" if result["source"] == "per-game"
           else f"published per-checkpoint summaries ({result.get('summary_file', '')})")
    fam_sizes = ", ".join(f"{n}: {f['size']}" for n, f in sorted((result.get("families") or {}).items()))
    return [f"{ctx.h} Methods and settings", "", f"Source: {src}.", "",
            f"Settings: alpha {s['alpha']}, power {s['power']}, CI level {s['level']}, {s['n_boot']} bootstrap "
            f"resamples (seed {s['seed']}), rho0 {s.get('rho0')}, equivalence margin ±{100 * s.get('delta', 0):g} pp, "
            f"multiplicity families: {_family_rule(s)} (sizes: {fam_sizes or '–'}), "
            f"unmeasured flag above {100 * s['max_unmeasured_share']:.0f}%.", "",
            f"Baseline `{base['arm']}`{' (same sweep)' if result['source'] == 'per-game' else ''}: success rate "
            f"{_pct(base['success_rate'])}% {_ci(base.get('ci'), _pct)}, {base['n_measured']} measured games"
            + (f", {base['n_unmeasured']} unmeasured (excluded)" if base.get("n_unmeasured") else "") + ".", ""] \
        + [line for m in ctx.methods for line in (m, "")]


def _provenance(result: Mapping[str, Any], ctx: Context) -> list[str]:
    lines = [f"{ctx.h} Provenance", ""]
    if result.get("sweep_id"):
        lines += [f"Sweep `{result['sweep_id']}`, game list `{result['games_hash']}`, {result['n_games']} games.", ""]
    if result.get("executor"):
        lines += [f"Executor `{result['executor']}`.", ""]
    if game_lists_note(result):
        lines += [game_lists_note(result).strip(), ""]
    lines += [line for p in ctx.provenance for line in (p, "")]
    lines += [f"compare.json schema version {result.get('schema_version', '–')} (every number: docs/compare-json.md "
              "in the twinrun repository).", ""]
    return lines


def _training(result: Mapping[str, Any], ctx: Context) -> list[str]:
    from twinrun.core.compare.training_report import training_section  # the runs' step metrics (issue 55)

    return training_section(result, ctx.h)


def _words(result: Mapping[str, Any], ctx: Context) -> list[str]:
    from twinrun.core.compare.glossary import render_markdown

    return render_markdown(ctx.h)


# The report in its fixed order: the first screen (what was compared, the verdicts with their reasons, the lift
# figure, the peak table, what would decide it), then the detail under headings. A new section is a function of
# (result, Context) -> markdown lines, placed here by name.
SECTIONS: tuple[tuple[str, Section], ...] = (
    ("compared", _compared), ("headline", _headline), ("notes", _notes), ("lift-figure", _first_figure),
    ("peaks", _peaks), ("next", _next),
    ("verdicts", lambda r, c: _verdict_section(r, c.h)), ("looks", _looks),
    ("frameworks", lambda r, c: _frameworks_section(r, c.h)), ("training", _training),
    ("figures", _figures_section),
    ("runs", lambda r, c: _runs_section(r, c.h)), ("streams", lambda r, c: _streams_section(r, c.h)),
    ("arms", lambda r, c: _arms_section(r, c.h)), ("families", lambda r, c: _families_section(r, c.h)),
    ("flags", _flags), ("skipped", _skipped), ("methods", _methods), ("provenance", _provenance), ("words", _words),
)
FIRST_SCREEN = ("compared", "headline", "notes", "lift-figure", "peaks", "next")


def comparison_blocks(result: Mapping[str, Any], ctx: Context, title: str | None = None,
                      level: int = 1) -> list[tuple[str, list[str]]]:
    """(section name, its markdown lines) in the report's order, the title first; empty sections left out."""
    blocks = [("title", [f"{'#' * level} {title or 'twinrun comparison'}", ""])]
    for name, section in SECTIONS:
        lines = section(result, ctx)
        if lines:
            blocks.append((name, lines))
    return blocks


def render_comparison(result: Mapping[str, Any], figures: Mapping[str, str], title: str | None = None,
                      level: int = 1, after_verdicts: Sequence[str] = (), **context: Any) -> str:
    """One sweep's (or one summary's) report text. `figures` maps a caption to a PNG path relative to the report;
    `after_verdicts` and the other Context fields (notes, methods, provenance, extras) as in :class:`Context`."""
    ctx = Context(figures, "#" * (level + 1), after_verdicts, **context)
    return "\n".join(line for _, lines in comparison_blocks(result, ctx, title, level) for line in lines)


def render_transfer(result: Mapping[str, Any], figures: Mapping[str, str], sweep_figures: Mapping[str, Mapping[str, str]],
                    title: str | None = None) -> str:
    lines = [f"# {title or 'twinrun comparison across executors'}", "",
             f"{len(result['sweeps'])} sweeps, one per {result['axis']}, each against its own baseline: "
             + ", ".join(f"`{sw['executor']}` (baseline {_pct(sw['baseline']['success_rate'])}%)" for sw in result["sweeps"])
             + ".", "", "## Transfer of lifts", ""]
    for t in result["transfer"]:
        pooled = t["pooled"]
        rows = [["pooled", str(pooled["n"]), _estimate_ci(pooled["pearson"], pooled["pearson_ci"]),
                 _estimate_ci(pooled["spearman"], pooled["spearman_ci"])]]
        rows += [[run, str(c["n"]), _estimate_ci(c["pearson"], c["pearson_ci"]),
                  _estimate_ci(c["spearman"], c["spearman_ci"])] for run, c in t["per_run"].items()]
        lines += [f"**{t['a']} vs {t['b']}.** {t['explanation']} Bootstrap: {t['bootstrap']}.", "",
                  _table(["checkpoints of", "n", "Pearson r [CI]", "Spearman [CI]"], rows), ""]
        if t.get("only_a") or t.get("only_b"):
            lines += [f"Swept with one executor only: {t['a']}: {', '.join(t['only_a']) or '–'}; "
                      f"{t['b']}: {', '.join(t['only_b']) or '–'}.", ""]
    for caption, rel in figures.items():
        lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    for sw in result["sweeps"]:
        lines += [render_comparison(sw, sweep_figures.get(sw["executor"], {}), f"Executor `{sw['executor']}`", level=2), ""]
    return "\n".join(lines)


def render_markdown(result: Mapping[str, Any], figures: Mapping[str, str], title: str | None = None) -> str:
    """The report text of a comparison (kept for callers of the one-sweep report)."""
    return render_comparison(result, figures, title)


def metrics_for_sweeps(inputs: Sequence[str | Path]) -> dict[str, Path]:
    """run name -> its training run's metrics.jsonl, for every run a sweep folder among `inputs` evaluated
    (read from each sweep.json; runs whose metrics file does not exist are left out)."""
    out: dict[str, Path] = {}
    for p in inputs:
        manifest = Path(p) / "sweep.json"
        if not manifest.is_file():
            continue
        plan = json.loads(manifest.read_text(encoding="utf-8"))
        for arm in plan.get("arms", []):
            if arm.get("run") and arm.get("run_dir"):
                m = Path(arm["run_dir"]) / "metrics.jsonl"
                if m.is_file():
                    out.setdefault(arm["run"], m)
    return out


def sweep_notes(inputs: Sequence[str | Path]) -> list[str]:
    """What each sweep folder among `inputs` states about how its curators ran (sweep.json): the one dtype every
    checkpoint was evaluated at, whatever its export saved (a report line, so a reader sees both frameworks'
    checkpoints were measured at one precision)."""
    from twinrun.core.spec.dtypes import CANONICAL

    notes = []
    for p in inputs:
        manifest = Path(p) / "sweep.json"
        if not manifest.is_file():
            continue
        plan = json.loads(manifest.read_text(encoding="utf-8"))
        dtype = plan.get("curator_dtype")
        if dtype in CANONICAL:
            dtype = CANONICAL[dtype]  # one name shown (a folder written before the short names says float32)
        notes.append(f"Curator precision: every checkpoint of sweep `{plan.get('sweep_id')}` evaluated at `{dtype}` "
                     "(sweep.curator_dtype), whatever dtype its export saved." if dtype else
                     f"Curator precision: sweep `{plan.get('sweep_id')}` states no evaluation dtype (written before "
                     "sweep.curator_dtype): each checkpoint ran at its config's dtype.")
        notes += excluded_game_notes(plan)  # games left out of the split, or kept though broken (issue 53)
    return notes


def _comparison_figures(result: Mapping[str, Any], figdir: Path, rel: str, prefix: str = "") -> dict[str, str]:
    from twinrun.core.compare import plots

    figures: dict[str, str] = {}
    plots.plot_lift_curves(result, figdir / f"{prefix}lift_curves.png")
    figures["Lift over the same-sweep baseline per checkpoint"] = f"{rel}/{prefix}lift_curves.png"
    if any(c.get("argmax_distribution") for c in result.get("runs", {}).values()):
        plots.plot_peak_distribution(result, figdir / f"{prefix}peak_distribution.png")
        figures["Bootstrap distribution of each run's peak checkpoint"] = f"{rel}/{prefix}peak_distribution.png"
    if plots.framework_comparisons(result):
        plots.plot_framework_curves(result, figdir / f"{prefix}framework_curves.png")
        figures["Each framework's seeds and mean curve, and the difference of the centred means with its 90% band"] = (
            f"{rel}/{prefix}framework_curves.png")
    return figures


def write_report(result: Mapping[str, Any] | str | Path, out_dir: str | Path, *,
                 metrics: Mapping[str, str | Path] | None = None, title: str | None = None,
                 notes: Sequence[str] = (), sequential: Sequence[tuple[str, Mapping[str, Any]]] = (),
                 methods: Sequence[str] = (), provenance: Sequence[str] = (),
                 extras: Mapping[str, Any] | None = None) -> Path:
    """Write `out_dir/report.md`, `out_dir/report.html` (the same content, figures embedded), `out_dir/compare.json`
    and the figures under `out_dir/figures/`.

    result: a `compare` result dict or the path of a compare.json; metrics: label -> a run's metrics.jsonl for
    the training-dynamics figure (omitted when None or empty); notes: one-line notes for the first screen (e.g.
    that the executor is a stand-in, with a link to its rule); methods: paragraphs under Methods and settings (the
    stand-in's rule); provenance: paragraphs under Provenance (e.g. the evaluation dtype); sequential: (sweep
    folder, sweep.json's `sequential`) of sweeps played with --until-decided, each shown as a per-look table
    after the verdicts; extras: inputs of a section that needs more than the result. Returns the report path.
    """
    from twinrun.core.compare import plots
    from twinrun.core.compare.report_html import write_html

    if isinstance(result, (str, Path)):
        result = json.loads(Path(result).read_text(encoding="utf-8"))
    out = Path(out_dir)
    figdir = out / "figures"
    present = {k: v for k, v in (metrics or {}).items() if Path(v).exists()}
    from twinrun.core.compare.training_report import training_figures, with_training

    result = with_training(result, present)  # the runs' training curves (issue 55), unless compare gave them
    if result.get("kind") == "transfer":
        figures = {}
        plots.plot_transfer(result, figdir / "transfer.png")
        figures[f"Lift per checkpoint on one {result['axis']} against the other"] = "figures/transfer.png"
        sweep_figs = {}
        for i, sw in enumerate(result["sweeps"]):
            sweep_figs[sw["executor"]] = _comparison_figures(sw, figdir, "figures", prefix=f"sweep{i}-")
        text = render_transfer(result, figures, sweep_figs, title)
        if notes or provenance:
            head, _, rest = text.partition("\n\n")
            text = "\n\n".join([head, *notes, *methods, *provenance, rest])
        blocks = [("body", text.splitlines())]
    else:
        figures = _comparison_figures(result, figdir, "figures")
        if present:
            plots.plot_training_dynamics(present, figdir / "training_dynamics.png")
            figures["Training dynamics of each run (metrics.jsonl)"] = "figures/training_dynamics.png"
        figures.update(training_figures(result, figdir))
        from twinrun.core.compare.looks_report import looks_section

        h = "##"
        extra = [x for folder, seq in sequential for x in looks_section(seq, h, folder if len(sequential) > 1 else None)]
        ctx = Context(figures, h, extra, notes, methods, provenance, dict(extras or {}))
        blocks = comparison_blocks(result, ctx, title)
        text = "\n".join(line for _, lines in blocks for line in lines)
    atomic_write_json(out / "compare.json", dict(result))
    path = out / "report.md"
    atomic_write_text(path, text + "\n")
    write_html(blocks, out, title or "twinrun comparison", first_screen=FIRST_SCREEN)
    return path
