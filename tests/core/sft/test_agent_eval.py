"""The ScienceWorld evaluation protocol (issue 9 items 4-5): metrics on hand-computed values, the template-copy
metric on hand-written turns, and the episode loop / run on the real ScienceWorld simulator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from twinrun.core.sft.agent_eval import (
    AgentEvalSettings,
    avg_at_1,
    copied_template,
    episode_seed,
    is_template,
    mean_std,
    paired_bootstrap,
    per_variation_means,
    prompt_action_list,
    sample_games,
    success_rate,
    template_copy_counts,
)
from twinrun.core.sft.data import SCIWORLD_ACTIONS, parse_action, sciworld_instruction

NAN = float("nan")

# ------------------------------------------------------------------------------------------------------------
# Template copying, on hand-written replies


def test_prompt_action_list_reads_the_instruction():
    listed = prompt_action_list(sciworld_instruction())
    assert listed == [a for a, _ in SCIWORLD_ACTIONS]
    templates = [a for a in listed if is_template(a)]
    assert "open/close OBJ" in templates and "de/activate OBJ" in templates and "use OBJ [on OBJ]" in templates
    assert "go to LOC" in templates
    # plain commands are not templates: typing them is not copying
    for plain in ("look around", "wait", "wait1", "task", "inventory"):
        assert not is_template(plain)


HAND_WRITTEN = [
    ("Thought: I need the door open.\n\nAction: open/close OBJ", "open/close OBJ"),
    ("Thought: x\n\nAction:  OPEN/CLOSE   obj.", "open/close OBJ"),  # case, spacing, final period ignored
    ("Thought: x\n\nAction: open door to kitchen", None),  # a real command built from the template
    ("Thought: x\n\nAction: use OBJ [on OBJ]", "use OBJ [on OBJ]"),
    ("Thought: x\n\nAction: focus on OBJ", "focus on OBJ"),
    ("Thought: x\n\nAction: go to LOC", "go to LOC"),
    ("Thought: x\n\nAction: look around", None),  # listed, but a command, not a template
    ("Thought: x\n\nAction: open/close door", None),  # not the template literally
    ("Thought: I am not sure what to do.", None),  # no Action: -> first line sent, no copy
    ("Action: de/activate OBJ\nThought: trailing text", "de/activate OBJ"),
]


@pytest.mark.parametrize("reply, template", HAND_WRITTEN)
def test_copied_template_on_hand_written_replies(reply, template):
    templates = prompt_action_list(sciworld_instruction())
    assert copied_template(parse_action(reply), templates) == template


def test_template_copy_share_counts_every_reply():
    templates = prompt_action_list(sciworld_instruction())
    actions = [parse_action(r) for r, _ in HAND_WRITTEN] + [None]  # an empty reply still counts as a reply
    copies, replies = template_copy_counts(actions, templates)
    assert (copies, replies) == (6, 11)


def test_parse_action():
    assert parse_action("Thought: a\n\nAction: go to kitchen") == "go to kitchen"
    assert parse_action("Thought: a\n\nAction:\ngo to kitchen\n") == "go to kitchen"
    assert parse_action("Action: x\nAction: y") == "y"
    assert parse_action("look around") == "look around"
    assert parse_action("   \n") is None


# ------------------------------------------------------------------------------------------------------------
# Scores: negative kept, never clamped


def test_avg_at_1_keeps_negative_scores():
    scores = np.array([[100.0, -100.0, 50.0], [0.0, NAN, 100.0], [-100.0, -100.0, -100.0]])
    np.testing.assert_allclose(avg_at_1(scores), [50.0 / 300.0, 0.5, -1.0])


def test_success_is_score_100_over_measured():
    scores = np.array([[100.0, 99.9, -100.0, NAN], [NAN, NAN, NAN, NAN]])
    rates = success_rate(scores)
    assert rates[0] == pytest.approx(1 / 3) and math.isnan(rates[1])


def test_mean_std_over_passes_uses_ddof_1():
    m, s = mean_std(np.array([0.2, 0.4, 0.9]))
    assert m == pytest.approx(0.5) and s == pytest.approx(math.sqrt(((0.3**2) + (0.1**2) + (0.4**2)) / 2))
    assert mean_std(np.array([0.3])) == (0.3, None)
    assert mean_std(np.array([NAN, NAN])) == (None, None)


def test_per_variation_means():
    scores = np.array([[100.0, -100.0, NAN], [0.0, -50.0, NAN]])
    v = per_variation_means(scores)
    np.testing.assert_allclose(v[:2], [0.5, -0.75])
    assert math.isnan(v[2])


def test_paired_bootstrap_hand_values():
    a = np.array([1.0, 1.0, 1.0, 0.0, NAN])
    b = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    r = paired_bootstrap(a, b, n_boot=2000, seed=1)
    assert r["n_pairs"] == 4 and r["diff"] == pytest.approx(0.75)
    assert 0.0 <= r["ci"][0] <= 0.75 <= r["ci"][1] <= 1.0
    # every resampled mean of {1,1,1,0} is >= 0 and it is 0 only when all four draws are the 0: p = 2 * P(all 0)
    assert r["p_value"] == pytest.approx(2 * 0.25**4, abs=0.01)
    same = paired_bootstrap(a, a, n_boot=500)
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0] and same["p_value"] == 1.0
    assert paired_bootstrap(np.array([NAN]), np.array([1.0]))["diff"] is None


def test_paired_bootstrap_refuses_unpaired_lists():
    with pytest.raises(Exception, match="same list"):
        paired_bootstrap(np.zeros(3), np.zeros(4))


def test_sampling_is_fixed_by_seed_and_independent_of_listing_order():
    class G:
        def __init__(self, i: int):
            self.game_id = f"task/{i}"

    games = [G(i) for i in range(50)]
    a = [g.game_id for g in sample_games(games, 10, seed=3)]
    b = [g.game_id for g in sample_games(list(reversed(games)), 10, seed=3)]
    assert a == b and len(set(a)) == 10
    assert [g.game_id for g in sample_games(games, 10, seed=4)] != a
    assert len(sample_games(games, 500, seed=0)) == 50
    assert episode_seed(0, 1, "task/3") == episode_seed(0, 1, "task/3") != episode_seed(0, 2, "task/3")


def test_settings_defaults_are_the_protocol():
    s = AgentEvalSettings()
    assert (s.passes, s.variations, s.temperature, s.max_rounds, s.max_tokens, s.thinking) == (4, 200, 0.4, 30, 512,
                                                                                                 False)


# ------------------------------------------------------------------------------------------------------------
# The real simulator: one JVM for the module


@pytest.fixture(scope="module")
def sciworld():
    pytest.importorskip("scienceworld")
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv

    catalog = ScienceWorldCatalog("test", tasks=["find-non-living-thing"])
    games = sample_games(catalog.games(), 2, seed=0)
    catalog.close()
    env = SciWorldEnv(gold_path=True)
    yield env, games
    env.shutdown()


def _gold_policy(env):
    """A scripted policy (no model): replies with the simulator's next gold action in the ReAct format."""

    def generate(messages, seed):
        plan = env.expert_plan()
        return f"Thought: follow the gold path.\n\nAction: {plan[0] if plan else 'look around'}"

    return generate


