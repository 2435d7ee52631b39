"""`twinrun card` (issue 18) from a planted sweep: every number of the card's table is the one `compare --json`
gives, the statement says plainly when nothing survives correction, each checkpoint subfolder loads with
transformers, provenance hashes are the sweep's, and --push without a token or network is one line.

The sweep is planted: a real sweep manifest (`plan_sweep` over real checkpoint folders of a random tiny Qwen3) and
eval rows whose outcomes are drawn with known success probabilities, so the lifts are known in advance."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from twinrun.core.sweeps import sweep as sw
from twinrun.core.compare.card import CardError
from twinrun.core.envs import GameRef
from twinrun.core.records import JsonlWriter, StepMetrics, provenance
from twinrun.core.spec import load_spec

N_GAMES = 80
BASE_P = 0.3


def _plant(root: Path, spec, tiny: Path, lifts: dict[str, dict[int, float]], seed: int = 0) -> Path:
    """Run folders (checkpoints, spec.yaml, metrics.jsonl) + a sweep whose arm outcomes have the given lifts."""
    runs = {}
    for run, curve in lifts.items():
        run_dir = root / "runs" / run
        for step in curve:
            ck = run_dir / "checkpoints" / f"step-{step:06d}"
            shutil.copytree(tiny, ck)
            (ck / "twinrun_step.txt").write_text(f"{run} {step}\n")  # distinct content: distinct hashes
        (run_dir / "spec.yaml").write_text(yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False))
        with JsonlWriter(run_dir / "metrics.jsonl", fsync=False) as w:
            w.write(StepMetrics(step=1, backend=run, reward_mean=0.1, reward_std=0.1, curation_rollouts=4,
                                executor_episodes=12, executor_calls=40, unmeasured_episodes=0, optimizer_updates=1,
                                provenance=provenance(backend=run, framework_version=f"{run}-1.0",
                                                      spec_hash=spec.spec_hash())))
        runs[run] = run_dir
    games = [GameRef("alfworld", f"valid_seen/pick-{i}/t", "pick", "valid_seen") for i in range(N_GAMES)]
    out = root / "sweep"
    plan = sw.plan_sweep(spec, runs, out, games=games, split="valid_seen", executor_settings_hash="exec123")
    rng = np.random.default_rng(seed)
    u = rng.random(N_GAMES)  # common random numbers: arms differ by their success probability only
    for a in plan.arms:
        p = BASE_P + (lifts[a.run][a.checkpoint_step] if a.run else 0.0)
        with JsonlWriter(out / "arms" / f"{a.arm}.jsonl", fsync=False) as w:
            for i, g in enumerate(games):
                w.write(sw.EvalRecord(game_id=g.game_id, task_type="pick", outcome="success" if u[i] < p else "failure",
                                      sweep_id=plan.sweep_id, arm=a.arm, role=a.role, run=a.run,
                                      checkpoint_step=a.checkpoint_step, game_index=i, n_games=N_GAMES,
                                      games_hash=plan.games_hash, provenance=provenance()))
    return out


@pytest.fixture(scope="module")
def tiny(cache_dir) -> Path:
    pytest.importorskip("transformers")
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(cache_dir)


@pytest.fixture(scope="module")
def spec(repo_root):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["curator.model=Qwen/Qwen3-8B"])


def _cli(*args: str):
    from typer.testing import CliRunner

    from twinrun.cli import app

    return CliRunner().invoke(app, list(args))


def _table(readme: str) -> list[dict[str, str]]:
    block = readme.split("## Selected checkpoints", 1)[1].strip().splitlines()
    header = [c.strip() for c in block[0].strip("|").split("|")]
    rows = []
    for line in block[2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def _num(cell: str) -> float:
    return float(cell.replace("+", ""))


def _check_p(cell: str, p: float) -> None:
    if cell == "<0.0001":
        assert p < 1e-4
    else:
        assert abs(float(cell) - p) <= 0.5e-4 + 1e-12, (cell, p)


def test_card_table_matches_compare_json(tmp_path, spec, tiny):
    # lifts chosen so that some arms survive correction clearly, one narrowly and one only before correction
    sweep = _plant(tmp_path, spec, tiny, {"trl": {1: 0.0, 2: 0.35, 3: 0.12}, "verl": {1: 0.05, 2: 0.3, 3: 0.08}})
    res = _cli("compare", str(sweep), "--baseline", "baseline", "--json", "--n-boot", "1000")
    assert res.exit_code == 0, res.output
    cmp_file = tmp_path / "compare.json"
    cmp_file.write_text(res.stdout)
    result = json.loads(res.stdout)
    card = tmp_path / "card"
    res = _cli("card", str(sweep), "--compare", str(cmp_file), "--out", str(card), "--push", str(card))
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[-1].startswith("card: not pushed: HF_HUB_OFFLINE is set")
    readme = (card / "README.md").read_text()

    # front matter
    fm = yaml.safe_load(readme.split("---", 2)[1])
    assert fm["base_model"] == "Qwen/Qwen3-8B" and fm["license"] == "apache-2.0" and fm["datasets"] == ["alfworld"]
    assert {"twinrun", "trl", "verl", "alfworld", "grpo"} <= set(fm["tags"])
    # the model-index the Hub renders: read back by huggingface_hub, one result per number of the table
    from huggingface_hub import ModelCard

    assert fm["model-index"][0]["results"]
    hub = ModelCard(readme).data
    shown = {(e.metric_name, e.metric_config): e.metric_value for e in hub.eval_results}
    picked = {a["arm"]: a for a in result["arms"]}
    table_arms = {r["checkpoint"].strip("`") for r in _table(readme)}
    for arm in table_arms:
        sub = f"{picked[arm]['run']}-step-{picked[arm]['checkpoint']:06d}"
        assert shown[(f"{arm} success rate (%)", sub)] == round(100 * picked[arm]["success_rate"], 2)
        assert shown[(f"{arm} lift over the baseline (pp)", sub)] == round(100 * picked[arm]["lift"], 2)
    assert shown[("baseline (no memory) success rate (%)", "baseline")] == round(
        100 * result["baseline"]["success_rate"], 2)
    assert len(shown) == 2 * len(table_arms) + 1
    assert {e.dataset_split for e in hub.eval_results} == {"valid_seen"}
    # the scripted executor's line names what decides its play, not decoding it never does
    executor_line = next(ln for ln in readme.splitlines() if ln.startswith("- Executor (frozen):"))
    assert "kind scripted" in executor_line and "expert_prob" in executor_line and "max_turns" in executor_line
    assert "temperature" not in executor_line and "max_tokens" not in executor_line

    # the table: each run's peak and final, every number = compare's
    rows = _table(readme)
    arms = {a["arm"]: a for a in result["arms"]}
    want = {}
    for run, c in result["runs"].items():
        want.setdefault(f"{run}@{c['peak_checkpoint']}", set()).add("peak")
        want.setdefault(f"{run}@{max(c['checkpoints'])}", set()).add("final")
    assert {r["checkpoint"].strip("`"): set(r["selected as"].split(", ")) for r in rows} == want
    for r in rows:
        a = arms[r["checkpoint"].strip("`")]
        assert abs(_num(r["success %"]) - 100 * a["success_rate"]) <= 0.05 + 1e-9
        assert abs(_num(r["lift pp"]) - 100 * a["lift"]) <= 0.05 + 1e-9
        lo, hi = (_num(x) for x in r["CI pp"].strip("[]").split(", "))
        assert abs(lo - 100 * a["lift_ci"][0]) <= 0.05 + 1e-9 and abs(hi - 100 * a["lift_ci"][1]) <= 0.05 + 1e-9
        _check_p(r["p"], a["p_value"])
        _check_p(r["adjusted p"], a["p_holm"])
        assert r["family"] == a["family"] and r["subfolder"].strip("`") == f"{a['run']}-step-{a['checkpoint']:06d}"

    # the statement names exactly the arms whose Holm p is below alpha
    alpha = result["settings"]["alpha"]
    survivors = sorted(a["arm"] for a in result["arms"] if a["p_holm"] < alpha)
    assert any(alpha / 50 < a["p_holm"] < alpha for a in result["arms"]), "the plant lost its narrow survivor"
    assert any(a["p_value"] < alpha <= a["p_holm"] for a in result["arms"]), "the plant lost its corrected-away arm"
    stated = re.search(r"(\d+) of (\d+) checkpoint arms survive Holm correction", readme)
    assert stated and int(stated.group(1)) == len(survivors) and int(stated.group(2)) == len(result["arms"])
    assert all(f"`{a}`" in readme.split("survive Holm", 1)[1].split("\n")[0] for a in survivors)
    # the family and its size, and each verdict with the one sentence that says why (compare's, verbatim)
    sizes = sorted({f["size"] for f in result["families"].values()})
    assert f"one family per run of {' / '.join(map(str, sizes))} arms" in readme
    for p in result["pairs"]:
        assert f"**{p['a']} vs {p['b']}: {p['verdict']}.** {p['explanation']}" in readme
    assert f"Criterion (stated before looking): {result['pairs'][0]['criterion']}" in readme
    assert result["frameworks"]["note"] and f"- Note: {result['frameworks']['note']}." in readme

    # provenance: the sweep's checkpoint hashes; each subfolder loads with transformers
    plan = sw.load_plan(sweep)
    for r in rows:
        arm = r["checkpoint"].strip("`")
        assert f"`{plan.arm(arm).checkpoint_hash}`" in readme
        assert sw.checkpoint_hash(card / r["subfolder"].strip("`")) == plan.arm(arm).checkpoint_hash
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sub = rows[0]["subfolder"].strip("`")
    # the push target is the card's own folder (no hub id in tests), so the README's line loads as written
    assert f'from_pretrained("{card}", subfolder="{sub}")' in readme
    model = AutoModelForCausalLM.from_pretrained(str(card), subfolder=sub)
    assert model.config.model_type == "qwen3" and AutoTokenizer.from_pretrained(str(card), subfolder=sub)
    assert "exec123" in readme and plan.games_hash in readme and spec.spec_hash() in readme and "trl-1.0" in readme
    saved = json.loads((card / "card.json").read_text())
    assert {r["arm"] for r in saved["rows"]} == set(want)


def test_nothing_surviving_is_said_plainly_and_select_picks_arms(tmp_path, spec, tiny):
    sweep = _plant(tmp_path, spec, tiny, {"trl": {1: 0.0, 2: 0.02}, "verl": {1: 0.0, 2: -0.02}}, seed=1)
    card = tmp_path / "card"
    res = _cli("card", str(sweep), "--out", str(card), "--select", "verl@1", "--adjust", "bh")
    assert res.exit_code == 0, res.output
    readme = (card / "README.md").read_text()
    assert "**Nothing survives correction.** None of the 4 checkpoint arms" in readme
    assert "Benjamini-Hochberg" in readme
    assert [r["checkpoint"] for r in _table(readme)] == ["`verl@1`"]
    assert sorted(p.name for p in card.iterdir()) == ["README.md", "card.json", "verl-step-000001"]

    bad = _cli("card", str(sweep), "--out", str(tmp_path / "c2"), "--select", "verl@9")
    assert isinstance(bad.exception, CardError)
    assert str(bad.exception).startswith("--select: 'verl@9' is not an arm of the comparison (fix: one of")
    # a checkpoint replaced after its evaluation is never published under the old numbers
    ck = sw.load_plan(sweep).arm("verl@1").checkpoint_path
    (Path(ck) / "twinrun_step.txt").write_text("other weights\n")
    bad = _cli("card", str(sweep), "--out", str(tmp_path / "c3"), "--select", "verl@1")
    assert isinstance(bad.exception, CardError) and "is not the checkpoint the sweep evaluated" in str(bad.exception)
    assert not (tmp_path / "c3").exists()


def test_push_without_a_token_is_one_line_and_keeps_the_folder(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    from twinrun.core.compare.card import push_card

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    (tmp_path / "card").mkdir()
    lines: list[str] = []
    assert push_card(tmp_path / "card", str(tmp_path / "card"), log=lines.append) is None
    assert lines == [f"card: not pushed: no Hugging Face token (fix: `hf auth login` or HF_TOKEN); the card stays in "
                     f"{tmp_path / 'card'}"]


def test_the_executor_settings_a_card_states_are_those_of_its_kind() -> None:
    from twinrun.core.compare.card import executor_settings

    spec = {"kind": "openai", "model": "Qwen/Qwen3-8B", "temperature": 0.4, "top_p": 1.0, "top_k": None,
            "max_tokens": 512, "max_turns": 30, "history": 3, "expert_prob": 1.0, "skill_effect": 0.0}
    assert executor_settings(spec) == {"kind": "openai", "model": "Qwen/Qwen3-8B", "temperature": 0.4, "top_p": 1.0,
                                       "max_tokens": 512, "max_turns": 30, "history": 3}
    assert executor_settings({**spec, "kind": "scripted"}) == {"kind": "scripted", "expert_prob": 1.0,
                                                               "skill_effect": 0.0, "max_turns": 30, "history": 3}
    assert "presence_penalty" not in executor_settings({**spec, "kind": "hf", "presence_penalty": 0.5})
