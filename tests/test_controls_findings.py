"""docs/findings.md states what the real-training controls found (issue 40): its generated block must be what
experiments/controls/analyse.py computes from the committed rows (experiments/controls/data/rows.jsonl.gz),
through compare's own function. A change to compare that moves a finding turns this red; so does an edited number in the page."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest

# compare over the 28 committed runs and the budgets' Monte Carlo (minutes on 2 cores): the slow tier, which CI runs
pytestmark = pytest.mark.slow

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
    """Each row is committed once (experiments/controls/data/rows.jsonl.gz); a control is cut from it with its runs
    and the baseline only, and not at all when one of its runs is missing."""
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


def _text():
    return " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())


def _table(first_cell):
    """The page's first table (the verdicts) by its rows' first cell."""
    return _rows_after(f"| {first_cell} | truth |")


def _cmp(c):
    (cmp,) = c["frameworks"]
    return cmp


def _short(verdict):
    return verdict.removesuffix(" at this sample size")


def test_each_control_is_read_under_its_seed_design():
    """analyse.py passes each control's design to compare, and compare used it; where the seeds pair by number,
    compare's auto would pair them too (the committed rows record no start), so machines is independent by choice,
    and the unpaired negative control's seeds cannot pair."""
    import numpy as np

    from twinrun.core.compare.curves import Curve
    from twinrun.core.compare.frameworks import seed_pairing

    an = _analyse()
    f = _findings()
    read = {n: c for n, c in f.items() if c["frameworks"] and _cmp(c).get("anova")}
    assert set(read) >= {"pilot", "negative", "positive", "positive-5", "positive-6", "positive-broken", "machines"}
    for name, c in read.items():
        assert _cmp(c)["seed_design"]["design"] == an.CONTROLS[name]["design"] == c["seed_design"], name
        curves = {fw: [Curve(run=g["run"], steps=np.arange(1, 9), arm_idx=np.arange(8), lifts=np.zeros(8),
                             boot=np.zeros((1, 8)), reliability=1.0, framework=fw, seed=g["seed"]) for g in gs]
                  for fw, gs in c["groups"].items()}
        auto = seed_pairing(*curves.values(), "auto", plans=(True, "crossed"))["design"]
        assert auto == ("independent" if name.startswith("negative-unpaired") else "paired"), name
    assert an.CONTROLS["machines"]["design"] == "independent"


def test_the_verdict_table_is_the_blocks():
    f = _findings()
    rows = _table("control")
    read = [n for n, c in f.items() if c.get("readings")]  # every control with a framework verdict is in the table
    assert set(read) >= {"pilot", "negative", "positive", "positive-5", "positive-6", "positive-broken", "machines"}
    for name in read:
        c, row = f[name], rows[name]
        cmp = _cmp(c)
        p, split = cmp["interaction"]["p_value"], c["readings"]["independent"]["p_value"]
        want = f"{_short(cmp['verdict'])} (p {_p(p, 3 if p < 0.05 else 2)})"
        assert row[1] == c["seed_design"] and want in row[2].replace("**", ""), (name, row, want)
        truth_differs = name.startswith("positive")  # the others' truth is one algorithm
        claims = cmp["verdict"] in ("shapes differ", "co-move, profiles differ")
        assert claims == truth_differs and row[3].startswith("yes"), name
        assert row[4] == _p(split, 3 if split < 0.1 else 2), (name, row[4], split)


def _p(p, digits=2):
    return "< 0.001" if p < 0.001 else f"{p:.{digits}f}"


