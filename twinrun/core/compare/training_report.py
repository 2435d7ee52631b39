"""The training block (compare.json's "training") on paper: a report section, its figure, console lines, and the
report of `compare --training` run on its own (docs/compare.md, "Training curves")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.compare.training import DIFFER

MAX_FIGURES = 4
FIGURE = "Training curves per metric: each group's seeds (band: lowest to highest seed) and mean, the first window where the curves part marked"


def _steps(w: Sequence[int]) -> str:
    return f"step {w[0]}" if w[0] == w[1] else f"steps {w[0]}-{w[1]}"


def _g(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}"


def comparison_sentence(c: Mapping[str, Any]) -> str:
    """What one pair of groups' training curves say, in one sentence (the answer first)."""
    n = len(c["metrics"])
    if c.get("note"):
        return f"**{c['a']} vs {c['b']}:** no verdict: {c['note']}."
    lead = f"**{c['a']} vs {c['b']}** ({c['design']} seeds, {len(c['steps'])} steps shared, {len(c['windows'])} windows): "
    if c["differ"]:
        parts = []
        for m in c["differ"]:
            r = c["metrics"][m]
            lv = r["level"]
            parts.append(f"{m} (mean difference {_g(lv['estimate'])} [{_g(lv['ci'][0])}, {_g(lv['ci'][1])}], parting "
                         f"from {_steps(r['first_window_steps'])})" if r.get("first_window_steps") else f"{m}")
        return lead + f"differ on {len(c['differ'])} of {n} compared metrics: " + "; ".join(parts) + "."
    return lead + f"not shown to differ on any of {n} compared metrics (family-wise alpha)."


def training_section(result: Mapping[str, Any], h: str = "##") -> list[str]:
    """The report's section on the runs' training curves (empty when the result has no training block)."""
    t = result.get("training")
    if not t:
        return []
    lines = [f"{h} Training curves", ""]
    if not t["comparisons"]:
        return lines + [f"- {n}" for n in t["notes"]] + [""]
    lines += [comparison_sentence(c) for c in t["comparisons"]] + [""]
    lines += [(f"Each metric's step curve is averaged into at most {t['n_windows']} windows and tested on its own "
               f"units (level and shape, within seed where seeds pair); {t['correction']}; alpha {t['alpha']}. "
               "'first parting': the first window at which the windows so far would have said differ."), ""]
    for c in t["comparisons"]:
        rows = []
        for m, r in c["metrics"].items():
            if r["level"] is None:  # no verdict (c["note"] says why): the curves are in the figure only
                continue
            lv, sh = r["level"], r.get("shape") or {}
            diff = f"{_g(lv['estimate'])} [{_g(lv['ci'][0])}, {_g(lv['ci'][1])}]"
            rows.append([f"`{m}`", r["family"], r["verdict"] or "–", diff, _g(lv.get("p_value")), _g(sh.get("p_value")), _g(r["p_value"]),
                         _g(r.get("p_holm")), _steps(r["first_window_steps"]) if r.get("first_window_steps") else "–"])
        lines += [(f"**{c['a']} ({', '.join(c['runs_a'])}) vs {c['b']} ({', '.join(c['runs_b'])})**: "
                   f"{c['design']} seeds ({c['design_why']})."), ""]
        if rows:
            lines += [("| metric | family | verdict | mean difference a - b [CI] | p level | p shape | p | p Holm "
                       "(weighted) | first parting |"), "|---|---|---|---|---|---|---|---|---|"]
            lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        for m, reason in c["not_comparable"].items():
            lines.append(f"- `{m}` not comparable: {reason}.")
        for m, reason in c["not_recorded"].items():
            lines.append(f"- `{m}` not compared: {reason}.")
        if c["constant"]:
            lines.append("- the same value in every run and window (nothing to test): "
                         + ", ".join(f"`{m}` = {v:g}" for m, v in c["constant"].items()) + ".")
        lines.append("")
    lines += [f"- {n}" for n in t["notes"]]
    return lines + ([""] if t["notes"] else [])


