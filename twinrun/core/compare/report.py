"""report.md: the comparison's verdicts (each with its pre-registered criterion and one sentence that says why),
frameworks and seeds, figures, curves, families, arms, flags and skipped statistics; or, for a comparison across
executors, the transfer of lifts and each sweep's own report.

:func:`write_report` takes the dict that :func:`twinrun.core.compare.compare` returns (or the `compare.json` it
wrote), draws the PNGs next to the report and writes `report.md` and `compare.json` atomically.
:func:`print_console` prints the same result on a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.compare.exclusions import excluded_game_notes
from twinrun.core.records import atomic_write_json, atomic_write_text


def _pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{100 * v:.{digits}f}"


def _pp(v: float | None) -> str:
    """A lift in percentage points with a sign."""
    return "–" if v is None else f"{100 * v:+.1f}"


def _ci(ci: list[Any] | None, fmt: Any = _pp) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "–"
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def _p(v: float | None) -> str:
    if v is None:
        return "–"
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def _num(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _estimate_ci(value: float | None, ci: list[Any] | None) -> str:
    """A correlation and its interval; only "–" where the correlation is undefined (a flat curve): the bootstrap
    draws of a flat curve are rounding noise, and their interval would read as a measured r of 0."""
    if value is None or value != value:
        return "–"
    return f"{_num(value)} {_ci(ci, _num)}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


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


def streams_sentence(result: Mapping[str, Any]) -> str:
    """One line on the unit of evidence: streams per arm, the intra-stream correlation and the design effect."""
    st = result.get("streams") or {}
    if not st:
        return ""
    icc = st.get("icc")
    if icc:
        lo, hi = icc["ci"]
        dlo, dhi = icc["deff_ci"]
        per = st["streams_per_cell"]
        n = f"{per['min']}" if per["min"] == per["max"] else f"{per['min']}-{per['max']}"
        return (f"Streams: {n} per arm, {st.get('baseline_streams')} baseline stream(s), "
                f"{icc['games_per_stream']:.0f} games per stream. Intra-stream correlation "
                f"{icc['estimate']:.3f} [{lo:.3f}, {hi:.3f}]; design effect {icc['deff']:.2f} [{dlo:.2f}, {dhi:.2f}] "
                "(every test is against the variance between streams)." + blocks_sentence(st))
    return f"Streams: {st.get('note') or st.get('mode')}."


def blocks_sentence(st: Mapping[str, Any]) -> str:
    """Crossed streams (one plan per stream shared by every arm): how much of the between-stream variance is the
    stream's block, shared by all checkpoints of a run, and what the analysis did with it."""
    b = st.get("blocks")
    if not b:
        return f" Streams analysed as nested replicates ({st['design_why']})." if st.get("design_why") else ""
    lo, hi = b["ci"]
    used = ("contrasts between checkpoints, the interaction, the band and r are tested against the blocked error; "
            "a lift over the baseline keeps the nested one" if b.get("used") else
            f"not used: {st.get('design_why') or 'nested analysis'}")
    return (f" Streams are crossed blocks: {100 * b['share']:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}] of the "
            f"between-stream variance is shared by all checkpoints of a run; error SD {100 * b['sd_nested']:.1f} pp "
            f"nested ({b['df_nested']} df), {100 * b['sd_blocked']:.1f} pp after the stream blocks ({b['df_blocked']} "
            f"df); {used}.")


def _streams_section(result: Mapping[str, Any], h: str) -> list[str]:
    line = streams_sentence(result)
    if not line:
        return []
    return [f"{h} Streams (the unit of evidence)", "", line, ""] + _stream_table(result)


def _stream_table(result: Mapping[str, Any]) -> list[str]:
    """Each (run, checkpoint) cell's streams: per-stream success rate, their mean, SD and range (``stream_arms``)."""
    cells: dict[str, dict[int, float]] = {}
    for a in result.get("stream_arms") or []:
        if a.get("success_rate") is not None and a.get("role") == "checkpoint":
            cells.setdefault(f"{a['run']}@{a['checkpoint']}", {})[int(a.get("stream") or 0)] = a["success_rate"]
    if not any(len(v) > 1 for v in cells.values()):
        return []
    width = max(max(v) for v in cells.values()) + 1
    rows = []
    for cell, rates in cells.items():
        vals = list(rates.values())
        mean = sum(vals) / len(vals)
        sd = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else None
        rows.append([f"`{cell}`"] + [_pct(rates.get(r)) for r in range(width)]
                    + [_pct(mean), _pct(sd), "–" if len(vals) < 2 else _pct(max(vals) - min(vals))])
    return [_table(["cell"] + [f"stream {r} %" for r in range(width)]
                   + ["mean %", "SD across streams (pp)", "range (pp)"], rows), ""]


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
    return lines + [""]


