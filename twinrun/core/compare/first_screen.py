"""The report's first screen (issue 52): what was compared, each framework pair's verdict with its reason, the lift
figure, at most five rows of peak and final lifts, and what would decide it next, with its cost.

Everything here is read from a compare result (the dict :func:`twinrun.core.compare.compare` returns, or its
compare.json); nothing is computed anew except the sums and means a reader would do by hand (episodes of a larger
sweep, a framework's mean curve over its seeds with a t interval across them). The same lines feed report.md,
report.html and the console summaries of `twinrun compare` and `twinrun run`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from twinrun.core.compare.verdict import NO_EVIDENCE

MAX_VERDICTS = 5  # verdict lines on the first screen; the rest are in the Verdicts section
MAX_ROWS = 5  # rows of the first screen's table
# sentences compare appends to a pair's reason to say what would decide it: the first screen moves them to "Next"
_DECIDE_STARTS = (" To decide with ", " One stream per arm cannot decide ")


def _pp(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:+.1f}"


def _ci(ci: Sequence[Any] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "–"
    return f"[{_pp(ci[0])}, {_pp(ci[1])}]"


def reason(explanation: str) -> str:
    """A verdict's one-line reason: its explanation without the appended sentence on what would decide it."""
    cut = min((i for i in (explanation.find(s) for s in _DECIDE_STARTS) if i >= 0), default=len(explanation))
    return explanation[:cut].strip()


