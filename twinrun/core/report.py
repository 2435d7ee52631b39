"""report.md: the comparison's tables, verdicts with their criteria, flags, skipped statistics and figures.

:func:`write_report` takes the dict that :func:`twinrun.core.compare.compare` returns (or the `compare.json` it
wrote), draws the PNGs next to the report and writes `report.md` and `compare.json` atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(result: Mapping[str, Any], figures: Mapping[str, str], title: str | None = None) -> str:
    """The report text. `figures` maps a caption to a PNG path relative to the report."""
    s = result["settings"]
    base = result["baseline"]
    lines: list[str] = [f"# {title or 'twinrun comparison'}", ""]
    src = ("per-game arms of one sweep" if result["source"] == "per-game"
           else f"published per-checkpoint summaries ({result.get('summary_file', '')})")
    lines += [
        f"Source: {src}." + (f" Sweep `{result['sweep_id']}`, game list `{result['games_hash']}`, "
                              f"{result['n_games']} games." if result.get("sweep_id") else ""),
        f"Settings: alpha {s['alpha']}, power {s['power']}, CI level {s['level']}, {s['n_boot']} bootstrap resamples "
        f"(seed {s['seed']}), multiplicity families: {'one per run' if s['family'] == 'run' else 'all arms together'}, "
        f"unmeasured flag above {100 * s['max_unmeasured_share']:.0f}%.",
        "",
        f"Baseline `{base['arm']}`{' (same sweep)' if result['source'] == 'per-game' else ''}: success rate {_pct(base['success_rate'])}% "
        f"{_ci(base.get('ci'), _pct)}, {base['n_measured']} measured games"
        + (f", {base['n_unmeasured']} unmeasured (excluded)" if base.get("n_unmeasured") else "") + ".",
        "",
    ]
    pairs = result.get("pairs") or []
    if pairs:
        lines += ["## Verdicts", ""]
        lines.append(_table(
            ["runs", "checkpoints", "Pearson r [CI]", "Spearman [CI]", "ceiling (test-retest / sampling)",
             "interaction p", "verdict"],
            [[f"{p['a']} vs {p['b']}", str(p["n_checkpoints"]),
              f"{_num(p['pearson'])} {_ci(p['pearson_ci'], _num)}", f"{_num(p['spearman'])} {_ci(p['spearman_ci'], _num)}",
              f"{_num(p.get('ceiling_test_retest'))} / {_num(p.get('ceiling_sampling'))}",
              _p((p.get("interaction") or {}).get("p_value")), f"**{p['verdict']}**"] for p in pairs]))
        lines.append("")
        for p in pairs:
            inter = p.get("interaction") or {}
            lines.append(f"- **{p['a']} vs {p['b']}: {p['verdict']}.** {p['criterion']} "
                         f"Interaction test: {inter.get('method', '–')}"
                         + (f" ({inter['note']})" if inter.get("note") else "") + f". Bootstrap: {p.get('bootstrap', '')}.")
        lines.append("")
    if figures:
        lines += ["## Figures", ""]
        for caption, rel in figures.items():
            lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    runs = result.get("runs") or {}
    if runs:
        lines += ["## Runs (curves over checkpoints)", ""]
        rows = []
        for run, c in sorted(runs.items()):
            if not c.get("checkpoints"):
                rows.append([run] + ["–"] * 9)
                continue
            q = c.get("cochran_q")
            tt = c.get("test_retest")
            rows.append([
                run, str(len(c["checkpoints"])), f"{c['peak_checkpoint']} ({_pp(c['peak_lift'])} pp)",
                f"{100 * c['peak_share']:.0f}%", str(c["crossings"]),
                f"{_pp(c['final_minus_peak'])} {_ci(c.get('final_minus_peak_ci'))}",
                ("–" if c.get("trend_per_step") is None else
                 f"{100 * c['trend_per_step'] * 10:+.2f} {_ci([None if v is None else v * 10 for v in (c.get('trend_ci') or [None, None])])}"),
                "–" if not q else f"Q={q['statistic']:.1f}, df {q['df']}, p {_p(q['p_value'])}",
                _num(c.get("reliability")), "–" if not tt else f"{tt['r']:.2f} {_ci(tt['ci'], _num)}",
            ])
        lines.append(_table(["run", "ckpts", "peak (lift)", "peak share", "crossings", "final − peak (pp)",
                             "trend (pp / 10 steps)", "Cochran's Q", "reliability", "test-retest r"], rows))
        lines += ["", "Peak share: fraction of bootstrap resamples in which the peak checkpoint is the argmax. "
                  "Crossings: strict sign changes of the lift. Reliability: share of between-checkpoint variance "
                  "of the curve that is not sampling noise.", ""]
    arms = result.get("arms") or []
    if arms:
        lines += ["## Arms vs baseline", ""]
        rows = []
        for a in arms:
            rows.append([
                f"`{a['arm']}`" + (" ⚠" if a.get("flagged") else ""), str(a["n_measured"]),
                "–" if a.get("n_unmeasured") is None else str(a["n_unmeasured"]),
                _pct(a.get("success_rate")), f"{_pp(a['lift'])} {_ci(a.get('lift_ci'))}",
                "–" if a.get("b") is None else f"{a['b']}/{a['c']}", _p(a.get("p_value")), _p(a.get("p_holm")),
                _p(a.get("p_bh")), _p(a.get("p_bonferroni")), _pct(a.get("mde")),
            ])
        lines.append(_table(["arm", "measured", "unmeasured", "success %", "lift pp [CI]", "b/c", "p", "Holm", "BH",
                             "Bonferroni", "MDE pp"], rows))
        tests = sorted({a.get("test", "") for a in arms})
        cis = sorted({a.get("ci_method", "") for a in arms})
        lines += ["", f"Tests: {'; '.join(tests)}. CIs: {'; '.join(cis)}. MDE: smallest lift detectable at "
                  f"{100 * s['power']:.0f}% power. Adjusted p-values are computed within each family; replicate "
                  "arms belong to no family.", ""]
    if result.get("flags"):
        lines += ["## Flags", ""] + [f"- ⚠ {f}" for f in result["flags"]] + [""]
    if result.get("skipped"):
        lines += ["## Statistics skipped or approximated", ""] + [f"- {x}" for x in result["skipped"]] + [""]
    return "\n".join(lines)


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


def write_report(result: Mapping[str, Any] | str | Path, out_dir: str | Path, *,
                 metrics: Mapping[str, str | Path] | None = None, title: str | None = None) -> Path:
    """Write `out_dir/report.md`, `out_dir/compare.json` and the figures under `out_dir/figures/`.

    result: a `compare` result dict or the path of a compare.json; metrics: label -> a run's metrics.jsonl for
    the training-dynamics figure (omitted when None or empty). Returns the report path.
    """
    from twinrun.core import plots

    if isinstance(result, (str, Path)):
        result = json.loads(Path(result).read_text(encoding="utf-8"))
    out = Path(out_dir)
    figdir = out / "figures"
    figures: dict[str, str] = {}
    plots.plot_lift_curves(result, figdir / "lift_curves.png")
    figures["Lift over the same-sweep baseline per checkpoint"] = "figures/lift_curves.png"
    if any(c.get("argmax_distribution") for c in result.get("runs", {}).values()):
        plots.plot_peak_distribution(result, figdir / "peak_distribution.png")
        figures["Bootstrap distribution of each run's peak checkpoint"] = "figures/peak_distribution.png"
    present = {k: v for k, v in (metrics or {}).items() if Path(v).exists()}
    if present:
        plots.plot_training_dynamics(present, figdir / "training_dynamics.png")
        figures["Training dynamics of each run (metrics.jsonl)"] = "figures/training_dynamics.png"
    atomic_write_json(out / "compare.json", dict(result))
    path = out / "report.md"
    atomic_write_text(path, render_markdown(result, figures, title) + "\n")
    return path