def _template_policy(messages, seed):
    """A scripted policy that copies a template literally every turn (what a weak student does)."""
    return "Thought: open it.\n\nAction: open/close OBJ"


@pytest.mark.sciworld
@pytest.mark.slow
def test_episode_loop_on_real_sciworld(sciworld):
    from twinrun.core.sft.agent_eval import play_react_episode
    from twinrun.core.errors import InfrastructureError

    env, games = sciworld
    gold = play_react_episode(env, games[0], _gold_policy(env), instruction=sciworld_instruction(), max_rounds=30,
                              seed=0)
    assert gold.outcome == "success" and gold.final_score == 100.0 and gold.rounds >= 1
    copy = play_react_episode(env, games[0], _template_policy, instruction=sciworld_instruction(), max_rounds=3,
                              seed=0)
    assert copy.outcome == "failure" and copy.rounds == 3 and copy.actions == ["open/close OBJ"] * 3
    assert template_copy_counts(copy.actions, prompt_action_list(sciworld_instruction())) == (3, 3)

    def down(messages, seed):
        raise InfrastructureError("endpoint down")

    lost = play_react_episode(env, games[0], down, instruction=sciworld_instruction(), max_rounds=3, seed=0)
    assert lost.outcome == "unmeasured" and lost.final_score is None and "endpoint down" in lost.unmeasured_reason

    from twinrun.core.sft.agent_eval import ContextFull

    def fills_up(messages, seed):
        if len(messages) > 3:
            raise ContextFull("full")
        return "Thought: x\n\nAction: look around"

    full = play_react_episode(env, games[0], fills_up, instruction=sciworld_instruction(), max_rounds=5, seed=0)
    assert (full.outcome, full.rounds, full.stopped) == ("failure", 1, "context") and full.final_score is not None
    assert gold.stopped == "done" and copy.stopped == "rounds"


