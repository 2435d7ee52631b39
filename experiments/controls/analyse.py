"""The real-training controls' findings, from their committed rows (issue 40).

Three jobs:

* ``python experiments/controls/analyse.py compact --from runs/controls`` copies what the findings rest on out of a
  controls folder (experiments/controls/controls.py) into one sweep folder, ``experiments/controls/data/sweep/``:
  every run trained and fully swept (sweep.json with their arms and the baseline, one compact row per game: the
  fields ``twinrun compare`` reads, without curator ops and paths) and each run's metrics.jsonl
  (``metrics/<run>.jsonl``). Each row is stored once (about 7 MB for nine runs), committed beside the numbers it
  gives; the controls are views of it.
* ``python experiments/controls/analyse.py view NAME --to DIR`` writes one control as a sweep folder of its own,
  for ``twinrun compare DIR --baseline baseline`` (its full report).
* ``python experiments/controls/analyse.py findings`` runs ``twinrun compare``'s own function on each control whose
  runs are all committed and prints the block docs/findings.md carries between its ``findings:start`` /
  ``findings:end`` markers; ``--write`` puts it there. tests/test_controls_findings.py recomputes the block from the
  committed rows and fails when it differs, so a change to compare that moves a finding is seen.

The controls (which runs each one holds):

* ``first-seeds``: TRL and verl at seed 0 only, the first two runs (no framework verdict: one seed each);
* ``pilot``: TRL and verl, seeds 0 and 1: the stream correlation and the seed spread that size the rest;
* ``negative``: TRL against verl, every seed trained (the same algorithm: must not say "differ");
* ``positive``: the slow group (lr / 10, under TRL) against the verl seeds (must say "differ");
* ``seeds``: the TRL seeds against each other (the seed spread, run pair by run pair).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "experiments" / "controls" / "data"
FINDINGS = ROOT / "docs" / "findings.md"
START, END = "<!-- findings:start (generated: experiments/controls/analyse.py findings --write) -->", "<!-- findings:end -->"

CONTROLS: dict[str, dict[str, Any]] = {
    "first-seeds": {"runs": ["trl-s0", "verl-s0"], "truth": "same algorithm (one seed each: framework and seed "
                    "confounded)"},
    "pilot": {"runs": ["trl-s0", "trl-s1", "verl-s0", "verl-s1"], "truth": "same algorithm"},
    "negative": {"runs": ["trl-s0", "trl-s1", "trl-s2", "verl-s0", "verl-s1", "verl-s2"], "truth": "same algorithm",
                 "budget": "agree"},
    "positive": {"runs": ["trlslow-s0", "trlslow-s1", "trlslow-s2", "verl-s0", "verl-s1", "verl-s2"],
                 "truth": "shapes differ (lr / 10)",
                 # the slow group is TRL at lr / 10: named as its own group, so the verdict's label says which it is
                 "groups": {f"trlslow-s{i}": ("trl-lr/10", i) for i in range(3)}, "budget": "differ"},
    "seeds": {"runs": ["trl-s0", "trl-s1", "trl-s2"], "truth": "same algorithm, same framework",
              "seed_spread": True},
}
# the fields of a sweep row that `twinrun compare` reads, plus what a reader of the rows wants to see per game
ROW_FIELDS = ("kind", "arm", "sweep_id", "games_hash", "n_games", "game_id", "game_index", "task_type", "position",
              "replicate", "role", "run", "run_seed", "checkpoint_step", "executor", "outcome", "unmeasured_reason",
              "steps", "skill_relevance", "repo_skills", "curator_calls", "wall_s")
PROVENANCE_FIELDS = ("backend", "checkpoint_hash", "seed", "spec_hash")


def compact_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row.get(k) for k in ROW_FIELDS if k in row}
    out["provenance"] = {k: (row.get("provenance") or {}).get(k) for k in PROVENANCE_FIELDS}
    return out


def compact(src: Path, dst: Path = DATA / "sweep") -> list[str]:
    """Copy every run of a controls folder (src: its runs/ and sweep/) that is trained and fully swept (every arm
    complete) into one compact sweep folder (dst): sweep.json with those runs' arms and the baseline, one compact
    row per game, each run's metrics.jsonl. The controls are views of it (:func:`control_view`): a row is stored
    once, whichever controls use it. Returns the runs written."""
    from twinrun.core.records import atomic_write_json, atomic_write_text, read_jsonl

    plan = json.loads((src / "sweep" / "sweep.json").read_text(encoding="utf-8"))
    n = len(plan["games"])
    wanted = {r for c in CONTROLS.values() for r in c["runs"]}
    rows: dict[str, list[dict[str, Any]]] = {}
    for a in plan["arms"]:
        f = src / "sweep" / "arms" / f"{a['arm']}.jsonl"
        rows[a["arm"]] = [r for r in read_jsonl(f) if r.get("kind") == "eval"] if f.exists() else []
    runs = sorted(r for r in wanted
                  if (src / "runs" / r / "metrics.jsonl").is_file()
                  and any(a.get("run") == r for a in plan["arms"])
                  and all(len(rows[a["arm"]]) >= n for a in plan["arms"] if a.get("run") == r))
    arms = [a for a in plan["arms"] if a["role"] == "baseline" or a.get("run") in runs]
    if any(len(rows[a["arm"]]) < n for a in arms if a["role"] == "baseline"):
        return []
    if dst.exists():
        shutil.rmtree(dst)
    (dst / "arms").mkdir(parents=True)
    # no machine's paths in committed rows: a game is its id (the pairing key), a checkpoint its content hash
    keep = dict(plan, games=[dict(g, path=None) for g in plan["games"]],
                arms=[dict(a, run_dir=None, checkpoint_path=None, checkpoint_stat=None) for a in arms])
    atomic_write_json(dst / "sweep.json", keep)
    for a in arms:
        atomic_write_text(dst / "arms" / f"{a['arm']}.jsonl",
                          "".join(json.dumps(compact_row(r), sort_keys=True) + "\n" for r in rows[a["arm"]]))
    (dst / "metrics").mkdir()  # not runs/: .gitignore keeps run folders out of the repository
    for run in runs:
        shutil.copyfile(src / "runs" / run / "metrics.jsonl", dst / "metrics" / f"{run}.jsonl")
    return runs


def control_view(control: str, dst: Path, data: Path = DATA / "sweep") -> Path | None:
    """One control as a sweep folder of its own (dst): the committed folder's sweep.json cut to the control's runs
    and the baseline, their arm files and metrics copied. None when a run it needs is not committed, so that a
    control is reported whole or not at all."""
    from twinrun.core.records import atomic_write_json

    if not (data / "sweep.json").is_file():
        return None
    runs = CONTROLS[control]["runs"]
    plan = json.loads((data / "sweep.json").read_text(encoding="utf-8"))
    arms = [a for a in plan["arms"] if a["role"] == "baseline" or a.get("run") in runs]
    if not set(runs) <= {a.get("run") for a in arms}:
        return None
    (dst / "arms").mkdir(parents=True, exist_ok=True)
    (dst / "metrics").mkdir(exist_ok=True)
    atomic_write_json(dst / "sweep.json", dict(plan, arms=arms))
    for a in arms:
        shutil.copyfile(data / "arms" / f"{a['arm']}.jsonl", dst / "arms" / f"{a['arm']}.jsonl")
    for run in runs:
        shutil.copyfile(data / "metrics" / f"{run}.jsonl", dst / "metrics" / f"{run}.jsonl")
    return dst


# ------------------------------------------------------------------------------------------------------------
# Findings


def _pp(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f} pp"


def _ci(ci: Any, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if not ci or ci[0] is None:
        return "–"
    return "[" + ", ".join(fmt.format(scale * v) for v in ci) + "]"


def _p(p: float | None) -> str:
    return "–" if p is None else (f"{p:.3f}" if p >= 0.001 else "< 0.001")


def cost(data: Path) -> dict[str, Any]:
    """Executor episodes and CPU wall time the control's rows took: the sweep's games (every row, the baseline's
    included) and each run's training steps (metrics.jsonl's step wall times)."""
    from twinrun.core.compare.plots import read_metrics
    from twinrun.core.records import read_jsonl

    rows = [r for f in sorted((data / "arms").glob("*.jsonl")) for r in read_jsonl(f)]
    train_s, train_episodes = 0.0, 0
    for m in sorted((data / "metrics").glob("*.jsonl")):
        steps = {r["step"]: r for r in read_metrics(m)}  # a resumed step keeps its last row
        train_s += sum(float((r.get("wall_s") or {}).get("step") or 0.0) for r in steps.values())
        train_episodes += sum(int(r.get("executor_episodes") or 0) for r in steps.values())
    return {"sweep_episodes": len(rows), "sweep_s": sum(float(r.get("wall_s") or 0.0) for r in rows),
            "train_episodes": train_episodes, "train_s": train_s}


PAPER = {"games": 140, "streams": 1, "checkpoints": 12, "seeds": (1, 2, 3)}  # the paper's protocol (Table 4)


def _framework_mde(seed_var: float, stream_var: float, n: int, k: int, target: float = 0.8, alpha: float = 0.05
                   ) -> float | None:
    """Smallest difference between two frameworks' centred curves at one checkpoint (success-rate scale) that the
    seeds-as-replicates test detects with n seeds per framework, one stream each: each framework mean has variance
    (seed_var + stream_var) (1 - 1/K) / n (centring), the difference twice that, error df 2 (n - 1)(K - 1) (the
    framework x checkpoint layout with seeds as replicates); None with one seed (no seed variance can be
    estimated)."""
    from twinrun.core.compare.design import smallest_detected, two_sided_power

    if n < 2:
        return None
    var = 2 * (seed_var + stream_var) * (1 - 1 / k) / n
    return smallest_detected(lambda d: two_sided_power(d, var, 2 * (n - 1) * (k - 1), alpha), target)


def _centred_cell_noise(c: dict[str, Any], streams: float) -> float | None:
    """Variance a cell of `streams` crossed streams adds to a run's lift at one checkpoint, on the scale of the
    ANOVA's seed SD (per checkpoint, before centring): the error after the stream blocks, s2_e / streams. A run's
    stream-r block is shared by all its checkpoints and cancels when its curve is centred, as does the baseline."""
    blocks = c.get("blocks") or {}
    if not blocks:
        return None
    return blocks["sd_blocked"] ** 2 / streams


def _anova(c: dict[str, Any]) -> dict[str, Any] | None:
    """The control's seeds-as-replicates ANOVA (its framework comparison's), or None with one framework."""
    return next((x.get("anova") for x in c.get("frameworks", []) if x.get("anova")), None)


def _less_stream_noise(sd: float, c: dict[str, Any]) -> float | None:
    """A seed SD of a run's centred lift with this sweep's stream noise in a cell taken out: the seeds' own variance
    (floored at 0); None without blocks or streams."""
    noise = _centred_cell_noise(c, c["streams"]) if c.get("streams") else None
    return None if noise is None else max(0.0, sd ** 2 - noise)


def own_seed_var(c: dict[str, Any]) -> float | None:
    """The seeds' own variance of a run's centred lift: the seeds-as-replicates ANOVA's seed SD squared, less what
    this sweep's streams put into a cell (floored at 0); None without an ANOVA or blocks."""
    an = _anova(c)
    return None if an is None else _less_stream_noise(an["seed_sd"], c)