def test_what_changed_is_the_blocks():
    """The section on paired seeds quotes the paired and split-plot readings, r with its interval and the band."""
    f = _findings()
    text = _text()
    neg, pilot, mach, six = f["negative"], f["pilot"], f["machines"], f["positive-6"]
    assert (f"The negative control reads p {_cmp(neg)['interaction']['p_value']:.2f} paired, the pilot "
            f"{_cmp(pilot)['interaction']['p_value']:.2f}, and machines {_cmp(mach)['interaction']['p_value']:.2f} "
            f"under its independent design ({mach['readings']['paired']['p_value']:.2f} if read paired)") in text
    for name, label in ((neg, "the negative control's"), (six, "positive-6's"), (pilot, "the pilot's")):
        cmp = _cmp(name)
        lo, hi = cmp["pearson_ci"]
        assert lo <= cmp["pearson"] <= hi
        assert f"{label} r {cmp['pearson']:.2f} [{lo:.2f}, {hi:.2f}]" in text, label
    for c in f.values():  # every r the block states lies in its interval
        for cmp in c["frameworks"]:
            if cmp.get("pearson") is not None:
                assert cmp["pearson_ci"][0] <= cmp["pearson"] <= cmp["pearson_ci"][1]
    hw = lambda c: 100 * _cmp(c)["equivalence"]["half_width_max"]
    assert f"{hw(neg):.1f} pp at the negative control's three seeds" in text and f"{hw(pilot):.1f} pp at the pilot's two" in text
    assert _cmp(neg)["seed_design"]["design"] == "paired"
    for name in ("positive", "positive-5", "positive-6"):
        assert _cmp(f[name])["verdict"] == "shapes differ", name
    assert "lr / 10 says \"shapes differ\" at three, five and six seeds per group" in text


def test_permutation_ranks_are_recomputed_by_brute_force():
    """Every split of a control's runs into its two groups' sizes (independent), every within-seed swap (paired),
    each F from shape's own tests, counted here without permute.py; the true labelling's F is compare's own for the
    control's design; the page's table quotes the ranks."""
    from itertools import combinations, product

    import numpy as np

    from twinrun.core.compare import shape

    an = _analyse()
    f = _findings()
    perm_rows = _rows_after("| control | independent: splits")
    checked = 0
    for name, c in f.items():
        m = an.group_matrices(c)
        if m is None:
            continue
        _, _, a, b, same = m
        runs = np.vstack([a, b])
        n_a = a.shape[0]
        true = shape.profile_anova({"x": a, "y": b})["statistic"]
        fs = set()
        for s in combinations(range(len(runs)), n_a):
            rest = [i for i in range(len(runs)) if i not in s]
            fs.add((tuple(sorted((tuple(s), tuple(rest)))), shape.profile_anova({"x": runs[list(s)], "y": runs[rest]})["statistic"]))
        fs = [v for _, v in fs]
        rank = sum(x >= true * (1 - 1e-9) for x in fs)
        rd = c["readings"]["independent"]["permutation"]
        assert (rd["rank"], rd["n"]) == (rank, len(fs)), name
        got = {"independent": f"rank {rank} of {len(fs)}"}
        if same:
            ptrue = shape.paired_profile_anova(a, b)["statistic"]
            pf = {}
            for bits in product((0, 1), repeat=n_a):
                sw = [i for i, x in enumerate(bits) if x]
                a2, b2 = a.copy(), b.copy()
                a2[sw], b2[sw] = b[sw], a[sw]
                key = min(tuple(bits), tuple(1 - x for x in bits))
                pf[key] = shape.paired_profile_anova(a2, b2)["statistic"]
            prank = sum(x >= ptrue * (1 - 1e-9) for x in pf.values())
            pd = c["readings"]["paired"]["permutation"]
            assert (pd["rank"], pd["n"]) == (prank, len(pf)), name
            got["paired"] = f"rank {prank} of {len(pf)}"
        own = c["readings"][c["seed_design"]]
        assert abs(own["statistic"] - _cmp(c)["anova"]["statistic"]) < 1e-9, name
        assert perm_rows[name][0] == got["independent"] and perm_rows[name][1] == got.get("paired", "-"), name
        checked += 1
    assert checked >= 7
    # the negative control: the true split ranks last of ten, and the four largest splits keep seed 1's two runs
    # on one side
    neg = f["negative"]
    _, _, a, b, _ = an.group_matrices(neg)
    assert neg["readings"]["independent"]["permutation"]["rank"] == 10
    runs = np.vstack([a, b])
    splits = []
    for s in combinations(range(6), 3):
        if 0 in s:
            rest = [i for i in range(6) if i not in s]
            splits.append((shape.profile_anova({"x": runs[list(s)], "y": runs[rest]})["statistic"], set(s)))
    top4 = sorted(splits, key=lambda t: -t[0])[:4]
    assert all((1 in s) == (4 in s) for _, s in top4)  # rows 1 and 4: trl-s1 and verl-s1
    assert not all((1 in s) == (4 in s) for _, s in sorted(splits, key=lambda t: -t[0])[4:])
    text = _text()
    assert "The four largest split Fs put both seed-1 runs on one side" in text
    assert f["positive-broken"]["readings"]["independent"]["permutation"]["rank"] == 1
    assert f["positive-broken"]["readings"]["paired"]["permutation"]["rank"] == 1


