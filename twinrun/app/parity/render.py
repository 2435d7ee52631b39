"""Console tables for `twinrun parity`: the update difference per tensor group, each trainer's updates, the knob
table (rich; no framework import)."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table


def _f(v: Any, fmt: str = ".3g") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return format(float(v), fmt)


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """The parity report of one comparison (run.run_parity's dict)."""
    c = console or Console(width=160)
    c.print(f"[bold]parity[/] {report['spec']['name']} (spec {report['spec']['hash']}): {report.get('replayed', '')}")
    c.print(f"  {report['frameworks'].get('trl')} vs {report['frameworks'].get('verl')}; rollouts {report.get('rollouts')}")
    for k, diff in report.get("grads", {}).items():
        t = Table(title=f"gradient difference of optimizer update {k} (after clipping): ||g_trl - g_verl|| / ||g_trl||")
        for col in ("group", "params", "rel_diff", "||g_trl||", "||g_verl||", "cosine"):
            t.add_column(col, justify="left" if col == "group" else "right")
        for row in [*diff["groups"], diff["total"]]:
            t.add_row(row["group"], str(row["params"]), _f(row["rel_diff"]), _f(row["norm_trl"]),
                      _f(row["norm_verl"]), _f(row["cosine"], ".8f"), style="bold" if row["group"] == "total" else None)
        c.print(t)
    for k, diff in report["steps"].items():
        t = Table(title=f"weight difference after training step {k} (secondary: AdamW's g/(|g|+eps) turns fp32 "
                        "rounding of near-zero gradients into ~1e-3 here, B15): ||dW_trl - dW_verl|| / ||dW_trl||")
        for col in ("group", "params", "rel_diff", "||dW_trl||", "||dW_verl||", "cosine"):
            t.add_column(col, justify="left" if col == "group" else "right")
        for row in [*diff["groups"], diff["total"]]:
            t.add_row(row["group"], str(row["params"]), _f(row["rel_diff"]), _f(row["norm_trl"]),
                      _f(row["norm_verl"]), _f(row["cosine"], ".8f"), style="bold" if row["group"] == "total" else None)
        c.print(t)
    t = Table(title="each trainer's optimizer updates (loss = what it backpropagated; ratio = exp(logp - logp_old) "
                    "on loss tokens)")
    for col in ("backend", "step", "update", "loss", "tokens", "ratio mean", "ratio min", "ratio max",
                "clip frac", "grad norm"):
        t.add_column(col, justify="left" if col == "backend" else "right")
    for b, ups in report["updates"].items():
        for u in ups:
            r = u.get("ratio") or {}
            t.add_row(b, str(u["step"]), str(u["update"]), _f(u.get("loss"), ".7g"), str(r.get("tokens", "")),
                      _f(r.get("ratio_mean"), ".7f"), _f(r.get("ratio_min"), ".7f"), _f(r.get("ratio_max"), ".7f"),
                      _f(u.get("clip_fraction")), _f(u.get("grad_norm"), ".6g"))
    c.print(t)
    verdict = "[green]PASS[/]" if report["passed"] else "[red]FAIL[/]"
    if report.get("no_signal"):
        c.print(f"{verdict}: {report['no_signal']}")
    c.print(f"{verdict}: total relative gradient difference of update {report.get('judged_update') or 1} "
            f"{_f(report['rel_diff'])} (tol "
            f"{report['tol']:g}), worst over the {len(report['grads'])} updates {_f(report['max_grad_rel_diff'])} "
            f"(tol {_f(report.get('later_tol'))}: later updates inherit the AdamW floor); reported, not judged: "
            f"weights after AdamW {_f(report['max_weight_rel_diff'])} (AdamW's g/(|g|+eps) amplifies fp32 rounding "
            "of near-zero gradients, DIVERGENCES B15)")


def print_knob_table(rows: list[dict[str, Any]], console: Console | None = None) -> None:
    """The knob table (knobs.run_knob_table's rows)."""
    c = console or Console(width=160)
    t = Table(title="update parity knob by knob (||g_trl - g_verl|| / ||g_trl|| of update 1, judged; worst update "
                    "and weights after AdamW, ||dW_trl - dW_verl|| / ||dW_trl|| after step 1 and the last, reported)")
    num = ("grad update 1", "grad worst", "weights step 1", "weights last", "tol")
    for col in ("knob", "--set", "plan", *num, "verdict"):
        t.add_column(col, justify="right" if col in num else "left", overflow="fold")
    for r in rows:
        t.add_row(r["knob"], " ".join(r["sets"]) or "(spec as is)", r["plan"], _f(r.get("grad_rel_diff")),
                  _f(r.get("grad_rel_diff_worst")),                  _f(r.get("rel_diff_step1")), _f(r.get("rel_diff_last")), _f(r["tol"]), r["verdict"])
    c.print(t)