def _runs_section(result: Mapping[str, Any], h: str) -> list[str]:
    runs = result.get("runs") or {}
    if not runs:
        return []
    rows = []
    for run, c in sorted(runs.items()):
        if not c.get("checkpoints"):
            rows.append([run] + ["–"] * 10)
            continue
        q = c.get("cochran_q")
        tt = c.get("test_retest")
        fvp = c.get("final_vs_peak") or {}
        if fvp.get("estimate") is not None:
            fvp_txt = f"{_pp(fvp['estimate'])} {_ci(fvp.get('ci'))}"
        elif fvp:
            fvp_txt = f"best − final ≥ {_pp(fvp.get('best_minus_final_lower'))}, p {_p(fvp.get('p_value'))}"
        else:
            fvp_txt = "–"
        rows.append([
            run, str(len(c["checkpoints"])), f"{c['peak_checkpoint']} ({_pp(c['peak_lift'])} pp)",
            f"{100 * c['peak_share']:.0f}%", str(c["crossings"]), _pp(c["final_minus_peak"]),
            fvp_txt + (" **below peak**" if fvp.get("below_peak") else ""),
            ("–" if c.get("trend_per_step") is None else
             f"{100 * c['trend_per_step'] * 10:+.2f} {_ci([None if v is None else v * 10 for v in (c.get('trend_ci') or [None, None])])}"),
            (f"F={_num(c['checkpoint_effect']['statistic'], 1)}, df {c['checkpoint_effect']['df']}, "
             f"{c['checkpoint_effect']['df2']}, p {_p(c['checkpoint_effect']['p_value'])}" if c.get("checkpoint_effect")
             else "–" if not q else f"Q={q['statistic']:.1f}, df {q['df']}, p {_p(q['p_value'])}"),
            _num(c.get("reliability")), "–" if not tt else f"{_num(tt['r'])} {_ci(tt['ci'], _num)}",
        ])
    return [f"{h} Runs (curves over checkpoints)", "",
            _table(["run", "ckpts", "peak (lift)", "peak share", "crossings", "final − peak in-sample (pp)",
                    "final vs peak, honest (pp)", "trend (pp / 10 steps)", "checkpoint effect", "reliability",
                    "test-retest r"], rows),
            "", "Peak share: fraction of bootstrap resamples in which the peak checkpoint is the argmax. Crossings: "
            "strict sign changes of the lift. Final − peak in-sample is biased low (the peak is the max of noisy "
            "lifts); the honest column picks the peak on half the games and measures it on the other half (per-game "
            "input) or compares the final with every other checkpoint simultaneously (summaries). Reliability: share "
            "of between-checkpoint variance of the curve that is not shape noise (noise shared by every checkpoint "
            "cancels in a shape and is not counted). Checkpoint effect: one-way F of the stream lifts against the "
            "between-stream variance (streams), or Cochran's Q over games (one stream, conditional on it).", ""]


def _families_section(result: Mapping[str, Any], h: str) -> list[str]:
    fams = result.get("families") or {}
    if not fams:
        return []
    alpha = result["settings"]["alpha"]
    rows = [[name, str(f["size"]), f"{f['alpha_per_arm']:.2g}", ", ".join(f["significant_holm"]) or "none",
             ", ".join(f["significant_bonferroni"]) or "none"] for name, f in sorted(fams.items())]
    return [f"{h} Multiplicity families", "",
            _table(["family", "size", "per-arm level (alpha / size)", f"Holm < {alpha}", f"Bonferroni < {alpha}"], rows),
            ""]