@pytest.mark.sciworld
@pytest.mark.slow
def test_openai_endpoint_arm_on_real_sciworld(sciworld):
    """An arm behind an OpenAI-compatible endpoint (a real loopback HTTP server; the model is scripted): the
    protocol's decoding settings reach the request, and a dead endpoint makes the episode unmeasured."""
    from twinrun.core.sft.agent_eval import openai_generator, play_react_episode
    from twinrun.core.executors import BackgroundLoop
    from twinrun.testing.local_openai import LocalOpenAIServer

    env, games = sciworld
    seen = []

    def responder(req):
        seen.append(req)
        return "Thought: look first.\n\nAction: look around"

    loop = BackgroundLoop(name="test-eval-agent")
    try:
        with LocalOpenAIServer(responder) as srv:
            gen = openai_generator(srv.base_url, "served-model", AgentEvalSettings(), loop=loop)
            res = play_react_episode(env, games[0], gen, instruction=sciworld_instruction(), max_rounds=2, seed=7)
        assert res.outcome == "failure" and res.rounds == 2 and res.actions == ["look around"] * 2
        req = seen[0]
        assert (req["temperature"], req["max_tokens"], req["seed"], req["model"]) == (0.4, 512, 7, "served-model")
        assert req["chat_template_kwargs"] == {"enable_thinking": False}
        assert [m["role"] for m in req["messages"]] == ["user", "assistant", "user"]
        assert [m["role"] for m in seen[1]["messages"]] == ["user", "assistant", "user", "assistant", "user"]
        with LocalOpenAIServer(responder, fail=lambda i, r: 500) as srv:
            settings = AgentEvalSettings()
            gen = openai_generator(srv.base_url, "served-model", settings, loop=loop)
            dead = play_react_episode(env, games[0], gen, instruction=sciworld_instruction(), max_rounds=2, seed=7)
        assert dead.outcome == "unmeasured" and "HTTP 500" in dead.unmeasured_reason
    finally:
        loop.close()


@pytest.mark.sciworld
@pytest.mark.slow
def test_run_with_and_without_skill_resumes_and_feeds_compare(sciworld, tmp_path):
    from twinrun.core.sft.agent_eval import EvalArm, run_agent_eval
    from twinrun.core.compare import CompareSettings, compare
    from twinrun.core.records import read_jsonl
    from twinrun.core.skills.repository import SkillRepo, parse_skill_md

    env, games = sciworld
    games = games[:1]  # simulator resets dominate on a shared CPU: 1 game x 2 passes x 3 arms
    repo = SkillRepo([parse_skill_md(
        "---\nname: find-things\ndescription: Find a non-living thing and move it to the box.\n---\n"
        "# Steps\n1. Focus on a non-living thing.\n2. Move it to the box.\n"
    )])
    gold = _gold_policy(env)
    arms = [
        EvalArm(name="gold", checkpoint="scripted-gold", generate=gold, skill_condition="without",
                compare_group="gold", role="baseline"),
        EvalArm(name="gold+skills", checkpoint="scripted-gold", generate=gold, skill_condition="with", skills=repo,
                skills_source="inline", compare_group="gold", role="checkpoint", run="with-skill:gold",
                checkpoint_step=0),
        EvalArm(name="copier", checkpoint="scripted-copier", generate=_template_policy, skill_condition="without",
                compare_group="copier", role="baseline"),
    ]
    settings = AgentEvalSettings(passes=2, variations=2, max_rounds=4, n_boot=200)
    summary = run_agent_eval(env, games, arms, settings, tmp_path)
    by = {a["arm"]: a for a in summary["arms"]}
    assert by["copier"]["template_copy_share"]["mean"] == 1.0
    assert by["copier"]["avg_at_1"]["mean"] <= 0.0 and by["copier"]["success"]["mean"] == 0.0
    assert by["gold"]["episodes_measured"] == 2 and by["gold"]["avg_at_1"]["mean"] > 0.0
    rows = list(read_jsonl(tmp_path / "episodes.jsonl"))
    assert len(rows) == 2 * 1 * 3
    with_rows = [r for r in rows if r["arm"] == "gold+skills"]
    assert all(r["retrieved_skills"] == ["find-things"] for r in with_rows)
    # arms pair on the same seed per (pass, game)
    seeds = {(r["pass_index"], r["game_id"]): set() for r in rows}
    for r in rows:
        seeds[(r["pass_index"], r["game_id"])].add(r["seed"])
    assert all(len(s) == 1 for s in seeds.values())
    pairs = [c for c in summary["comparisons"] if (c["a"], c["b"]) == ("gold+skills", "gold")]
    assert pairs and pairs[0]["avg_at_1"]["n_pairs"] == 1
    assert pairs[0]["avg_at_1"]["diff"] == 0.0  # the gold policy ignores the skills: same games, same scores
    assert "Avg@1" in summary["table"]
    # a second call finds everything on record: nothing replayed, nothing duplicated
    again = run_agent_eval(env, games, arms, settings, tmp_path)
    assert len(list(read_jsonl(tmp_path / "episodes.jsonl"))) == 6
    assert again["arms"] == summary["arms"]
    # engineer D's compare reads the with/without family as sweep arms (later passes = streams of the same arm)
    result = compare([tmp_path / "compare" / "gold"], baseline="gold", settings=CompareSettings(n_boot=200))
    assert "gold+skills" in {a["arm"] for a in result["arms"]} and result["baseline"]["streams"] == 2
    assert {"gold+skills", "gold+skills#r1"} <= {a["arm"] for a in result["stream_arms"]}
    fam = [a for a in result["arms"] if a["arm"] == "gold+skills"][0]
    assert fam["family"] == "run:with-skill:gold" and fam["streams"] == 2 and fam["n_pairs"] == 2


