"""The real-training controls' findings, from their committed rows (issue 40).

Three jobs:

* ``python experiments/controls/analyse.py compact --from runs/controls`` copies what the findings rest on out of a
  controls folder (experiments/controls/controls.py) into one sweep folder, ``experiments/controls/data/sweep/``:
  every run trained and fully swept (sweep.json with their arms and the baseline, one compact row per game: the
  fields ``twinrun compare`` reads, without curator ops and paths) and each run's metrics.jsonl
  (``metrics/<run>.jsonl``). Each row is stored once (22 MB for 28 runs, 0.7 MB as a tar.gz: git stores them
  compressed), committed beside the numbers it gives; the controls are views of it. ``compact --add --from DIR`` adds the runs of a later controls folder
  (trained after the committed runs' checkpoints were gone) to it instead, when that folder's sweep played the
  same games under the same stream plans (:func:`add`).
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
* ``seeds``: the TRL seeds against each other (the seed spread, run pair by run pair);
* ``positive-5``: the positive control at five seeds per group (the first one's budget asked for six);
* ``seeds-verl``: the verl seeds' spread (seeds 0-4);
* ``positive-broken``: TRL at ten times the rate (seeds 0-2), past the rate that breaks the tiny curator, against
  verl seeds 0-2 trained on the same machine (must say "differ": a construction this machine resolves in hours,
  where lr / 10 did not);
* ``positive-6``: the slow-rate positive control again, on the second machine, at six seeds per group;
* ``machines``: verl seeds 0-2 against the same seeds trained on another machine, whose rebuilt warm start is
  another model (the same algorithm: must not say "differ").

What each control can decide and what a verdict would cost (the seed spread, the paper-shaped MDEs, the verdict
budget) is in power.py beside this file.
"""

from __future__ import annotations

import argparse
import importlib.util
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