def test_the_budget_section_is_the_blocks():
    f = _findings()
    text = _text()
    sm = f["positive-6"]["seed_model"]
    assert (f"pooled over the {sm['runs']} runs of the learning arm at its rate and at lr / 10 (the groups "
            f"{', '.join(sm['groups'][:-1])} and {sm['groups'][-1]})") in text
    assert f"A seed's own deviation is {100 * sm['sd_own']:.1f} pp per checkpoint" in text
    assert f"{100 * sm['sd_shared']:.1f} pp of it ({100 * sm['shared_share']:.0f}% of the variance)" in text
    rows = {k.split(" ")[0]: v for k, v in _rows_after("| control | first draw").items()}
    for name in ("positive-5", "positive-6"):
        ck, c = f[name]["check"], f[name]
        row = rows[name]
        assert row[:3] == [f"{ck['iid_independent']:.2f}", f"{ck['profile_independent']:.2f}",
                           f"{ck['profile_paired']:.2f}"], (name, row)
        split, paired = c["readings"]["independent"]["p_value"], c["readings"]["paired"]["p_value"]
        assert row[3] == _p(split, 3 if split < 0.1 else 2) and row[4] == _p(paired, 3), (name, row)
        assert ck["streams"] == 4 and ck["seeds"] == int(name[-1])
        # the first draw was optimistic and the profile draw explains the split-plot's misses
        assert ck["iid_independent"] > ck["profile_independent"] < ck["profile_paired"] and split > 0.05 > paired
    assert f["positive-5"]["check"]["profile_paired"] < 0.5 < f["positive-6"]["check"]["profile_paired"]
    by = lambda name: {r["seeds"]: r for r in f[name]["budget"]["rows"]}
    b6, bb, bn = by("positive-6"), by("positive-broken"), by("negative")
    assert f"needs 6 seeds x {b6[6]['streams']} streams or 8 x {b6[8]['streams']} for 80% power" in text
    assert f"the broken rate 3 x {bb[3]['streams']} streams" in text
    assert f"needs 12 seeds x {bn[12]['streams']} streams ({bn[12]['episodes']:,} sweep episodes)" in text
    assert all(bn[n]["streams"] is None for n in (3, 4, 6, 8))
    assert all(f[n]["budget"]["design"] == "paired" and f[n]["budget"]["model"] == "profile"
               for n in ("negative", "positive-6", "positive-broken"))


def _rows_after(header):
    """The rows of the page's table whose header line starts with `header`, by first cell."""
    lines = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    out = {}
    for ln in lines[start + 2:]:
        if not ln.startswith("| "):
            break
        out[ln.split("|")[1].strip()] = [x.strip() for x in ln.split("|")[2:-1]]
    return out


def test_the_pilots_design_sentence_names_the_rho_it_used(tmp_path):
    """The pilot's streams-needed figures are `twinrun design --pilot --kind shape`'s, which plans with the rho left
    after the stream blocks, not the whole ICC the block quotes beside it: the page names both."""
    import json

    from typer.testing import CliRunner

    from twinrun.cli import app

    an = _analyse()
    view = an.control_view("pilot", tmp_path / "pilot")
    out = {}
    for delta in (10, 5):
        res = CliRunner().invoke(app, ["design", "--pilot", str(view), "--kind", "shape", "--delta", str(delta), "--json"])
        assert res.exit_code == 0, res.output
        out[delta] = json.loads(res.output)
    d10, d5 = out[10], out[5]
    bl = d10["pilot_blocked"]
    assert d10["rho"] == bl["icc"] and d10["streams_design"] == "crossed"
    icc = _findings()["pilot"]["icc"]
    text = _text()
    assert f"Its stream correlation is {icc['estimate']:.3f} [{icc['ci'][0]:.3f}, {icc['ci'][1]:.3f}]" in text
    assert f"rho {bl['icc']:.3f} [{bl['ci'][0]:.3f}, {bl['ci'][1]:.3f}] after the blocks" in text
    assert d5["at_rho_upper"]["streams_needed"] is None
    assert (f"a 10 pp shape difference at one checkpoint then needs {d10['streams_needed']} streams "
            f"({d10['at_rho_upper']['streams_needed']} at that rho's upper bound), a 5 pp one "
            f"{d5['streams_needed']} (none within {d5['max_streams']} at the upper bound)") in text
    assert d10["games_per_stream"] == 32