def seed_spread(c: dict[str, Any]) -> dict[str, Any] | None:
    """The spread between seeds of one framework, from the runs' curves alone (the seed control has no second
    framework, so no ANOVA): the seed SD of a run's centred lift as the ANOVA's error term computes it for one group
    (shape.seed_profile_ss), and the seeds' own SD once a cell's stream noise is taken out. None with fewer than 2
    runs."""
    import numpy as np

    from twinrun.core.compare.shape import seed_profile_ss

    lifts = np.array([cv["lifts"] for cv in c.get("curves", {}).values()], dtype=np.float64)
    if lifts.ndim != 2 or lifts.shape[0] < 2 or lifts.shape[1] < 2:
        return None
    ss, df = seed_profile_ss({"one": lifts})
    sd = (ss / df) ** 0.5
    own = _less_stream_noise(sd, c)
    noise = _centred_cell_noise(c, c["streams"]) if c.get("streams") else None
    return {"runs": lifts.shape[0], "sd": sd, "sd_own": None if own is None else own ** 0.5,
            "cell_noise_sd": None if noise is None else noise ** 0.5}


def paper_shaped(c: dict[str, Any]) -> dict[str, Any] | None:
    """What a sweep shaped like the paper's (140 games, one stream per checkpoint, 12 checkpoints, 1-3 seeds per
    framework) can decide at this control's measured rho and seed spread (design.detectable for a lift; the seeds'
    test for a framework difference). The seed spread measured here (seed SD of a run's centred lift) holds the
    noise of a cell of this sweep's streams; that part (the error SD after the stream blocks, which is what stays in
    a centred curve) is taken out to leave the seeds' own variance, and the paper-shaped stream's noise (rate 0.5:
    the largest; the whole stream variance, as the paper's streams need not be crossed) put in its place."""
    from twinrun.core.compare.design import detectable, stream_variance

    icc = c.get("icc") or {}
    an = _anova(c)
    seed_var = own_seed_var(c)
    if not icc or an is None or seed_var is None:
        return None
    m, k, rho = PAPER["games"], PAPER["checkpoints"], icc["estimate"]
    v = stream_variance(m, rho, 0.5)
    return {
        "lift": detectable(rho, 1, m), "lift_ci": [detectable(r, 1, m) for r in icc["ci"]],
        "lift_independent": detectable(0.0, 1, m), "seed_sd": an["seed_sd"], "seed_sd_own": seed_var ** 0.5,
        "framework": {n: _framework_mde(seed_var, v, n, k) for n in PAPER["seeds"]},
    }