@pytest.mark.sciworld
@pytest.mark.slow
@pytest.mark.trl
def test_cli_eval_agent_with_and_without_skills(tmp_path):
    """`twinrun eval-agent` end to end: the tiny model, real ScienceWorld, a human-written skill folder."""
    pytest.importorskip("transformers")
    pytest.importorskip("scienceworld")
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.records import read_jsonl

    skills = tmp_path / "skills" / "find-things"
    skills.mkdir(parents=True)
    (skills / "SKILL.md").write_text(
        "---\nname: find-things\ndescription: Find a non-living thing and move it to the box.\n---\n# Steps\n"
        "1. Focus on the thing.\n2. Move it to the box.\n"
    )
    out = tmp_path / "eval"
    args = ["eval-agent", "--checkpoint", "tiny-qwen3", "--cache", str(tmp_path / "models"), "--label", "tiny",
            "--checkpoint", "tiny-qwen3", "--label", "trained", "--task", "find-non-living-thing", "--passes", "2", "--variations", "1", "--max-rounds", "2",
            "--max-tokens", "8", "--n-boot", "200", "--skills", str(tmp_path / "skills"), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "agent evaluation (mean ± std over passes)" in res.output and "tiny+skills" in res.output
    assert f"twinrun compare {out / 'compare' / 'tiny'} --baseline tiny" in res.output
    rows = list(read_jsonl(out / "episodes.jsonl"))
    assert len(rows) == 8 and {r["skill_condition"] for r in rows} == {"with", "without"}
    assert all(r["provenance"]["checkpoint_hash"] for r in rows)
    traj = list(read_jsonl(out / "trajectories.jsonl"))
    assert len(traj) == 8 and all(t["turns"][1]["loss"] is False for t in traj)
    # the first --checkpoint is the base of the skill-free transfer comparison (issue 15 item 8)
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["a"], c["b"]) for c in summary["comparisons"] if c["kind"] == "transfer"] == [("trained",
                                                                                              "tiny+skills")]


@pytest.mark.sciworld
@pytest.mark.slow
def test_skill_free_transfer_pairs_the_trained_model_without_skills_with_the_base_model_with_skills(sciworld,
                                                                                                    tmp_path):
    """SkillGym's comparison (issue 15 item 8): the base model (the first model, ``base``) with skills against the
    trained model without them, paired over the same variations and seeds. Known truth on the real simulator:
    the base policy copies a template whatever its skills say (fails), the trained policy follows the gold path
    (succeeds), so the transfer difference is +1 success per variation; no other pair is labelled transfer."""
    from twinrun.core.sft.agent_eval import EvalArm, run_agent_eval
    from twinrun.core.skills.repository import SkillRepo, parse_skill_md

    env, games = sciworld
    repo = SkillRepo([parse_skill_md(
        "---\nname: find-things\ndescription: Find a non-living thing and move it to the box.\n---\n"
        "# Steps\n1. Focus on a non-living thing.\n2. Move it to the box.\n"
    )])
    arms = [
        EvalArm(name="base", checkpoint="scripted-copier", generate=_template_policy, skill_condition="without",
                compare_group="base", role="baseline", base=True),
        EvalArm(name="base+skills", checkpoint="scripted-copier", generate=_template_policy, skill_condition="with",
                skills=repo, skills_source="inline", compare_group="base", base=True),
        EvalArm(name="trained", checkpoint="scripted-gold", generate=_gold_policy(env), skill_condition="without",
                compare_group="trained", role="baseline"),
    ]
    settings = AgentEvalSettings(passes=1, variations=1, max_rounds=30, n_boot=200)
    summary = run_agent_eval(env, games[:1], arms, settings, tmp_path)
    transfer = [c for c in summary["comparisons"] if c["kind"] == "transfer"]
    assert [(c["a"], c["b"]) for c in transfer] == [("trained", "base+skills")]
    assert transfer[0]["success"]["diff"] == 1.0 and transfer[0]["success"]["n_pairs"] == 1
    assert transfer[0]["avg_at_1"]["diff"] > 0.0
    assert [(c["a"], c["b"]) for c in summary["comparisons"] if c["kind"] == "skills"] == [("base+skills", "base")]