def test_the_prose_names_every_run_pair_verdict_the_block_states():
    """Every run pair the block calls anything but "no evidence either way" is named, with its verdict (and its p
    where it is not < 0.001), in the section on run pairs; the nine broken-against-verl2 pairs by one phrase. No
    pair named there is "no evidence" in the block."""
    import re

    f = _findings()
    page = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    section = page[page.index("## Run pairs that differ"):page.index("## How to reproduce")]
    bullets = [" ".join(b.split()) for b in section.split("\n- ")[1:]]
    claimed = {(p["a"], p["b"]): p for c in f.values() for p in c["pairs"] if not p["verdict"].startswith("no evidence")}
    broken = {k for k in claimed if k[0].startswith("trlhigh") and k[1].startswith("verl2")}
    assert len(broken) == 9 and all(claimed[k]["verdict"] == "shapes differ" for k in broken)
    assert any("every broken run against every verl2 run, \"shapes differ\"" in b for b in bullets)
    for (a, b), p in claimed.items():
        where = [x for x in bullets if f"{a} vs {b}" in x]
        if (a, b) in broken and not where:
            continue
        assert len(where) == 1 and f"\"{p['verdict']}\"" in where[0], (a, b)
        if p["interaction_p"] >= 0.001:
            assert f"{a} vs {b}" in where[0] and f"p {_p(p['interaction_p'], 3)}" in where[0], (a, b)
    named = set(re.findall(r"([a-z0-9]+-s\d) vs ([a-z0-9]+-s\d)", " ".join(bullets)))
    assert named <= set(claimed), named - set(claimed)
    cv = f["positive-broken"]["curves"]
    fell = {r: next(k for k, v in zip(cv[r]["checkpoints"], cv[r]["lifts"]) if abs(v) < 0.005) for r in cv
            if r.startswith("trlhigh")}
    assert fell["trlhigh-s1"] == fell["trlhigh-s2"] + 1  # "because seed 1 falls one checkpoint later"