BUDGET_SEEDS = (3, 4, 6, 8, 12)  # seeds per framework a verdict's budget is sized for
BUDGET_STREAMS = (4, 8, 16, 32, 64, 128)  # streams per checkpoint tried, at the control's games per stream
BUDGET_DRAWS = 100  # Monte Carlo draws per (seeds, streams); seeded: the budget is reproducible
BUDGET_POWER = 0.8
# what each budget asks the framework verdict for: the negative control's truth is one curve ("agree"); the positive
# control's is two (a difference of shape: "shapes differ", or "co-move, profiles differ" where the slower curve
# still rises: both claim that the centred curves differ)
WANTED = {"agree": ("shapes agree",), "differ": ("shapes differ", "co-move, profiles differ")}


def verdict_budget(c: dict[str, Any], want: str) -> dict[str, Any] | None:
    """The budget at which compare's framework verdict says `want` ("agree" or "differ", WANTED) with probability
    BUDGET_POWER when the truth is this control's: for "agree" both frameworks follow its mean centred curve; for
    "differ" each framework follows its own group's mean centred curve, as measured. For each number of seeds per
    framework, the fewest streams per checkpoint (at this control's games per stream) that reach it, by Monte Carlo
    through compare's own framework decision (frameworks._framework_pair, default settings). A run's lift at a
    checkpoint is drawn around its framework's curve with the seeds' own variance plus what its cell of streams adds
    (the blocked error / streams), both measured here. None without an ANOVA, blocks or two groups."""
    import numpy as np

    from twinrun.core.compare import CompareSettings
    from twinrun.core.compare.curves import Curve
    from twinrun.core.compare.frameworks import _framework_pair

    own = own_seed_var(c)
    groups = c.get("groups") or {}
    if own is None or len(groups) != 2:
        return None
    fa, fb = sorted(groups)

    def centred_mean(runs: list[str]) -> np.ndarray:
        return np.mean([np.asarray(c["curves"][r]["lifts"]) - np.mean(c["curves"][r]["lifts"]) for r in runs], axis=0)

    runs_of = {f: [g["run"] for g in groups[f]] for f in (fa, fb)}
    if want == "agree":
        shared = centred_mean(runs_of[fa] + runs_of[fb])
        truth = {fa: shared, fb: shared}
    else:
        truth = {f: centred_mean(runs_of[f]) for f in (fa, fb)}
    k = truth[fa].size
    steps = np.asarray(c["curves"][runs_of[fa][0]]["checkpoints"])
    settings = CompareSettings()
    rng = np.random.default_rng(20261203)

    def p_hit(n: int, streams: int) -> float:
        sd = (own + _centred_cell_noise(c, streams)) ** 0.5
        hits = 0
        for _ in range(BUDGET_DRAWS):
            made = {f: [Curve(run=f"{f}{i}", steps=steps, arm_idx=np.arange(k), lifts=truth[f] + rng.normal(0, sd, k),
                              boot=np.zeros((1, k)), reliability=1.0, framework=f, seed=i) for i in range(n)]
                    for f in (fa, fb)}
            hits += _framework_pair(fa, made[fa], fb, made[fb], [], settings).get("verdict") in WANTED[want]
        return hits / BUDGET_DRAWS

    games = c["games_per_stream"]
    rows = []
    for n in BUDGET_SEEDS:
        found: dict[str, Any] = {"streams": None, "p": None}
        for r in BUDGET_STREAMS:
            ph = p_hit(n, r)
            if ph >= BUDGET_POWER:
                found = {"streams": r, "p": ph}
                break
        episodes = None if found["streams"] is None else int(round((2 * n * k + 1) * found["streams"] * games))
        rows.append({"seeds": n, **found, "episodes": episodes})
    n_here, r_here = min(len(runs_of[fa]), len(runs_of[fb])), int(c["streams"])
    return {"want": want, "delta": settings.delta, "power": BUDGET_POWER, "draws": BUDGET_DRAWS,
            "seed_sd_own": own ** 0.5, "rows": rows,
            "here": {"seeds": n_here, "streams": r_here, "p": p_hit(n_here, r_here)}}


