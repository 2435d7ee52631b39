"""The printed results: the study's table (method, epoch or round, success, Avg@1, literal template-copy share,
any-template share, the re-evaluation-noise flag) and the paired comparisons."""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from typing import Any


def _pm(d: dict[str, Any], pct: bool = False) -> str:
    if d["mean"] is None:
        return "-"
    k = 100.0 if pct else 1.0
    nd = 2 if pct else 3
    sd = f" ± {d['std'] * k:.{nd}f}" if d["std"] is not None else ""
    return f"{d['mean'] * k:.{nd}f}{sd}"


def render_table(summaries: Sequence[dict[str, Any]], comparisons: Sequence[dict[str, Any]], *,
                 literal_label: str = "open/close OBJ") -> str:
    """The results table (plain text): one row per arm, then the paired comparisons.

    Summaries may carry ``method`` and ``stage`` (e.g. ``epoch 2``, ``round 1``: runs given with ``--run``) and
    ``noise`` (``best``, ``≈ best`` when within re-evaluation noise of the best arm, ``below`` otherwise)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(record=True, width=200, file=StringIO())
    t = Table(title="agent evaluation (mean ± std over passes)")
    staged = any(s.get("method") for s in summaries)
    cols = (["method", "epoch/round"] if staged else []) + [
        "arm", "passes", "measured", "unmeasured", "success %", "Avg@1", f"copy % ({literal_label})",
        "any-template %", "vs best"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("method", "epoch/round", "arm", "vs best") else "right")
    for s in summaries:
        row = [s.get("method") or "-", s.get("stage") or "-"] if staged else []
        row += [s["arm"], str(s["passes"]), str(s["episodes_measured"]), str(s["episodes_unmeasured"]),
                _pm(s["success"], True), _pm(s["avg_at_1"]), _pm(s["literal_copy_share"], True),
                _pm(s["template_copy_share"], True), s.get("noise") or "-"]
        t.add_row(*row)
    console.print(t)
    if any(s.get("noise") for s in summaries):
        console.print("vs best: '≈ best' = the success difference to the best arm is within re-evaluation noise "
                      "(paired bootstrap CI contains 0, or the difference is within the larger pass-to-pass std)")
    if comparisons:
        c = Table(title="paired bootstrap over variations (a - b)")
        for col in ("a", "b", "kind", "pairs", "ΔAvg@1 [CI]", "p", "Δsuccess [CI]", "p"):
            c.add_column(col)
        for cmp in comparisons:
            x, y = cmp["avg_at_1"], cmp["success"]
            c.add_row(cmp["a"], cmp["b"], cmp.get("kind", "-"), str(x["n_pairs"]), _ci(x), _p(x), _ci(y), _p(y))
        console.print(c)
    return console.export_text()


def _ci(x: dict[str, Any]) -> str:
    if x["diff"] is None:
        return "-"
    return f"{x['diff']:+.3f} [{x['ci'][0]:+.3f}, {x['ci'][1]:+.3f}]"


def _p(x: dict[str, Any]) -> str:
    return "-" if x["p_value"] is None else f"{x['p_value']:.3g}"