def _arms_section(result: Mapping[str, Any], h: str) -> list[str]:
    arms = result.get("arms") or []
    if not arms:
        return []
    s = result["settings"]
    rows = []
    for a in arms:
        rows.append([
            f"`{a['arm']}`" + (" ⚠" if a.get("flagged") else ""), a.get("family") or "–", str(a["n_measured"]),
            "–" if a.get("n_unmeasured") is None else str(a["n_unmeasured"]),
            _pct(a.get("success_rate")), f"{_pp(a['lift'])} {_ci(a.get('lift_ci'))}",
            "–" if a.get("b") is None else f"{a['b']}/{a['c']}", _p(a.get("p_value")), _p(a.get("p_holm")),
            _p(a.get("p_bh")), _p(a.get("p_bonferroni")), _pct(a.get("mde")),
        ])
    tests = sorted({a.get("test", "") for a in arms})
    cis = sorted({a.get("ci_method", "") for a in arms})
    mdes = sorted({a.get("mde_method", "") for a in arms})
    return [f"{h} Arms vs baseline", "",
            _table(["arm", "family", "measured", "unmeasured", "success %", "lift pp [CI]", "b/c", "p", "Holm", "BH",
                    "Bonferroni", "MDE pp"], rows),
            "", f"Tests: {'; '.join(tests)}. CIs: {'; '.join(cis)}. MDE: smallest lift detectable with "
            f"{100 * s['power']:.0f}% power ({'; '.join(mdes)}). Adjusted p-values are computed within each family; "
            "the hypotheses are (run, checkpoint) cells; a cell's streams are in `stream_arms` of compare.json.", ""]


def render_comparison(result: Mapping[str, Any], figures: Mapping[str, str], title: str | None = None,
                      level: int = 1, after_verdicts: Sequence[str] = ()) -> str:
    """One sweep's (or one summary's) report text. `figures` maps a caption to a PNG path relative to the report;
    `after_verdicts`: lines placed after the verdicts (the per-look section of a sweep played until decided)."""
    s = result["settings"]
    base = result["baseline"]
    h = "#" * (level + 1)
    lines: list[str] = [f"{'#' * level} {title or 'twinrun comparison'}", ""]
    src = ("per-game arms of one sweep" if result["source"] == "per-game"
           else f"published per-checkpoint summaries ({result.get('summary_file', '')})")
    fam_sizes = ", ".join(f"{n}: {f['size']}" for n, f in sorted((result.get("families") or {}).items()))
    lines += [
        f"Source: {src}." + (f" Sweep `{result['sweep_id']}`, game list `{result['games_hash']}`, "
                              f"{result['n_games']} games." if result.get("sweep_id") else "")
        + (f" Executor `{result['executor']}`." if result.get("executor") else ""),
        f"Settings: alpha {s['alpha']}, power {s['power']}, CI level {s['level']}, {s['n_boot']} bootstrap resamples "
        f"(seed {s['seed']}), rho0 {s.get('rho0')}, equivalence margin ±{100 * s.get('delta', 0):g} pp, "
        f"multiplicity families: {_family_rule(s)} (sizes: {fam_sizes or '–'}), "
        f"unmeasured flag above {100 * s['max_unmeasured_share']:.0f}%.",
        "",
        f"Baseline `{base['arm']}`{' (same sweep)' if result['source'] == 'per-game' else ''}: success rate "
        f"{_pct(base['success_rate'])}% {_ci(base.get('ci'), _pct)}, {base['n_measured']} measured games"
        + (f", {base['n_unmeasured']} unmeasured (excluded)" if base.get("n_unmeasured") else "") + ".",
        "",
    ]
    lines += _streams_section(result, h)
    lines += _verdict_section(result, h)
    lines += list(after_verdicts)
    lines += _frameworks_section(result, h)
    if figures:
        lines += [f"{h} Figures", ""]
        for caption, rel in figures.items():
            lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    lines += _runs_section(result, h) + _families_section(result, h) + _arms_section(result, h)
    if result.get("flags"):
        lines += [f"{h} Flags", ""] + [f"- ⚠ {f}" for f in result["flags"]] + [""]
    if result.get("skipped"):
        lines += [f"{h} Statistics skipped or approximated", ""] + [f"- {x}" for x in result["skipped"]] + [""]
    return "\n".join(lines)


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
    notes = []
    for p in inputs:
        manifest = Path(p) / "sweep.json"
        if not manifest.is_file():
            continue
        plan = json.loads(manifest.read_text(encoding="utf-8"))
        dtype = plan.get("curator_dtype")
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
                 notes: Sequence[str] = (), sequential: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> Path:
    """Write `out_dir/report.md`, `out_dir/compare.json` and the figures under `out_dir/figures/`.

    result: a `compare` result dict or the path of a compare.json; metrics: label -> a run's metrics.jsonl for
    the training-dynamics figure (omitted when None or empty); notes: paragraphs shown under the title (e.g. what
    a stand-in executor's numbers mean); sequential: (sweep folder, sweep.json's `sequential`) of sweeps played
    with --until-decided, each shown as a per-look table after the verdicts. Returns the report path.
    """
    from twinrun.core.compare import plots

    if isinstance(result, (str, Path)):
        result = json.loads(Path(result).read_text(encoding="utf-8"))
    out = Path(out_dir)
    figdir = out / "figures"
    present = {k: v for k, v in (metrics or {}).items() if Path(v).exists()}
    if result.get("kind") == "transfer":
        figures = {}
        plots.plot_transfer(result, figdir / "transfer.png")
        figures[f"Lift per checkpoint on one {result['axis']} against the other"] = "figures/transfer.png"
        sweep_figs = {}
        for i, sw in enumerate(result["sweeps"]):
            sweep_figs[sw["executor"]] = _comparison_figures(sw, figdir, "figures", prefix=f"sweep{i}-")
        text = render_transfer(result, figures, sweep_figs, title)
    else:
        figures = _comparison_figures(result, figdir, "figures")
        if present:
            plots.plot_training_dynamics(present, figdir / "training_dynamics.png")
            figures["Training dynamics of each run (metrics.jsonl)"] = "figures/training_dynamics.png"
        from twinrun.core.compare.looks_report import looks_section

        h = "##"
        extra = [x for folder, seq in sequential for x in looks_section(seq, h, folder if len(sequential) > 1 else None)]
        text = render_comparison(result, figures, title, after_verdicts=extra)
    if notes:
        head, _, rest = text.partition("\n\n")
        text = "\n\n".join([head, *notes, rest])
    atomic_write_json(out / "compare.json", dict(result))
    path = out / "report.md"
    atomic_write_text(path, text + "\n")
    return path


