"""The report's tables and their number formats: the streams line and table, runs, multiplicity families and arms
against the baseline (sections of :mod:`.report`, each a function of the result and the heading mark)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