def _load_power() -> Any:
    """power.py beside this file, under a name of its own (this folder is not a package; no sys.path edit)."""
    spec = importlib.util.spec_from_file_location("twinrun_controls_power", Path(__file__).with_name("power.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


power = _load_power()

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
    # the positive control grown toward the size its first reading's budget asked for (6 seeds per group, the same
    # 4 streams): five seeds per group are trained and swept; the sixth (verl-s5, trlslow-s5) was still running
    "positive-5": {"runs": [f"trlslow-s{i}" for i in range(5)] + [f"verl-s{i}" for i in range(5)],
                   "truth": "shapes differ (lr / 10)",
                   "groups": {f"trlslow-s{i}": ("trl-lr/10", i) for i in range(5)}, "budget": "differ"},
    "seeds-verl": {"runs": [f"verl-s{i}" for i in range(5)], "truth": "same algorithm, same framework",
                   "seed_spread": True},
    # a construction a few hours of this machine resolve (lr / 10 changes the shape by less than the seeds' spread):
    # TRL at ten times the rate, past the one that broke the tiny curator's tool-call format, against verl's seeds
    # trained on the same machine (verl2: the warm start is each machine's rebuild, see "machines")
    "positive-broken": {"runs": [f"trlhigh-s{i}" for i in range(3)] + [f"verl2-s{i}" for i in range(3)],
                        "truth": "shapes differ (lr x 10 breaks the curator)",
                        "groups": {f"trlhigh-s{i}": ("trl-lrx10", i) for i in range(3)}, "budget": "differ"},
    # the slow-rate positive control again, all on the second machine (one warm start) and at six seeds per group,
    # at these 4 streams (positive-5's budget put it below 0.8 power: it asked for 8 streams at six seeds)
    "positive-6": {"runs": [f"trlslow2-s{i}" for i in range(6)] + [f"verl2-s{i}" for i in range(6)],
                   "truth": "shapes differ (lr / 10)",
                   "groups": {f"trlslow2-s{i}": ("trl-lr/10", i) for i in range(6)}, "budget": "differ"},
    # one framework, one spec, the same seeds, trained on two machines: the warm start is rebuilt from the same seed
    # by each machine's cache, and another CPU's float rounding makes it another model (it samples other tokens)
    "machines": {"runs": [f"verl-s{i}" for i in range(3)] + [f"verl2-s{i}" for i in range(3)],
                 "truth": "same algorithm (the warm start rebuilt on another machine)",
                 "groups": {f"verl2-s{i}": ("verl-rebuilt", i) for i in range(3)}},
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


def _swept_runs(src: Path, plan: dict[str, Any], candidates: set[str]) -> tuple[dict[str, list[dict[str, Any]]],
                                                                              list[str]]:
    """A controls folder's eval rows by arm, and those of the candidate runs that are trained (their metrics.jsonl)
    and fully swept (every arm of theirs holds a row per game)."""
    from twinrun.core.records import read_jsonl

    n = len(plan["games"])
    rows: dict[str, list[dict[str, Any]]] = {}
    for a in plan["arms"]:
        f = src / "sweep" / "arms" / f"{a['arm']}.jsonl"
        rows[a["arm"]] = [r for r in read_jsonl(f) if r.get("kind") == "eval"] if f.exists() else []
    runs = sorted(r for r in candidates
                  if (src / "runs" / r / "metrics.jsonl").is_file()
                  and any(a.get("run") == r for a in plan["arms"])
                  and all(len(rows[a["arm"]]) >= n for a in plan["arms"] if a.get("run") == r))
    return rows, runs


def compact(src: Path, dst: Path = DATA / "sweep") -> list[str]:
    """Copy every run of a controls folder (src: its runs/ and sweep/) that is trained and fully swept (every arm
    complete) into one compact sweep folder (dst): sweep.json with those runs' arms and the baseline, one compact
    row per game, each run's metrics.jsonl. The controls are views of it (:func:`control_view`): a row is stored
    once, whichever controls use it. Returns the runs written."""
    from twinrun.core.records import atomic_write_json, atomic_write_text

    plan = json.loads((src / "sweep" / "sweep.json").read_text(encoding="utf-8"))
    n = len(plan["games"])
    rows, runs = _swept_runs(src, plan, {r for c in CONTROLS.values() for r in c["runs"]})
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


# what must be equal for a later sweep's rows to join the committed folder's blocks: the same games, the same stream
# plans (stream r's order, executor seeds and curator seed, a function of these: twinrun.core.sweeps.plan.stream_plan)
# and the same executor
SAME_PLAN = ("games_hash", "seed", "streams", "stream_plans", "executor", "executor_settings_hash", "split")


class AddError(ValueError):
    pass


def add(src: Path, dst: Path = DATA / "sweep") -> list[str]:
    """Add the runs of a later controls folder (src) to the committed sweep folder (dst), for runs trained after the
    folder's own runs' checkpoints are gone (they live outside the repository). Only runs that are trained, fully
    swept and not already in dst; refused (before anything is written) unless src's sweep played the same games
    under the same stream plans and executor as dst's (SAME_PLAN), so that stream r of an added run is the same
    block as stream r of every committed arm. The added rows take dst's sweep id (compare reads one sweep per
    folder); the sweep they were played in is kept on each row (``played_in``) and in sweep.json's ``added``
    (with its evaluation dtype and code version). dst's baseline is kept: src's replay of it is not needed."""
    from twinrun.core.records import atomic_write_json, atomic_write_text

    have = json.loads((dst / "sweep.json").read_text(encoding="utf-8"))
    plan = json.loads((src / "sweep" / "sweep.json").read_text(encoding="utf-8"))
    differ = [k for k in SAME_PLAN if have.get(k) != plan.get(k)]
    if differ:
        raise AddError(f"--from: {str(src)!r}'s sweep {plan.get('sweep_id')} differs from the committed sweep "
                       f"{have.get('sweep_id')} in {', '.join(differ)}: its streams are not the committed blocks "
                       "(fix: sweep the new runs with the spec, seed and --streams the committed rows were "
                       "played with)")
    committed = {a.get("run") for a in have["arms"]}
    rows, runs = _swept_runs(src, plan, {r for c in CONTROLS.values() for r in c["runs"]} - committed)
    if not runs:
        return []
    arms = [dict(a, run_dir=None, checkpoint_path=None, checkpoint_stat=None)
            for a in plan["arms"] if a.get("run") in runs]
    for a in arms:
        atomic_write_text(dst / "arms" / f"{a['arm']}.jsonl", "".join(
            json.dumps(dict(compact_row(r), sweep_id=have["sweep_id"], played_in=r.get("sweep_id")), sort_keys=True)
            + "\n" for r in rows[a["arm"]]))
    for run in runs:
        shutil.copyfile(src / "runs" / run / "metrics.jsonl", dst / "metrics" / f"{run}.jsonl")
    added = {"sweep_id": plan.get("sweep_id"), "runs": runs, "curator_dtype": plan.get("curator_dtype"),
             "twinrun_version": plan.get("twinrun_version"), "spec_hash": plan.get("spec_hash")}
    # sweep.json last: a run is in the folder once its arms are (a killed add leaves files no view reads)
    atomic_write_json(dst / "sweep.json", dict(have, arms=have["arms"] + arms,
                                               added=[*(have.get("added") or []), added]))
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


def figure_path(name: str) -> Path:
    """Where docs/findings.md's figure of a control is (compare's framework-curves plot of it)."""
    return FINDINGS.parent / "img" / f"controls-{name}.png"


def findings(data_root: Path = DATA, figures: bool = False) -> dict[str, Any]:
    """Every committed control through compare (the report's own function and default settings); with figures,
    each control that compares frameworks is drawn by compare's own plot to :func:`figure_path`."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="controls-") as tmp:
        for name in CONTROLS:
            data = control_view(name, Path(tmp) / name, data_root / "sweep")
            if data is not None:
                out[name] = _control_findings(name, data, figures)
    return out


def compare_control(name: str, data: Path) -> dict[str, Any]:
    """compare's result for one control's sweep folder (a :func:`control_view`), its groups named."""
    from twinrun.core.compare import CompareSettings, compare

    groups = tuple((run, fw, seed) for run, (fw, seed) in CONTROLS[name].get("groups", {}).items())
    return compare([str(data)], "baseline", CompareSettings(groups=groups))


def _control_findings(name: str, data: Path, figure: bool = False) -> dict[str, Any]:
    """One control's sweep folder (a :func:`control_view`) through compare, and what is derived from it."""
    from twinrun.core.compare import plots

    res = compare_control(name, data)
    if figure and plots.framework_comparisons(res):
        plots.plot_framework_curves(res, figure_path(name))
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
    c["paper"] = power.paper_shaped(c)
    c["budget"] = power.verdict_budget(c, CONTROLS[name]["budget"]) if CONTROLS[name].get("budget") else None
    c["seed_spread"] = power.seed_spread(c) if CONTROLS[name].get("seed_spread") else None
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
        if any(cmp.get("checkpoints") for cmp in c["frameworks"]):
            rel = figure_path(name).relative_to(FINDINGS.parent).as_posix()
            lines.append(f"- figure: ![{name}: each framework's seeds and mean curve; the difference of the centred "
                         f"means with its 90% band]({rel})")
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
            lines.append(f"- a sweep shaped like the paper's ({power.PAPER['games']} games, one stream, {power.PAPER['checkpoints']} "
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
                if r["streams"] else f"not within {power.BUDGET_STREAMS[-1]} streams") for r in ag["rows"])
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
    c.add_argument("--add", action="store_true", help="add the folder's new runs to the committed rows instead of "
                   "replacing them (runs trained after the committed runs' checkpoints are gone)")
    v = sub.add_parser("view", help="one control as a sweep folder of its own, for twinrun compare")
    v.add_argument("name", choices=list(CONTROLS))
    v.add_argument("--to", type=Path, required=True)
    f = sub.add_parser("findings")
    f.add_argument("--write", action="store_true", help="put the block into docs/findings.md and draw its figures "
                   "(docs/img/controls-*.png)")
    a = ap.parse_args(argv)
    if a.cmd == "compact":
        if not (a.src / "sweep" / "sweep.json").is_file():
            print(f"--from: {str(a.src)!r} holds no controls sweep (fix: the --out of controls.py)", file=sys.stderr)
            return 2
        try:
            runs = add(a.src) if a.add else compact(a.src)
        except AddError as e:
            print(e, file=sys.stderr)
            return 2
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
    block = render(findings(figures=a.write))
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
