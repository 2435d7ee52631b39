"""Figures for a comparison and for training runs (PNG, matplotlib's Agg canvas; no pyplot global state).

- :func:`plot_lift_curves`: every run's lift over the same-sweep baseline per checkpoint, with its bootstrap
  band, the baseline's own uncertainty as a grey band around 0, and significance markers (filled: significant
  after Holm within its family; hollow: nominal p < alpha only).
- :func:`plot_peak_distribution`: the bootstrap distribution of each run's peak checkpoint.
- :func:`plot_framework_curves`: per pair of frameworks, every run's lift coloured by framework with each
  framework's mean curve, beside the difference of the centred mean curves with its pointwise 90% band and the
  equivalence margin: what the framework verdict decides on.
- :func:`plot_transfer`: lift per checkpoint on one executor against the other (a comparison across executors).
- :func:`plot_training_dynamics`: reward terms, entropy, KL, grad norm, positions measured and executor calls
  per step, from each run's `metrics.jsonl` (one line per run/backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

# distinguishable in greyscale print as well (marker + line style vary with colour)
_STYLES = [("tab:blue", "o", "-"), ("tab:orange", "s", "--"), ("tab:green", "^", "-."), ("tab:red", "D", ":"),
           ("tab:purple", "v", "-"), ("tab:brown", "P", "--"), ("tab:pink", "X", "-."), ("tab:gray", "*", ":")]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path) -> Path:
    """Write the PNG atomically (temp name + rename), so a report never links a half-written figure."""
    import os

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp.{os.getpid()}")
    fig.savefig(tmp, format="png")
    os.replace(tmp, p)
    return p


def _save_empty(fig: Any, message: str, path: str | Path) -> Path:
    """A figure with nothing to draw still gets written (a report links it), saying why it is empty."""
    ax = fig.add_subplot(1, 1, 1)
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_axis_off()
    return _save(fig, path)


def plot_lift_curves(result: Mapping[str, Any], path: str | Path) -> Path:
    """Overlaid lift curves (percentage points) of every run in a `compare` result; returns the PNG path."""
    fig = _figure(8.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    alpha = result["settings"]["alpha"]
    base = result["baseline"]
    rate = base.get("success_rate")
    lo, hi = (base.get("ci") or [None, None])
    if rate is not None and lo is not None and hi is not None:
        ax.axhspan(100 * (lo - rate), 100 * (hi - rate), color="0.85", zorder=0,
                   label=f"baseline {100 * rate:.1f}% ({100 * lo:.1f}-{100 * hi:.1f}), its CI around 0")
    ax.axhline(0.0, color="0.4", lw=0.8, zorder=1)
    p_by_arm = {a["arm"]: a for a in result["arms"]}
    for i, (run, cur) in enumerate(sorted(result["runs"].items())):
        if not cur.get("checkpoints"):
            continue
        color, marker, ls = _STYLES[i % len(_STYLES)]
        x = cur["checkpoints"]
        y = [100 * v for v in cur["lifts"]]
        band = cur.get("lift_ci") or []
        if band and all(b[0] is not None and b[1] is not None for b in band):
            ax.fill_between(x, [100 * b[0] for b in band], [100 * b[1] for b in band], color=color, alpha=0.15, lw=0)
        ax.plot(x, y, color=color, ls=ls, lw=1.6, label=f"{run} (peak {cur['peak_checkpoint']})")
        for xi, yi, arm in zip(x, y, cur["arms"]):
            row = p_by_arm.get(arm, {})
            holm = row.get("p_holm")
            p = row.get("p_value")
            if holm is not None and holm < alpha:
                ax.plot([xi], [yi], marker=marker, ms=8, color=color, mec="black", zorder=4)
            elif p is not None and p < alpha:
                ax.plot([xi], [yi], marker=marker, ms=8, mfc="white", color=color, zorder=4)
            else:
                ax.plot([xi], [yi], marker=marker, ms=4, color=color, zorder=3)
    steps = sorted({int(x) for cur in result["runs"].values() for x in cur.get("checkpoints") or []})
    if steps:
        ax.set_xticks(steps)  # the checkpoint steps themselves, never fractional steps
    ax.set_xlabel("checkpoint (training step)")
    ax.set_ylabel("lift over baseline (percentage points)")
    src = "per-game arms" if result.get("source") == "per-game" else "published summaries"
    level = int(round(100 * result["settings"]["level"]))
    ax.set_title(f"Held-out lift per checkpoint ({src}; bands: {level}% bootstrap CI)\n"
                 f"filled marker: Holm p < {alpha}; hollow: nominal p < {alpha} only", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_peak_distribution(result: Mapping[str, Any], path: str | Path) -> Path:
    """Bars: share of bootstrap resamples in which each checkpoint is the run's peak."""
    runs = [(r, c) for r, c in sorted(result["runs"].items()) if c.get("argmax_distribution")]
    fig = _figure(8.0, 1.0 + 1.6 * max(len(runs), 1))
    if not runs:
        return _save_empty(fig, "no run with checkpoints", path)
    axes = fig.subplots(len(runs), 1, squeeze=False)[:, 0]
    for i, (ax, (run, cur)) in enumerate(zip(axes, runs)):
        color = _STYLES[i % len(_STYLES)][0]
        dist = cur["argmax_distribution"]
        xs = [int(k) for k in dist]
        width = 0.8 * (min(b - a for a, b in zip(xs, xs[1:])) if len(xs) > 1 else 1)
        ax.bar(xs, list(dist.values()), width=width, color=color)
        ax.set_xticks(xs)
        ax.set_ylim(0, 1)
        ax.set_ylabel(run, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_title("Bootstrap distribution of the peak checkpoint (share of resamples)", fontsize=9)
    axes[-1].set_xlabel("checkpoint (training step)")
    return _save(fig, path)


def framework_comparisons(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The framework comparisons of a compare result that have curves to draw (>= 2 seeds in both frameworks)."""
    return [c for c in (result.get("frameworks") or {}).get("comparisons", []) if c.get("checkpoints")]


def plot_framework_curves(result: Mapping[str, Any], path: str | Path) -> Path:
    """One row per pair of frameworks: left, every run's lift (thin, coloured by framework) and each framework's
    mean curve (thick); right, the difference of the two centred mean curves (a - b: the shape, level removed) with
    its pointwise 90% band and the +-delta margin the equivalence test asks it to stay inside. The title carries the
    verdict and the framework x checkpoint test."""
    comps = framework_comparisons(result)
    fig = _figure(11.0, 1.0 + 3.6 * max(len(comps), 1))
    if not comps:
        return _save_empty(fig, "no pair of frameworks with >= 2 seeds each", path)
    axes = fig.subplots(len(comps), 2, squeeze=False)
    for (left, right), c in zip(axes, comps):
        steps = c["checkpoints"]
        members = {g: {m["run"] for m in (result["frameworks"].get("groups") or {}).get(g, [])} for g in (c["a"], c["b"])}
        for (fw, mean), (color, marker, ls) in zip(((c["a"], c["mean_curve_a"]), (c["b"], c["mean_curve_b"])),
                                                  _STYLES):
            for run in sorted(members[fw]):
                cur = result["runs"].get(run) or {}
                at = dict(zip(cur.get("checkpoints") or [], cur.get("lifts") or []))
                left.plot(steps, [100 * at[s] if at.get(s) is not None else float("nan") for s in steps],
                          color=color, ls=ls, lw=0.8, alpha=0.45)
            left.plot(steps, [100 * v for v in mean], color=color, ls=ls, lw=2.4, marker=marker, ms=5,
                      label=f"{fw}: mean of {len(members[fw])} seed(s)")
        left.axhline(0.0, color="0.4", lw=0.8)
        left.set_ylabel("lift over baseline (pp)")
        left.legend(fontsize=7, loc="best")
        eq = c.get("equivalence") or {}
        if eq.get("difference"):
            diff = [100 * v for v in eq["difference"]]
            right.fill_between(steps, [100 * b[0] for b in eq["band"]], [100 * b[1] for b in eq["band"]],
                               color="tab:gray", alpha=0.3, lw=0, label=f"pointwise {100 * eq['level']:.0f}% band")
            right.plot(steps, diff, color="black", marker="o", ms=4, lw=1.4, label=f"{c['a']} - {c['b']}, centred")
            for sgn in (-1, 1):
                right.axhline(sgn * 100 * eq["delta"], color="tab:red", ls="--", lw=0.9,
                              label=f"margin +-{100 * eq['delta']:.0f} pp" if sgn > 0 else None)
            right.axhline(0.0, color="0.4", lw=0.8)
            right.legend(fontsize=7, loc="best")
        right.set_ylabel("difference of centred curves (pp)")
        an = c.get("anova") or {}
        pv = an.get("p_value")
        test = ("no test" if pv is None else f"F {an['statistic']:.2f} on ({an['df1']}, {an['df2']}) df, "
                + ("p < 0.001" if pv < 0.001 else f"p {pv:.3f}"))  # never "p 0.000"
        left.set_title(f"{c['a']} ({c['seeds_a']} seeds) vs {c['b']} ({c['seeds_b']} seeds): "
                       f"{c.get('verdict') or 'no verdict'}", fontsize=9)
        right.set_title(f"framework x checkpoint {test}", fontsize=9)
        for ax in (left, right):
            ax.set_xticks(steps)
            ax.set_xlabel("checkpoint (training step)")
            ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_transfer(result: Mapping[str, Any], path: str | Path) -> Path:
    """Scatter of each checkpoint's lift on executor A (x) against executor B (y), with both bootstrap intervals,
    one panel per pair of executors, one colour per run; the diagonal marks equal lifts."""
    transfers = result.get("transfer") or []
    fig = _figure(5.2 * max(len(transfers), 1), 5.0)
    if not transfers:
        return _save_empty(fig, "no pair of executors", path)
    axes = fig.subplots(1, len(transfers), squeeze=False)[0]
    for ax, t in zip(axes, transfers):
        runs = sorted({pt["run"] for pt in t["points"]})
        xs_all, ys_all = [], []
        for i, run in enumerate(runs):
            color, marker, _ = _STYLES[i % len(_STYLES)]
            pts = [pt for pt in t["points"] if pt["run"] == run]
            x = [100 * pt["lift_a"] for pt in pts]
            y = [100 * pt["lift_b"] for pt in pts]
            xerr = [[100 * (pt["lift_a"] - (pt["lift_a_ci"][0] if pt["lift_a_ci"][0] is not None else pt["lift_a"])) for pt in pts],
                    [100 * ((pt["lift_a_ci"][1] if pt["lift_a_ci"][1] is not None else pt["lift_a"]) - pt["lift_a"]) for pt in pts]]
            yerr = [[100 * (pt["lift_b"] - (pt["lift_b_ci"][0] if pt["lift_b_ci"][0] is not None else pt["lift_b"])) for pt in pts],
                    [100 * ((pt["lift_b_ci"][1] if pt["lift_b_ci"][1] is not None else pt["lift_b"]) - pt["lift_b"]) for pt in pts]]
            ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt=marker, color=color, ms=5, elinewidth=0.6, alpha=0.85, label=run)
            for pt, xi, yi in zip(pts, x, y):
                ax.annotate(str(pt["checkpoint"]), (xi, yi), fontsize=6, xytext=(3, 3), textcoords="offset points")
            xs_all += x
            ys_all += y
        lim = max([abs(v) for v in xs_all + ys_all] + [1.0]) * 1.15
        ax.plot([-lim, lim], [-lim, lim], color="0.6", lw=0.8, ls="--")
        ax.axhline(0, color="0.4", lw=0.6)
        ax.axvline(0, color="0.4", lw=0.6)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        pooled = t["pooled"]
        r_txt = ("r undefined" if pooled["pearson"] is None else
                 f"r = {pooled['pearson']:.2f} [{pooled['pearson_ci'][0]:.2f}, {pooled['pearson_ci'][1]:.2f}], "
                 f"n = {pooled['n']}")
        ax.set_title(f"{t['a']} vs {t['b']}: {r_txt}", fontsize=9)
        ax.set_xlabel(f"lift on {t['a']} (pp)")
        ax.set_ylabel(f"lift on {t['b']} (pp)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


# metrics.jsonl fields drawn by plot_training_dynamics: (title, getter)
_DYNAMICS: list[tuple[str, Any]] = [
    ("reward (mean)", lambda r: r.get("reward_mean")),
    ("r_task", lambda r: (r.get("reward_terms") or {}).get("r_task")),
    ("r_fc", lambda r: (r.get("reward_terms") or {}).get("r_fc")),
    ("r_cnt", lambda r: (r.get("reward_terms") or {}).get("r_cnt")),
    ("r_comp", lambda r: (r.get("reward_terms") or {}).get("r_comp")),
    ("entropy", lambda r: r.get("entropy")),
    ("KL", lambda r: r.get("kl")),
    ("grad norm", lambda r: r.get("grad_norm")),
    ("positions measured (mean)", lambda r: r.get("positions_measured_mean")),
    ("executor calls per step", lambda r: r.get("executor_calls")),
    ("unmeasured episodes per step", lambda r: r.get("unmeasured_episodes")),
    ("completion length (mean)", lambda r: r.get("completion_length_mean")),
]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Step rows of a run's metrics.jsonl (kind == "step"), sorted by step; a torn last line is skipped."""
    from twinrun.core.records import read_jsonl

    rows = [r for r in read_jsonl(path) if r.get("kind", "step") == "step" and "step" in r]
    return sorted(rows, key=lambda r: r["step"])


def plot_training_dynamics(metrics: Mapping[str, str | Path], path: str | Path) -> Path:
    """One panel per training quantity, one line per run (label -> metrics.jsonl). Panels with no data are left
    out; a run without a quantity (e.g. a backend that does not report KL) simply has no line there."""
    from matplotlib.ticker import MaxNLocator

    series = {label: read_metrics(p) for label, p in metrics.items()}
    panels = []
    for title, get in _DYNAMICS:
        lines = {}
        for label, rows in series.items():
            pts = [(r["step"], get(r)) for r in rows if isinstance(get(r), (int, float))]
            if pts:
                lines[label] = pts
        if lines:
            panels.append((title, lines))
    cols = 3
    nrows = max(1, -(-len(panels) // cols))
    fig = _figure(11.0, 2.5 * nrows + 0.6)
    if not panels:
        return _save_empty(fig, "no step metrics found", path)
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    labels = sorted(series)
    for ax, (title, lines) in zip(axes, panels):
        for label, pts in lines.items():
            color, marker, ls = _STYLES[labels.index(label) % len(_STYLES)]
            xs, ys = zip(*pts)
            ax.plot(xs, ys, color=color, ls=ls, marker=marker if len(xs) < 30 else None, ms=3, lw=1.2, label=label)
        ax.set_title(title, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # training steps are whole numbers
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    axes[0].legend(fontsize=7)
    fig.suptitle("Training dynamics (metrics.jsonl, x = training step)", fontsize=10)
    return _save(fig, path)