def _counted(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def compared_line(result: Mapping[str, Any]) -> str:
    """One line: runs, frameworks, seeds, checkpoints, games x streams and the baseline."""
    runs = result.get("runs") or {}
    groups = (result.get("frameworks") or {}).get("groups") or {}
    parts = [_counted(len(runs), "run") + (f" ({', '.join(sorted(runs))})" if 0 < len(runs) <= 6 else "")]
    if groups:
        seeds = sorted({g["seed"] for gs in groups.values() for g in gs if g.get("seed") is not None})
        per = sorted({len(gs) for gs in groups.values()})
        each = f"{per[0]}" if len(per) == 1 else f"{per[0]}-{per[-1]}"
        parts.append(f"{_counted(len(groups), 'framework')} ({', '.join(groups)}), {each} seed"
                     + ("" if each == "1" else "s") + " each"
                     + (f" ({'seed' if len(seeds) == 1 else 'seeds'} {', '.join(map(str, seeds))})"
                        if seeds and len(seeds) <= 8 else ""))
    else:
        parts.append("frameworks not recorded")
    ks = sorted({len(c.get("checkpoints") or []) for c in runs.values()})
    if ks:
        parts.append(f"{ks[0] if len(ks) == 1 else f'{ks[0]}-{ks[-1]}'} checkpoints per run")
    st = result.get("streams") or {}
    per_cell = st.get("streams_per_cell") or {}
    lo, hi = per_cell.get("min", 1), per_cell.get("max", 1)
    games = st.get("games_per_stream") or result.get("n_games")
    streams = f"{lo}" if lo == hi else f"{lo}-{hi}"
    if games:
        parts.append(f"{games:.0f} games x {streams} stream{'' if streams == '1' else 's'} per arm")
    base = result.get("baseline") or {}
    if base.get("success_rate") is not None:
        where = "same-sweep " if result.get("source") == "per-game" else ""
        named = "" if base["arm"] == "baseline" else f" (`{base['arm']}`)"
        parts.append(f"against the {where}baseline{named} at {100 * base['success_rate']:.1f}%")
    src = "" if result.get("source") == "per-game" else " (published summaries)"
    return f"**Compared{src}:** " + "; ".join(parts) + "."


def headline_pairs(result: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, verdict record) of each framework pair: the framework verdicts where frameworks have >= 2 seeds,
    else the run pairs across frameworks (one run per framework), else every run pair (frameworks unknown)."""
    fw = [c for c in (result.get("frameworks") or {}).get("comparisons") or [] if c.get("verdict")]
    if fw:
        return [(f"framework {c['a']} vs {c['b']}", c) for c in fw]
    pairs = result.get("pairs") or []
    across = [p for p in pairs if p.get("relation") == "across frameworks"]
    return [(f"{p['a']} vs {p['b']}", p) for p in (across or pairs)]


def verdict_lines(result: Mapping[str, Any]) -> list[str]:
    """Each framework pair's verdict in bold with its one-line reason (at most MAX_VERDICTS), and a count of the
    rest of the run pairs by verdict."""
    heads = headline_pairs(result)
    lines = [f"**{label}: {rec['verdict']}.** {reason(rec.get('explanation') or '')}".rstrip()
             for label, rec in heads[:MAX_VERDICTS]]
    shown = {(rec["a"], rec["b"]) for _, rec in heads[:MAX_VERDICTS]}
    rest = [p for p in result.get("pairs") or [] if (p["a"], p["b"]) not in shown]
    if len(heads) > MAX_VERDICTS or rest:
        counts: dict[str, int] = {}
        for p in rest:
            counts[p["verdict"]] = counts.get(p["verdict"], 0) + 1
        what = "; ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda x: -x[1]))
        lines.append(f"{_counted(len(rest), 'other run pair')}{': ' + what if what else ''} "
                     "([Verdicts](#verdicts)).")
    return lines


def _t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


def framework_row(name: str, runs: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """A framework's mean curve over its seeds: the peak checkpoint, the mean lift there and at the final checkpoint,
    each with a 95% t interval across the seeds (the seeds are the framework's replicates). None without >= 2 seeds
    sharing checkpoints."""
    shared = sorted(set.intersection(*[set(r.get("checkpoints") or []) for r in runs])) if runs else []
    if len(runs) < 2 or not shared:
        return None
    cols = [[r["lifts"][list(r["checkpoints"]).index(k)] for r in runs] for k in shared]
    means = [sum(c) / len(c) for c in cols]

    def with_ci(j: int) -> str:
        c, m = cols[j], means[j]
        sd = math.sqrt(sum((x - m) ** 2 for x in c) / (len(c) - 1))
        half = _t975(len(c) - 1) * sd / math.sqrt(len(c))
        return f"{_pp(m)} {_ci([m - half, m + half])}"

    peak = max(range(len(shared)), key=lambda j: means[j])
    return [f"{name} (mean of {len(runs)} seeds)", str(shared[peak]), with_ci(peak), str(shared[-1]), with_ci(-1)]


def table_rows(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]], str]:
    """(header, at most MAX_ROWS rows, a note): one row per run (up to five runs), else one per framework (its
    mean curve over its seeds)."""
    runs = {n: c for n, c in sorted((result.get("runs") or {}).items()) if c.get("checkpoints")}
    header = ["run", "peak at", "lift at peak, pp [95% CI]", "final", "final lift, pp [95% CI]"]
    if not runs:
        return header, [], ""
    groups = (result.get("frameworks") or {}).get("groups") or {}
    if len(runs) > MAX_ROWS and 0 < len(groups) <= MAX_ROWS:
        rows = [row for f, gs in groups.items()
                if (row := framework_row(f, [runs[g["run"]] for g in gs if g["run"] in runs]))]
        if rows:
            return (["framework"] + header[1:], rows,
                    "Intervals across each framework's seeds; every run's curve is in "
                    "[Runs](#runs-curves-over-checkpoints).")
    rows = []
    for name, c in list(runs.items())[:MAX_ROWS]:
        ks, lifts = list(c["checkpoints"]), c["lifts"]
        cis = c.get("lift_ci") or [None] * len(lifts)
        peak = (ks.index(c["peak_checkpoint"]) if c.get("peak_checkpoint") in ks
                else max(range(len(ks)), key=lambda j: lifts[j]))
        rows.append([name, str(ks[peak]), f"{_pp(lifts[peak])} {_ci(cis[peak])}", str(ks[-1]),
                     f"{_pp(lifts[-1])} {_ci(cis[-1])}"])
    note = (f"The first {MAX_ROWS} of {len(runs)} runs; all are in [Runs](#runs-curves-over-checkpoints)."
            if len(runs) > MAX_ROWS else "")
    return header, rows, note


def table_lines(result: Mapping[str, Any]) -> list[str]:
    """The first screen's table as markdown (empty without runs)."""
    header, rows, note = table_rows(result)
    if not rows:
        return []
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + (["", note] if note else [])


def _cells(result: Mapping[str, Any]) -> int:
    return sum(len(c.get("checkpoints") or []) for c in (result.get("runs") or {}).values())


def next_line(result: Mapping[str, Any]) -> str:
    """What would decide the headline verdicts and what it costs (streams, seeds, sweep episodes), from what compare
    computed; "decided" where every headline verdict is."""
    heads = headline_pairs(result)[:MAX_VERDICTS]
    fw = result.get("frameworks") or {}
    st = result.get("streams") or {}
    items: list[str] = []
    one_stream = (st.get("streams_per_cell") or {}).get("max", 1) < 2 and st.get("stated_icc") is None
    if one_stream:
        items.append("play >= 2 streams per arm (`sweep --streams 4`; `twinrun design` sizes them from a "
                     "pilot), or state a pilot's correlation with `--stream-icc`: one stream decides no shape")
    if fw.get("confounded"):
        items.append("train >= 2 seeds per framework (`twinrun run SPEC --out DIR --seeds 42,123,456`): with one run "
                     "each, framework and seed are confounded")
    open_pairs = [rec for _, rec in heads if rec.get("verdict") == NO_EVIDENCE]
    details = [rec.get("n_to_decide_detail") for rec in open_pairs if rec.get("n_to_decide_detail")]
    if details:
        games = int(details[0]["games_per_stream"])
        now = int(details[0]["at_streams"])
        need = [d["streams"] for d in details]
        if all(n is not None for n in need):
            s = max(need)
            cells = _cells(result) + 1  # the baseline plays every stream too
            items.append(f"{s} streams per arm (now {now}) at the protocol's {games} games per stream: "
                         f"{cells * s * games:,} sweep episodes ({cells} arms x {s} x {games}; now "
                         f"{cells * now * games:,})")
        else:
            items.append(f"no number of streams up to {details[0]['max_streams']} per arm decides at the protocol's "
                         f"{games} games per stream: a larger `--delta`, a higher `--max-streams` or more seeds per "
                         "framework might (`twinrun design --pilot SWEEP --kind shape --delta 5` prices streams)")
    if any(rec.get("seeds_a") for rec in open_pairs):
        items.append("more seeds per framework: the framework verdict is judged against the spread of its seeds "
                     "(`twinrun run SPEC --out DIR --seeds S1,S2,...` trains them)")
    if not items:
        if not heads:
            return "**Next:** a verdict needs two runs' curves: sweep another run beside this one."
        if open_pairs:
            return "**Next:** nothing compare can size would decide these pairs; see [Verdicts](#verdicts)."
        return ("**Next:** nothing: decided at this sample size, under the rule stated before looking "
                "([Verdicts](#verdicts)).")
    return "**Next:** " + "; ".join(items) + "."