def findings(data_root: Path = DATA) -> dict[str, Any]:
    """Every committed control through compare (the report's own function and default settings)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="controls-") as tmp:
        for name in CONTROLS:
            data = control_view(name, Path(tmp) / name, data_root / "sweep")
            if data is not None:
                out[name] = _control_findings(name, data)
    return out


def _control_findings(name: str, data: Path) -> dict[str, Any]:
    """One control's sweep folder (a :func:`control_view`) through compare, and what is derived from it."""
    from twinrun.core.compare import CompareSettings, compare

    groups = tuple((run, fw, seed) for run, (fw, seed) in CONTROLS[name].get("groups", {}).items())
    res = compare([str(data)], "baseline", CompareSettings(groups=groups))
    st, fw = res["streams"], res["frameworks"]
    c: dict[str, Any] = {
        "truth": CONTROLS[name]["truth"],
        "runs": sorted(res["runs"]),
        "games_per_stream": st.get("games_per_stream"),
        "streams": (st.get("streams_per_cell") or {}).get("min"),
        "design": st.get("design"),
        "icc": st.get("icc"),
        "blocks": st.get("blocks"),
        "frameworks": fw.get("comparisons", []),
        "groups": fw.get("groups"),
        "pairs": [{k: p.get(k) for k in ("a", "b", "relation", "verdict", "reason", "pearson")}
                  | {"interaction_p": (p.get("interaction") or {}).get("p_value")} for p in res["pairs"]],
        "curves": {r: {"checkpoints": cv["checkpoints"], "lifts": cv["lifts"]} for r, cv in sorted(res["runs"].items())},
        "baseline_rate": res["baseline"]["success_rate"],
        "cost": cost(data),
    }
    c["paper"] = paper_shaped(c)
    c["budget"] = verdict_budget(c, CONTROLS[name]["budget"]) if CONTROLS[name].get("budget") else None
    c["seed_spread"] = seed_spread(c) if CONTROLS[name].get("seed_spread") else None
    return c