def test_the_controls_prose_numbers_are_the_blocks(controls_sweep):
    """The controls one by one: each quoted verdict, F, p and curve fact is recomputed here."""
    import json

    f = _findings()
    text = _text()
    neg, pos, five, six, broken, machines = (f[n] for n in ("negative", "positive", "positive-5", "positive-6",
                                                              "positive-broken", "machines"))
    for c, label in ((neg, "negative"),):
        r, s = c["readings"]["paired"], c["readings"]["independent"]
        assert (f"Read paired: F {r['statistic']:.2f} on ({r['df1']}, {r['df2']}) df, p {r['p_value']:.2f}; split-plot "
                f"F {s['statistic']:.2f} on ({s['df1']}, {s['df2']}) df, p {s['p_value']:.2f}") in text
        assert f"r of the two frameworks' mean curves {_cmp(c)['pearson']:.2f}; the band's half-width " \
               f"{100 * _cmp(c)['equivalence']['half_width_max']:.1f} pp" in text
        assert all(p["verdict"].startswith("no evidence") for p in c["pairs"]) and len(c["pairs"]) == 15
        small = min(c["pairs"], key=lambda p: p["interaction_p"])
        assert (small["a"], small["b"]) == ("verl-s1", "verl-s2") and f"is {small['interaction_p']:.3f})" in text
    for c in (pos, five, six):
        cmp = _cmp(c)
        assert f"**\"{cmp['verdict']}\" (p {cmp['interaction']['p_value']:.3f}).**" in text
    rp, sp = pos["readings"]["paired"], pos["readings"]["independent"]
    assert (f"Within seed the difference is clear (F {rp['statistic']:.2f} on ({rp['df1']}, {rp['df2']}) df); the "
            f"split-plot read F {sp['statistic']:.2f}, p {sp['p_value']:.2f}") in text
    assert f"The split-plot read p {five['readings']['independent']['p_value']:.2f}." in text
    c6 = _cmp(six)
    rise = [100 * (c6[k][-1] - c6[k][0]) for k in ("mean_curve_a", "mean_curve_b")]
    assert f"rises {rise[0]:.1f} pp from checkpoint 1 to 8, verl's {rise[1]:.1f} pp" in text
    c6v = six["curves"]
    assert set(c6v["trlslow2-s5"]["lifts"]) == {c6v["trlslow2-s5"]["lifts"][0]}
    assert f"trlslow2-s5 flat at {100 * c6v['trlslow2-s5']['lifts'][0]:+.1f} pp throughout" in text
    v5 = c6v["verl2-s5"]["lifts"]
    assert f"verl2-s5 falling from {100 * v5[0]:+.1f} to {100 * v5[-1]:+.1f} pp); the split-plot read p " \
           f"{six['readings']['independent']['p_value']:.3f}" in text
    cb = _cmp(broken)
    assert cb["verdict"] == "shapes differ" and f"**\"shapes differ\" (p {_p(cb['interaction']['p_value'])}).**" in text
    rb, sb = broken["readings"]["paired"], broken["readings"]["independent"]
    assert (f"Paired F {rb['statistic']:.2f} on ({rb['df1']}, {rb['df2']}) df; the split-plot F {sb['statistic']:.1f} "
            f"on ({sb['df1']}, {sb['df2']}) df, epsilon {sb['epsilon']:.2f}, p {_p(sb['p_value'])}; r of the mean "
            f"curves {cb['pearson']:.2f}") in text
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
    arms = controls_sweep / "arms"  # the committed rows rebuilt as their sweep folder (conftest.py)
    for r in high:
        kept = [json.loads(ln).get("repo_skills") for k in range(fell[r], 9) for fl in arms.glob(f"{r}@{k}*.jsonl")
                for ln in fl.read_text(encoding="utf-8").splitlines()]
        assert len(kept) == 4 * 32 * (9 - fell[r]) and set(kept) == {0}, r
    cm = _cmp(machines)
    assert cm["verdict"] != "shapes differ"
    assert (f"F {cm['interaction']['statistic']:.2f} on ({cm['interaction']['df1']}, {cm['interaction']['df2']}) "
            f"df, p {cm['interaction']['p_value']:.2f}; r of the mean curves {cm['pearson']:.2f}") in text
    mc = machines["curves"]
    start = lambda runs: ", ".join(f"{100 * mc[r]['lifts'][0]:+.1f}" for r in runs[:-1]) + \
        f" and {100 * mc[runs[-1]]['lifts'][0]:+.1f} pp"
    assert f"{start(verl2)} against {start([f'verl-s{i}' for i in range(3)])}" in text
    sv = f["seeds-verl"]["seed_spread"]
    assert f"verl's five seeds: seed SD {100 * sv['sd']:.1f} pp, the seeds' own {100 * sv['sd_own']:.1f} pp" in text
    assert f"stream noise ({100 * sv['cell_noise_sd']:.1f} pp)" in text
    st = f["seeds"]["seed_spread"]
    assert f"between the three seeds is {100 * st['sd']:.1f} pp" in text
    assert all(p["verdict"].startswith("no evidence") for p in f["seeds"]["pairs"])
    ps = neg["paper"]
    assert (f"above {100 * ps['lift']:.0f} pp [{100 * ps['lift_ci'][0]:.0f}, {100 * ps['lift_ci'][1]:.0f}] "
            f"({100 * ps['lift_independent']:.0f} pp if") in text
    assert (f"above {100 * ps['framework'][2]:.0f} pp with 2 seeds per framework and "
            f"{100 * ps['framework'][3]:.0f} pp with 3") in text
    icc, bl = neg["icc"], neg["blocks"]
    assert (f"**Stream correlation {icc['estimate']:.3f} [{icc['ci'][0]:.3f}, {icc['ci'][1]:.3f}]** over the "
            f"negative control's six runs (design effect {icc['deff']:.2f} at 32 games)") in text
    assert (f"carries {bl['share']:.2f} [{bl['ci'][0]:.2f}, {bl['ci'][1]:.2f}] of the between-stream variance (error "
            f"SD of a stream's lift {100 * bl['sd_nested']:.1f} pp nested, {100 * bl['sd_blocked']:.1f} pp") in text
    timings = (ROOT / "experiments" / "controls" / "data" / "driver-timings.txt").read_text(encoding="utf-8")
    import re

    first, second, *third = re.split(r"\n# 2026-12-0[46]", timings)  # one section per machine

    def secs(section):
        return {kind: sum(int(m.group(2)) for ln in section.splitlines()
                          if (m := re.search(r"\] (train|sweep) .* done in (\d+) s$", ln)) and m.group(1) == kind)
                for kind in ("train", "sweep")}

    one, two = secs(first), secs(second)
    assert f"training took {one['train']:,} s" in text and f"Their sweeps took {one['sweep']:,} s" in text
    assert f"the second machine's runs took {two['train']:,} s of training and {two['sweep']:,} s of sweep" in text
    for section in third:  # the third machine's (issue 50's unpaired runs)
        three = secs(section)
        assert (f"the third machine's runs took {three['train']:,} s of training and {three['sweep']:,} s of "
                "sweep") in text


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
    committed = tmp_path / "data" / "rows.jsonl.gz"  # the committed rows: one file (issue 54), read as a folder
    an.compact(_controls_folder(tmp_path / "old", "first", ["trl-s0"]), committed)
    packed = committed.read_bytes()
    before = _tree(an.rows.unpack(tmp_path / "before", committed))
    # another sweep seed gives other stream plans: refused, nothing written
    other = _controls_folder(tmp_path / "other", "later", ["trlhigh-s0"], seed=1)
    try:
        an.add(other, committed)
        raise AssertionError("add took a sweep with other stream plans")
    except an.AddError as e:
        assert "seed, stream_plans" in str(e) and "first" in str(e)
    assert committed.read_bytes() == packed
    assert an.add(src, committed) == ["trlhigh-s0"]  # trl-s0 is committed already: kept as it was
    dst = an.rows.unpack(tmp_path / "after", committed)
    plan = json.loads((dst / "sweep.json").read_text(encoding="utf-8"))
    assert [a["arm"] for a in plan["arms"]] == ["baseline", "trl-s0@1", "trlhigh-s0@1"]
    assert plan["arms"][-1]["run_dir"] is None and plan["added"][0]["sweep_id"] == "later"
    assert plan["added"][0]["runs"] == ["trlhigh-s0"]
    rows = [json.loads(ln) for ln in (dst / "arms" / "trlhigh-s0@1.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {(r["sweep_id"], r["played_in"]) for r in rows} == {("first", "later")} and "curator_ops" not in rows[0]
    assert (dst / "arms" / "trl-s0@1.jsonl").read_bytes() == before["arms/trl-s0@1.jsonl"]
    assert (dst / "metrics" / "trlhigh-s0.jsonl").is_file()
    after = committed.read_bytes()
    assert an.add(src, committed) == [] and committed.read_bytes() == after  # nothing new: nothing written


def _module(name):
    spec = importlib.util.spec_from_file_location(f"controls_{name}", ROOT / "experiments" / "controls" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_permutation_check_counts_distinct_labellings_and_ranks_a_planted_difference_first():
    import numpy as np

    permute = _module("permute")
    rng = np.random.default_rng(3)
    k = 8
    seed_profile = rng.normal(0, 0.05, (3, k))  # shared by seed i's two runs
    a = seed_profile + np.linspace(0, 0.3, k) + rng.normal(0, 0.01, (3, k))  # a later rise for group a
    b = seed_profile + rng.normal(0, 0.01, (3, k))
    ind, par = permute.check(a, b, "independent"), permute.check(a, b, "paired")
    assert (ind["n"], par["n"]) == (10, 4) and ind["rank"] == 1 and par["rank"] == 1
    assert ind["p"] == 0.1 and par["min_p"] == 0.25 and ind["all"][0] == ind["statistic"]
    # the same runs with their labels swapped at seed 1 are not the truth: their F ranks below
    a2, b2 = a.copy(), b.copy()
    a2[1], b2[1] = b[1], a[1]
    assert permute.check(a2, b2, "paired")["rank"] > 1
    assert len(permute.labellings(np.zeros((5, k)) + rng.normal(0, 1, (5, k)), rng.normal(0, 1, (5, k)),
                                  "independent")) == 126


def test_seed_model_recovers_a_profile_shared_at_a_seed():
    """power.seed_model on planted curves: seeds whose deviation is one profile direction, shared by the two groups'
    runs at a seed on one machine, plus cell noise the blocks state; the model finds the shared share and keeps
    the own covariance to that direction."""
    import numpy as np

    power = _module("power")
    rng = np.random.default_rng(5)
    k, n = 8, 60
    shape_ = np.linspace(1, -1, k)  # a start high or low that fades (centred)
    u = rng.normal(0, 0.06, n)[:, None] * shape_  # shared at seed i
    cell = 0.01
    curves = {}
    for g in ("trl", "verl"):
        v = rng.normal(0, 0.04, n)[:, None] * shape_
        lifts = 0.2 + u + v + rng.normal(0, cell, (n, k))
        curves.update({f"{g}-s{i}": {"checkpoints": list(range(1, k + 1)), "lifts": lifts[i].tolist()}
                       for i in range(n)})
    f = {"seeds": {"curves": curves, "streams": 4,
                   "blocks": {"sigma2_residual": 4 * cell ** 2, "df_residual": 1000}}}
    m = power.seed_model(f)
    want = 0.06 ** 2 / (0.06 ** 2 + 0.04 ** 2)
    assert abs(m["shared_share"] - want) < 0.12, m["shared_share"]
    w = np.linalg.eigvalsh(m["own"])
    assert w[-1] > 20 * w[-2]  # one profile direction carries the seeds' own variation
    draw = power.draw_profiles(m, {"a": np.zeros(k), "b": np.zeros(k)}, 400, 4, True, rng)
    undrawn = power.draw_profiles(m, {"a": np.zeros(k), "b": np.zeros(k)}, 400, 4, False, rng)
    assert np.var(draw["a"] - draw["b"]) < 0.6 * np.var(undrawn["a"] - undrawn["b"])


def _unpaired_reading(name):
    """An unpaired negative control read independent: not "differ", no seed pairs, and its true split is not the one
    with the smallest F among the 10 (its null can fail). -> (compare's framework entry, a, b, permutation check)"""
    permute = _module("permute")
    c = _findings()[name]
    cmp = _cmp(c)
    assert c["seed_design"] == "independent" and cmp["verdict"] not in ("shapes differ", "co-move, profiles differ")
    _, _, a, b, same = _analyse().group_matrices(c)
    assert not same
    ind = permute.check(a, b, "independent")
    assert ind["n"] == 10 and ind["rank"] < ind["n"]
    return cmp, a, b, ind


def test_the_committed_unpaired_negative_control_could_fail_and_does_not():
    """The interim unpaired negative control (TRL seeds 0-2 against verl seeds 3-4, one machine): read independent,
    not "differ", and its true split is not the one with the smallest F (its null can fail); the prose quotes both."""
    cmp, _, _, ind = _unpaired_reading("negative-unpaired-committed")
    assert (f'Read independent it says "no evidence either way" (p {cmp["interaction"]["p_value"]:.2f}), and its true '
            f"split ranks {ind['rank']} of {ind['n']}") in _text()


def test_the_unpaired_negative_control_could_fail_and_does_not():
    """The unpaired negative control's own runs (TRL seeds 10-12 against verl seeds 20-22, trained on one machine),
    read independent: the verdict is not "differ", its true split is not the one with the smallest F (its null can
    fail), and the prose quotes the verdict, p and the rank."""
    cmp, a, b, ind = _unpaired_reading("negative-unpaired")
    assert a.shape[0] == b.shape[0] == 3
    assert (f'The unpaired negative control says "{_short(cmp["verdict"])}" (p {cmp["interaction"]["p_value"]:.2f}) read '
            f"independent, and its true split ranks {ind['rank']} of {ind['n']}") in _text()
