"""docs/findings.md states what the real-training controls found (issue 40): its generated block must be what
experiments/controls/analyse.py computes from the committed rows (experiments/controls/data/), through compare's own
function. A change to compare that moves a finding turns this red; so does an edited number in the page."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _analyse():
    spec = importlib.util.spec_from_file_location("controls_analyse", ROOT / "experiments" / "controls" / "analyse.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def _findings():
    """The committed controls through compare, once per session (the verdict budgets' Monte Carlo takes a minute)."""
    return _analyse().findings()


@pytest.mark.slow  # compare over the committed controls with the verdict budgets' Monte Carlo
def test_findings_page_is_recomputed_from_the_committed_rows():
    an = _analyse()
    block = an.doc_block((ROOT / "docs" / "findings.md").read_text(encoding="utf-8"))
    assert block is not None, "docs/findings.md: the generated findings block's markers are missing"
    assert block == an.render(_findings()), (
        "docs/findings.md disagrees with the committed control rows (fix: python experiments/controls/analyse.py "
        "findings --write, and say in the page what moved)")


def test_compact_rows_keep_what_compare_reads():
    an = _analyse()
    row = {"kind": "eval", "arm": "trl-s0@1", "sweep_id": "s", "games_hash": "g", "n_games": 2, "game_id": "x",
           "game_index": 0, "outcome": "success", "replicate": 1, "position": 2, "run": "trl-s0", "run_seed": 0,
           "checkpoint_step": 1, "role": "checkpoint", "curator_ops": [{"big": "x" * 1000}],
           "provenance": {"backend": "trl", "checkpoint_hash": "h", "host": "vm", "checkpoint": "/abs/path"}}
    out = an.compact_row(row)
    assert "curator_ops" not in out and out["provenance"]["backend"] == "trl" and "host" not in out["provenance"]
    assert {k: out[k] for k in ("arm", "sweep_id", "games_hash", "outcome", "replicate", "position", "run")} == {
        k: row[k] for k in ("arm", "sweep_id", "games_hash", "outcome", "replicate", "position", "run")}


@pytest.mark.slow  # compare over the committed controls with the verdict budgets' Monte Carlo
def test_the_rho_a_one_stream_report_quotes_is_the_pilots():
    """compare's one-stream note quotes the controls' measured rho (twinrun.core.compare.reference): it must be the
    pilot's as compare computes it from the committed rows, interval and stream length included."""
    from twinrun.core.compare import reference as ref

    f = _findings()[ref.CONTROL]
    icc = f["icc"]
    assert round(icc["estimate"], 3) == ref.CONTROLS_ICC
    assert tuple(round(x, 3) for x in icc["ci"]) == ref.CONTROLS_ICC_CI
    assert round(f["games_per_stream"]) == ref.CONTROLS_GAMES_PER_STREAM


def test_streams_doc_quotes_the_sentence_a_one_stream_report_prints():
    from twinrun.core.compare.reference import one_stream_sentence

    assert one_stream_sentence(140) in (ROOT / "docs" / "streams.md").read_text(encoding="utf-8")


@pytest.mark.slow  # compare over the committed controls with the verdict budgets' Monte Carlo
def test_streams_doc_worked_example_matches_the_control():
    """docs/streams.md's worked example quotes the reference control's rho, paper-shaped MDEs and seed spread: they
    must be what analyse.py computes from the committed rows."""
    from twinrun.core.compare.reference import CONTROL

    c = _findings()[CONTROL]
    ps = c["paper"]
    text = " ".join((ROOT / "docs" / "streams.md").read_text(encoding="utf-8").split())
    fw = ps["framework"]
    assert (f"only above {100 * fw[2]:.0f} pp with 2 seeds per framework, {100 * fw[3]:.0f} pp with 3" in text), (
        "docs/streams.md: the worked example's framework MDEs differ from the control's (fix: quote analyse.py's)")
    assert f"seed SD of a run's centred lift {100 * ps['seed_sd']:.1f} pp" in text
    assert f"{100 * ps['seed_sd_own']:.1f} pp once the streams' noise is taken out" in text
    icc = c["icc"]
    assert f"is {icc['estimate']:.3f} [{icc['ci'][0]:.3f}, {icc['ci'][1]:.3f}]" in text
    assert f"above about {100 * ps['lift']:.0f} pp at 80% power" in text
    assert f"{icc['deff']:.2f} times as variable" in text


def test_a_control_is_a_view_of_the_committed_folder_whole_or_not_at_all(tmp_path):
    """Each row is committed once (experiments/controls/data/sweep); a control is cut from it with its runs and the
    baseline only, and not at all when one of its runs is missing."""
    import json

    an = _analyse()
    view = an.control_view("seeds", tmp_path / "seeds")
    assert view is not None
    arms = json.loads((view / "sweep.json").read_text(encoding="utf-8"))["arms"]
    assert {a.get("run") for a in arms if a["role"] != "baseline"} == set(an.CONTROLS["seeds"]["runs"])
    assert sorted(p.stem for p in (view / "arms").glob("*.jsonl")) == sorted(a["arm"] for a in arms)
    an.CONTROLS["missing"] = {"runs": ["trl-s0", "no-such-run"], "truth": "-"}
    try:
        assert an.control_view("missing", tmp_path / "missing") is None
    finally:
        del an.CONTROLS["missing"]


@pytest.mark.slow  # compare over the committed controls with the verdict budgets' Monte Carlo
def test_the_pages_prose_numbers_are_the_blocks():
    """The table and the prose above the generated block quote its verdicts, p-values, powers, budgets and the
    driver's summed timings (experiments/controls/data/driver-timings.txt): each quoted number is recomputed here."""
    import re

    import json

    an = _analyse()
    f = _findings()
    text = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    neg, pos = f["negative"], f["positive"]
    p_neg, p_pos = (c["frameworks"][0]["interaction"]["p_value"] for c in (neg, pos))
    assert f"no evidence either way (p {p_neg:.2f}): not \"differ\"" in text and neg["frameworks"][0]["verdict"] != "shapes differ"
    assert f"no evidence either way (p {p_pos:.2f}): **not yet**" in text
    first = next(r for r in neg["budget"]["rows"] if r["streams"])
    assert f"\"agree\" needs {first['seeds']} seeds x {first['streams']} streams" in text
    six = next(r for r in pos["budget"]["rows"] if r["seeds"] == 6)
    assert f"this design's power for it was {pos['budget']['here']['p']:.2f}, 6 seeds per group give {six['p']:.2f}" in text
    five = f["positive-5"]
    (cmp6,) = five["frameworks"]
    row6 = next(ln for ln in (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines()
                if ln.startswith("| positive-5 |"))
    assert f"{cmp6['verdict'].removesuffix(' at this sample size')} (p {cmp6['interaction']['p_value']:.2f})" in row6
    assert cmp6["verdict"] != "shapes differ" and "**not \"differ\"**" in row6
    assert f"power {five['budget']['here']['p']:.2f} for the difference five seeds hold" in row6
    reach = [r for r in five["budget"]["rows"] if r["streams"]]
    by = {r["seeds"]: r for r in reach}
    assert f"needs {6} seeds x {by[6]['streams']} streams or 8 x {by[8]['streams']}" in row6
    assert f"6 seeds per group x {by[6]['streams']} streams ({by[6]['episodes']:,} sweep episodes)" in text
    here6 = five["budget"]["here"]
    assert f"this design's power for the difference the five seeds hold: {here6['p']:.2f}" in text
    broken, machines = f["positive-broken"], f["machines"]
    (cb,), (cm,) = broken["frameworks"], machines["frameworks"]
    assert cb["verdict"] == "shapes differ" and cm["verdict"] != "shapes differ"
    rows = {ln.split("|")[1].strip(): ln for ln in (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines()
            if ln.startswith("| ")}
    assert f"**shapes differ** (p {an._p(cb['interaction']['p_value'])})" in rows["positive-broken"]
    assert f"{cm['verdict'].removesuffix(' at this sample size')} (p {cm['interaction']['p_value']:.2f})" in rows["machines"]
    an_b = cb["interaction"]
    assert (f"F {an_b['statistic']:.1f} on ({an_b['df1']}, {an_b['df2']}) df, epsilon {an_b['epsilon']:.2f}, "
            f"p {an._p(an_b['p_value'])}") in text
    assert f"this design's power for it: {broken['budget']['here']['p']:.2f}" in text
    cv = broken["curves"]

    def span(runs, k):
        lifts = sorted(cv[r]["lifts"][k - 1] for r in runs)
        return f"{100 * lifts[0]:+.1f} to {100 * lifts[-1]:+.1f} pp at checkpoint {k}"

    high, verl2 = [f"trlhigh-s{i}" for i in range(3)], [f"verl2-s{i}" for i in range(3)]
    assert f"({span(high, 3)})" in text and f"curves rise to {span(verl2, 8)}" in text
    # "fall to the baseline at checkpoint 4 (seed 1: 5) and stay there", the repository empty in every sweep game
    fell = {r: next(k for k, v in zip(cv[r]["checkpoints"], cv[r]["lifts"]) if abs(v) < 0.005) for r in high}
    assert fell == {"trlhigh-s0": 4, "trlhigh-s1": 5, "trlhigh-s2": 4}
    assert all(abs(v) < 0.005 for r in high for k, v in zip(cv[r]["checkpoints"], cv[r]["lifts"]) if k >= fell[r])
    arms = ROOT / "experiments" / "controls" / "data" / "sweep" / "arms"
    for r in high:
        kept = [json.loads(ln).get("repo_skills") for k in range(fell[r], 9) for f in arms.glob(f"{r}@{k}*.jsonl")
                for ln in f.read_text(encoding="utf-8").splitlines()]
        assert len(kept) == 4 * 32 * (9 - fell[r]) and set(kept) == {0}, r
    assert (f"F {cm['interaction']['statistic']:.2f} on ({cm['interaction']['df1']}, {cm['interaction']['df2']}) df, "
            f"p {cm['interaction']['p_value']:.2f}; r of the mean curves {cm['pearson']:.2f}") in text
    assert f"r of the mean curves {cb['pearson']:.2f}" in text
    six = f["positive-6"]
    (c6,) = six["frameworks"]
    assert c6["verdict"] != "shapes differ"
    assert f"{c6['verdict'].removesuffix(' at this sample size')} (p {c6['interaction']['p_value']:.3f}): **not \"differ\"**" \
        in rows["positive-6"] and f"Monte Carlo gave it {six['budget']['here']['p']:.2f}" in rows["positive-6"]
    i6 = c6["interaction"]
    assert (f"F {i6['statistic']:.2f} on ({i6['df1']}, {i6['df2']}) df, epsilon {i6['epsilon']:.2f}, p {i6['p_value']:.3f}; "
            f"the band's half-width {100 * c6['equivalence']['half_width_max']:.1f} pp") in text
    rise = [100 * (c6[k][-1] - c6[k][0]) for k in ("mean_curve_a", "mean_curve_b")]
    assert f"rises {rise[0]:.1f} pp from checkpoint 1 to 8, verl's {rise[1]:.1f} pp" in text
    assert f"the six seeds' own curves give it {six['budget']['here']['p']:.2f}" in text
    assert (f"power {pos['budget']['here']['p']:.2f} with p {p_pos:.2f}, {five['budget']['here']['p']:.2f} with p "
            f"{cmp6['interaction']['p_value']:.2f}") in text
    c6v = six["curves"]
    assert set(c6v["trlslow2-s5"]["lifts"]) == {c6v["trlslow2-s5"]["lifts"][0]}
    assert f"trlslow2-s5 flat at {100 * c6v['trlslow2-s5']['lifts'][0]:+.1f} pp throughout" in text
    v5 = c6v["verl2-s5"]["lifts"]
    assert f"verl2-s5 falling from {100 * v5[0]:+.1f} to {100 * v5[-1]:+.1f} pp" in text
    mc = machines["curves"]
    start = lambda runs: ", ".join(f"{100 * mc[r]['lifts'][0]:+.1f}" for r in runs[:-1]) + \
        f" and {100 * mc[runs[-1]]['lifts'][0]:+.1f} pp"
    assert f"{start(verl2)} against {start([f'verl-s{i}' for i in range(3)])}" in text
    sv = f["seeds-verl"]["seed_spread"]
    assert f"verl's five seeds: seed SD {100 * sv['sd']:.1f} pp, the seeds' own {100 * sv['sd_own']:.1f} pp" in text
    timings = (ROOT / "experiments" / "controls" / "data" / "driver-timings.txt").read_text(encoding="utf-8")
    first, second = timings.split("\n# 2026-12-04")  # one section per machine

    def secs(section):
        return {kind: sum(int(m.group(2)) for ln in section.splitlines()
                          if (m := re.search(r"\] (train|sweep) .* done in (\d+) s$", ln)) and m.group(1) == kind)
                for kind in ("train", "sweep")}

    one, two = secs(first), secs(second)
    assert f"training took {one['train']:,} s" in text and f"their sweeps {one['sweep']:,} s" in text
    assert f"the second machine's runs took {two['train']:,} s of training and {two['sweep']:,} s of sweep" in text


@pytest.mark.slow  # compare over the committed controls with the verdict budgets' Monte Carlo
def test_the_pages_figures_are_compares_plots_of_the_controls(tmp_path, monkeypatch):
    """Each control that compares frameworks links its figure (compare's framework-curves plot of its view), the
    figure is committed, and what the plot draws is the control's mean curves as the block states them."""
    import re

    from twinrun.core.compare import plots

    an = _analyse()
    f = _findings()
    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((img/controls-[\w-]+\.png)\)", text))
    want = {an.figure_path(n).relative_to(ROOT / "docs").as_posix() for n, c in f.items()
            if any(x.get("checkpoints") for x in c["frameworks"])}
    assert linked == want and want, "docs/findings.md: a control's figure link is missing or stale"
    for rel in linked:
        assert (ROOT / "docs" / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"docs/{rel}: not committed (fix: findings --write)"
    saved = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: saved.append(fig) or path)
    res = an.compare_control("negative", an.control_view("negative", tmp_path / "negative"))
    plots.plot_framework_curves(res, tmp_path / "negative.png")
    (cmp,) = f["negative"]["frameworks"]
    thick = [list(ln.get_ydata()) for ln in saved[0].axes[0].get_lines() if ln.get_linewidth() > 2]
    assert thick == [[100 * v for v in cmp["mean_curve_a"]], [100 * v for v in cmp["mean_curve_b"]]]


def _controls_folder(root, sweep_id, runs, *, seed=0, n_games=2):
    """A controls folder as controls.py leaves it (runs/<run>/metrics.jsonl, sweep/sweep.json, sweep/arms/), each
    run one checkpoint x one stream, written by hand: what `add` reads, at the smallest size."""
    import json

    from twinrun.core.sweeps.plan import stream_plan

    games = [{"game_id": f"g{i}", "path": f"/abs/g{i}", "task_type": "pick"} for i in range(n_games)]
    arms = [{"arm": "baseline", "role": "baseline", "run": None, "replicate": 0}]
    arms += [{"arm": f"{r}@1", "role": "checkpoint", "run": r, "replicate": 0, "run_dir": f"/abs/{r}",
              "checkpoint_path": "/abs/ckpt", "checkpoint_step": 1} for r in runs]
    plan = {"sweep_id": sweep_id, "games_hash": "gh", "seed": seed, "streams": 1, "executor": "scripted",
            "executor_settings_hash": "e", "split": "valid_seen", "games": games, "arms": arms,
            "stream_plans": [stream_plan(seed, [g["game_id"] for g in games], 0).__dict__]}
    (root / "sweep" / "arms").mkdir(parents=True)
    (root / "sweep" / "sweep.json").write_text(json.dumps(plan, default=str), encoding="utf-8")
    for a in arms:
        rows = [{"kind": "eval", "arm": a["arm"], "sweep_id": sweep_id, "games_hash": "gh", "n_games": n_games,
                 "game_id": g["game_id"], "game_index": i, "outcome": "success", "run": a["run"],
                 "curator_ops": ["big"], "provenance": {"backend": "trl", "host": "vm"}} for i, g in enumerate(games)]
        (root / "sweep" / "arms" / f"{a['arm']}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for r in runs:
        (root / "runs" / r).mkdir(parents=True)
        (root / "runs" / r / "metrics.jsonl").write_text('{"step": 1}\n', encoding="utf-8")
    return root


def _tree(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_add_joins_later_runs_to_the_committed_blocks_or_refuses_before_writing(tmp_path):
    """Runs trained after the committed runs' checkpoints are gone join the committed folder only when their sweep
    played the same games under the same stream plans (stream r the same block); the added rows take the folder's
    sweep id (compare reads one sweep per folder) and keep the one they were played in."""
    import json

    an = _analyse()
    src = _controls_folder(tmp_path / "src", "later", ["trl-s0", "trlhigh-s0"])
    dst = tmp_path / "data" / "sweep"
    an.compact(_controls_folder(tmp_path / "old", "first", ["trl-s0"]), dst)
    before = _tree(dst)
    # another sweep seed gives other stream plans: refused, nothing written
    other = _controls_folder(tmp_path / "other", "later", ["trlhigh-s0"], seed=1)
    try:
        an.add(other, dst)
        raise AssertionError("add took a sweep with other stream plans")
    except an.AddError as e:
        assert "seed, stream_plans" in str(e) and "first" in str(e)
    assert _tree(dst) == before
    assert an.add(src, dst) == ["trlhigh-s0"]  # trl-s0 is committed already: kept as it was
    plan = json.loads((dst / "sweep.json").read_text(encoding="utf-8"))
    assert [a["arm"] for a in plan["arms"]] == ["baseline", "trl-s0@1", "trlhigh-s0@1"]
    assert plan["arms"][-1]["run_dir"] is None and plan["added"][0]["sweep_id"] == "later"
    assert plan["added"][0]["runs"] == ["trlhigh-s0"]
    rows = [json.loads(ln) for ln in (dst / "arms" / "trlhigh-s0@1.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {(r["sweep_id"], r["played_in"]) for r in rows} == {("first", "later")} and "curator_ops" not in rows[0]
    assert (dst / "arms" / "trl-s0@1.jsonl").read_bytes() == before["arms/trl-s0@1.jsonl"]
    assert (dst / "metrics" / "trlhigh-s0.jsonl").is_file()
    assert an.add(src, dst) == []  # nothing new: nothing written