def render(f: dict[str, Any]) -> str:
    """The markdown block docs/findings.md carries (every number in it comes from here)."""
    lines = [START, ""]
    for name, c in f.items():
        lines.append(f"### {name}: {', '.join(c['runs'])} (truth: {c['truth']})")
        lines.append("")
        icc, blocks = c["icc"] or {}, c["blocks"] or {}
        lines.append(f"- design: {c['streams']} streams x {c['games_per_stream']:.1f} measured games (mean) per checkpoint, streams "
                     f"{c['design']}; baseline success {100 * c['baseline_rate']:.1f}%")
        if icc:
            lines.append(f"- stream correlation (ICC): {icc['estimate']:.3f} {_ci(icc['ci'], fmt='{:.3f}')}, "
                         f"design effect {icc['deff']:.2f}")
        if blocks:
            lines.append(f"- share of the stream variance a run's stream block carries: {blocks['share']:.2f} "
                         f"{_ci(blocks['ci'])}; error SD of a stream's lift {100 * blocks['sd_nested']:.1f} pp nested, "
                         f"{100 * blocks['sd_blocked']:.1f} pp after the blocks")
        for cmp in c["frameworks"]:
            an = cmp.get("anova") or {}
            head = (f"- framework verdict, {cmp['a']} ({cmp['seeds_a']} seed(s)) vs {cmp['b']} ({cmp['seeds_b']} seed(s)): "
                    f"**{cmp.get('verdict') or 'none'}**")
            if cmp.get("reason"):
                head += f" (reason {cmp['reason']})"
            lines.append(head)
            if an:
                lines.append(f"  - framework x checkpoint F {an['statistic']:.2f} on ({an['df1']}, {an['df2']}) df, "
                             f"{an['epsilon_method']} epsilon {an['epsilon']:.2f}, p {_p(an['p_value'])}; seed SD of a "
                             f"run's centred lift {100 * an['seed_sd']:.1f} pp")
            if cmp.get("pearson") is not None:
                eq = cmp.get("equivalence") or {}
                lines.append(f"  - r of the mean curves {cmp['pearson']:.2f} {_ci(cmp.get('pearson_ci'))}; 90% band "
                             f"half-width {100 * eq.get('half_width_max', float('nan')):.1f} pp against delta "
                             f"{100 * eq.get('delta', float('nan')):.1f} pp")
            if cmp.get("note"):
                lines.append(f"  - {cmp['note']}")
        for p in c["pairs"]:
            lines.append(f"- run pair {p['a']} vs {p['b']} ({p['relation'] or 'frameworks unknown'}): {p['verdict']}, "
                         f"interaction p {_p(p['interaction_p'])}")
        for run, cv in c["curves"].items():
            lines.append(f"- {run}: lift by checkpoint " + ", ".join(
                f"{k}: {_pp(v)}" for k, v in zip(cv["checkpoints"], cv["lifts"])))
        ps = c.get("paper")
        if ps:
            fw = ", ".join(f"{n} seed{'s' if n > 1 else ''}: " + ("no test (seed and framework confounded)" if d is None
                                                                 else f"{100 * d:.0f} pp")
                           for n, d in ps["framework"].items())
            lines.append(f"- a sweep shaped like the paper's ({PAPER['games']} games, one stream, {PAPER['checkpoints']} "
                         f"checkpoints), at this rho and seed spread, detects at 80% power: a checkpoint's lift of "
                         f"{100 * ps['lift']:.0f} pp {_ci(ps['lift_ci'], 100, '{:.0f}')} ({100 * ps['lift_independent']:.0f} "
                         f"pp if its games were independent); a difference between two frameworks' centred curves at "
                         f"one checkpoint of {fw} (seed SD of a run's centred lift {100 * ps['seed_sd']:.1f} pp here, "
                         f"{100 * ps['seed_sd_own']:.1f} pp once this sweep's stream noise is taken out)")
        sp = c.get("seed_spread")
        if sp:
            lines.append(f"- seed spread: SD of a run's centred lift between the {sp['runs']} seeds {100 * sp['sd']:.1f} pp "
                         f"(pooled over checkpoints); a cell's stream noise {100 * sp['cell_noise_sd']:.1f} pp of it, the "
                         f"seeds' own {100 * sp['sd_own']:.1f} pp")
        ag = c.get("budget")
        if ag:
            reach = "; ".join(f"{r['seeds']} seeds per framework: " + (
                f"{r['streams']} streams ({r['episodes']:,} sweep episodes, P {r['p']:.2f})"
                if r["streams"] else f"not within {BUDGET_STREAMS[-1]} streams") for r in ag["rows"])
            truth = ("both frameworks follow this control's mean centred curve" if ag["want"] == "agree"
                     else "each group follows its own mean centred curve as measured")
            margin = f" (margin +-{100 * ag['delta']:.0f} pp)" if ag["want"] == "agree" else ""
            lines.append(f"- the budget at which the framework verdict says \"{ag['want']}\"{margin} with probability "
                         f"{ag['power']:.1f} when {truth} (seeds' own SD {100 * ag['seed_sd_own']:.1f} pp, stream noise "
                         f"as measured; {ag['draws']} draws through compare's decision, {c['games_per_stream']:.0f} "
                         f"games per stream): {reach}; this control's own design ({ag['here']['seeds']} seeds, "
                         f"{ag['here']['streams']} streams): P {ag['here']['p']:.2f}")
        k = c["cost"]
        lines.append(f"- cost: {k['sweep_episodes']:,} sweep episodes ({k['sweep_s'] / 60:.0f} min of game play), "
                     f"{k['train_episodes']:,} training episodes ({k['train_s'] / 60:.0f} min of training steps)")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def doc_block(text: str) -> str | None:
    if START not in text or END not in text:
        return None
    return text[text.index(START): text.index(END) + len(END)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compact")
    c.add_argument("--from", dest="src", type=Path, default=ROOT / "runs" / "controls")
    v = sub.add_parser("view", help="one control as a sweep folder of its own, for twinrun compare")
    v.add_argument("name", choices=list(CONTROLS))
    v.add_argument("--to", type=Path, required=True)
    f = sub.add_parser("findings")
    f.add_argument("--write", action="store_true", help="put the block into docs/findings.md")
    a = ap.parse_args(argv)
    if a.cmd == "compact":
        if not (a.src / "sweep" / "sweep.json").is_file():
            print(f"--from: {str(a.src)!r} holds no controls sweep (fix: the --out of controls.py)", file=sys.stderr)
            return 2
        runs = compact(a.src)
        print(f"{DATA / 'sweep'}: {len(runs)} run(s) trained and swept: {', '.join(runs) or 'none'}")
        with tempfile.TemporaryDirectory() as tmp:
            for name in CONTROLS:
                ok = control_view(name, Path(tmp) / name) is not None
                print(f"  {name}: " + ("complete" if ok else "not every run of it is trained and swept yet"))
        return 0
    if a.cmd == "view":
        if a.to.exists() and any(a.to.iterdir()):
            print(f"--to: {str(a.to)!r} is not empty (fix: a new folder)", file=sys.stderr)
            return 2
        if control_view(a.name, a.to) is None:
            print(f"{a.name}: not every run of it is committed under {DATA / 'sweep'} (fix: analyse.py compact "
                  "--from the controls folder)", file=sys.stderr)
            return 2
        print(f"{a.to}: the {a.name} control as a sweep folder (twinrun compare {a.to} --baseline baseline)")
        return 0
    block = render(findings())
    if not a.write:
        print(block)
        return 0
    text = FINDINGS.read_text(encoding="utf-8")
    old = doc_block(text)
    if old is None:
        print(f"{FINDINGS}: no {START!r} ... {END!r} markers (fix: add them where the block goes)", file=sys.stderr)
        return 2
    FINDINGS.write_text(text.replace(old, block), encoding="utf-8")
    print(f"wrote the findings block of {FINDINGS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