# ------------------------------------------------------------------------------------------------------------
# Console


def print_console(result: Mapping[str, Any], report_path: Path | None = None) -> None:
    """The comparison on a terminal (rich): arms, runs, verdicts with their reasons, frameworks, flags."""
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
        console.print(f"report: {report_path}")


def _print_comparison(console: Any, result: Mapping[str, Any]) -> None:
    from rich.table import Table

    base = result["baseline"]
    console.print(f"[bold]baseline[/] {base['arm']}: {100 * base['success_rate']:.1f}% over {base['n_measured']} "
                  f"measured games" + (f", {base['n_unmeasured']} unmeasured" if base.get("n_unmeasured") else ""))
    if streams_sentence(result):
        console.print(streams_sentence(result))
    t = Table(title="arms vs baseline")
    for col in ("arm", "family (size)", "n", "unmeas.", "lift pp [CI]", "b/c", "p", "Holm", "BH", "MDE pp"):
        t.add_column(col)

    def f(v: float | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
        return "–" if v is None else fmt.format(scale * v)

    for a in result["arms"]:
        ci = a["lift_ci"]
        t.add_row(a["arm"] + (" [yellow]⚠[/]" if a.get("flagged") else ""),
                  "–" if not a.get("family") else f"{a['family']} ({a.get('family_size')})", str(a["n_measured"]),
                  "–" if a["n_unmeasured"] is None else str(a["n_unmeasured"]),
                  f"{f(a['lift'], 100, '{:+.1f}')} [{f(ci[0], 100, '{:+.1f}')}, {f(ci[1], 100, '{:+.1f}')}]",
                  "–" if a["b"] is None else f"{a['b']}/{a['c']}", f(a["p_value"]), f(a["p_holm"]), f(a["p_bh"]),
                  f(a["mde"], 100, "{:.1f}"))
    console.print(t)
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
    if result.get("pairs"):
        console.print(f"[dim]criterion:[/] {result['pairs'][0]['criterion']}")
    for p in result["pairs"]:
        console.print(f"[bold]{p['a']} vs {p['b']}: {p['verdict']}[/]\n  {p['explanation']}")
    fw = result.get("frameworks") or {}
    if fw.get("note"):
        console.print(f"[yellow]frameworks:[/] {fw['note']}")
    for c in fw.get("comparisons") or []:
        if c.get("verdict"):
            console.print(f"[bold]framework {c['a']} vs {c['b']}: {c['verdict']}[/]\n  {c['explanation']}")
    for fl in result["flags"]:
        console.print(f"[yellow]flag:[/] {fl}")
    for s in result["skipped"]:
        console.print(f"[dim]skipped:[/] {s}")