def plot_training_curves(block: Mapping[str, Any], path: str | Path, index: int = 0) -> Path:
    """Per compared metric of one pair of groups (the index-th with metrics): each group's seeds as a min-max band
    around their mean window curve, and the first parting as a vertical line."""
    import numpy as np

    from twinrun.core.compare.plots import _STYLES, _figure, _save, _save_empty

    comps = [c for c in block.get("comparisons", []) if c["metrics"]]
    fig = _figure(11.0, 3.0)
    if not comps:
        return _save_empty(fig, "no training metric compared", path)
    c = comps[index]
    names = list(c["metrics"])
    cols = min(4, len(names))
    nrows = -(-len(names) // cols)
    fig = _figure(3.0 * cols + 0.5, 2.4 * nrows + 0.7)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    x = np.array([(w[0] + w[1]) / 2 for w in c["windows"]])
    for ax, m in zip(axes, names):
        r = c["metrics"][m]
        for i, (g, key) in enumerate(((c["a"], "curves_a"), (c["b"], "curves_b"))):
            color, marker, ls = _STYLES[i]
            y = np.asarray(r[key], dtype=float)
            if y.shape[0] > 1:
                ax.fill_between(x, y.min(axis=0), y.max(axis=0), color=color, alpha=0.18, lw=0)
            ax.plot(x, y.mean(axis=0), color=color, marker=marker, ls=ls, ms=3, lw=1.3, label=f"{g} ({y.shape[0]})")
        if r.get("first_window_steps"):
            w = r["first_window_steps"]
            ax.axvline((w[0] + w[1]) / 2, color="black", lw=1, ls=":")
            ax.text((w[0] + w[1]) / 2, ax.get_ylim()[1], " parts", fontsize=7, va="top")
        ax.set_title(f"{m}: {r['verdict'] or 'no verdict'}"
                     + (f" (p {r['p_holm']:.2g})" if r.get("p_holm") is not None else ""),
                     fontsize=8, fontweight="bold" if r["verdict"] == DIFFER else "normal")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(names):]:
        ax.set_axis_off()
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{c['a']} vs {c['b']}: training curves by window (x = training step), {c['design']} seeds",
                 fontsize=10)
    return _save(fig, path)


def with_training(result: Mapping[str, Any], metrics: Mapping[str, str | Path]) -> Mapping[str, Any]:
    """The result with a "training" block from the runs' metrics files, where it has none yet (a report written
    from `compare()` directly, as `twinrun run` does); unchanged when none of the files exists."""
    from twinrun.core.compare.training_runs import block_from_metrics

    if result.get("training") or not metrics or result.get("kind") == "transfer":
        return result
    settings = result.get("settings") or {}
    block = block_from_metrics(dict(metrics), alpha=settings.get("alpha", 0.05), level=settings.get("level", 0.95),
                               seed_design=settings.get("seed_design", "auto"))
    return {**result, "training": block} if block else result


def training_figures(result: Mapping[str, Any], figdir: Path, rel: str = "figures") -> dict[str, str]:
    """caption -> relative path of the training-curves figure (none without a compared metric)."""
    t = result.get("training")
    comps = [c for c in (t or {}).get("comparisons", []) if c["metrics"]]
    out = {}
    for i, c in enumerate(comps[:MAX_FIGURES]):  # one figure per pair of groups (the first few)
        name = "training_curves.png" if i == 0 else f"training_curves-{i + 1}.png"
        plot_training_curves(t, figdir / name, index=i)
        out[f"{FIGURE} ({c['a']} vs {c['b']})"] = f"{rel}/{name}"
    return out


def console_lines(block: Mapping[str, Any]) -> list[str]:
    """The training verdicts as plain lines (the answer first, then what was not compared)."""
    out = [comparison_sentence(c).replace("**", "") for c in block["comparisons"]]
    for c in block["comparisons"]:
        if c["not_comparable"]:
            out.append(f"  not comparable ({c['a']} vs {c['b']}): " + "; ".join(
                f"{m}: {why}" for m, why in c["not_comparable"].items()))
    return out + [f"note: {n}" for n in block["notes"]]


def write_training_report(block: Mapping[str, Any], out_dir: str | Path, title: str | None = None) -> Path:
    """`compare --training --out DIR` with no checkpoint arms: compare.json ({"kind": "training", "training": ...}),
    report.md with the section and figures/training_curves.png. Returns the report path."""
    from twinrun.core.records import atomic_write_json, atomic_write_text

    out = Path(out_dir)
    result = {"kind": "training", "training": dict(block)}
    figures = training_figures(result, out / "figures")
    lines = [f"# {title or 'twinrun training curves'}", ""] + training_section(result, "##")
    for caption, rel in figures.items():
        lines += [f"![{caption}]({rel})", "", f"*{caption}*", ""]
    atomic_write_json(out / "compare.json", result)
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
