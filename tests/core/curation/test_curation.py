"""Algorithm 1 curation rollouts on real ALFWorld games: task-group sampling, the session API (sync and async),
a full rollout with a tiny local Qwen3 curator, the loop the curator cannot shorten, shared first positions,
unmeasured positions, records."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from twinrun.core.curation import (
    CurationError,
    CurationRecord,
    CurationRuntime,
    CuratorPrompts,
    TaskGroup,
    TaskGroupSampler,
)
from twinrun.core.curation.context_shape import input_digest
from twinrun.core.envs import EnvPool
from twinrun.core.envs.alfworld import AlfWorldCatalog
from twinrun.core.errors import InfrastructureError
from twinrun.core.executors import Executor, OpenAIPolicy, ScriptedPolicy
from twinrun.core.rewards.judges import JudgeRequest, RulesJudge
from twinrun.core.executors.react import ExecutorPrompts
from twinrun.core.records import JsonlWriter, read_jsonl
from twinrun.core.rewards.composite import whitespace_tokens
from twinrun.core.skills.skill_md import parse_skill_md
from twinrun.core.skills.repository import SkillRepo
from twinrun.core.spec import RewardSpec, load_spec
from twinrun.core.advantages.step_health import StepCounts, check_step_health
from twinrun.core.curation.toolcalls import CURATE_TOOL, format_curate_call
from twinrun.testing.local_openai import LocalOpenAIServer

pytestmark = pytest.mark.alfworld

PICKS = [  # valid_seen pick games whose expert wins in 5-6 steps
    "valid_seen/pick_and_place_simple-Box-None-Dresser-224/trial_T20190907_164104_229696",
    "valid_seen/pick_and_place_simple-Candle-None-Cart-401/trial_T20190909_081908_677973",
    "valid_seen/pick_and_place_simple-Candle-None-Toilet-407/trial_T20190909_055248_059513",
]

SKILL_BODY = "# Steps\n1. Find the object on the receptacles listed first.\n2. Take it and move it to the target.\n"


def skill_md(name: str, body: str = SKILL_BODY) -> str:
    return f"---\nname: {name}\ndescription: Put an object such as a candle in a receptacle such as a cart after finding it.\n---\n{body}"


@pytest.fixture(scope="module")
def catalog(alfworld_data):
    return AlfWorldCatalog(alfworld_data, "valid_seen")


@pytest.fixture(scope="module")
def group(catalog) -> TaskGroup:
    by_id = {g.game_id: g for g in catalog.games()}
    return TaskGroup("test-pick", "pick", tuple(by_id[i] for i in PICKS))


@pytest.fixture(scope="module")
def prompts(repo_root):
    p = repo_root / "experiments" / "prompts"
    return (ExecutorPrompts.from_files(p / "executor_system.md", p / "executor_input.md"),
            CuratorPrompts.from_files(p / "curator_system.md", p / "curator_input.md"))


@pytest.fixture(scope="module")
def pool():
    with EnvPool("alfworld", workers=0, options={"expert_type": "handcoded"}) as p:
        yield p


def runtime(pool, prompts, *, policy=None, max_turns=6, share=False, count_tokens=whitespace_tokens) -> CurationRuntime:
    ex_prompts, cur_prompts = prompts
    executor = Executor(policy or ScriptedPolicy(1.0), ex_prompts, max_turns=max_turns, history=3, settings_hash="ex")
    return CurationRuntime(
        env_name="alfworld", pool=pool, executor=executor, curator_prompts=cur_prompts, reward=RewardSpec(),
        new_repo=lambda: SkillRepo(top_k=5), top_k=5, group_size=3, judge=RulesJudge(), count_tokens=count_tokens,
        share_first_position=share, seed=1, owns_pool=False,
    )


# ------------------------------------------------------------------------------------------------------------
# Task groups


def test_sampler_is_round_robin_distinct_and_stable_across_processes(alfworld_data, repo_root):
    cat = AlfWorldCatalog(alfworld_data, "valid_train")
    s = TaskGroupSampler(cat, 4, groups_per_step=3, seed=9)
    groups = [g for step in range(2) for g in s.step_groups(step)]
    assert [g.task_type for g in groups] == ["pick", "look", "clean", "heat", "cool", "pick2"]
    for g in groups:
        assert len({x.game_id for x in g.games}) == 4 and {x.task_type for x in g.games} == {g.task_type}
        assert TaskGroup.from_row(json.loads(json.dumps(g.to_row()))) == g
    assert s.group(1, 2) == TaskGroupSampler(cat, 4, groups_per_step=3, seed=9).group(1, 2)
    assert s.group(0, 0) != TaskGroupSampler(cat, 4, groups_per_step=3, seed=10).group(0, 0)
    only = TaskGroupSampler(cat, 2, groups_per_step=2, task_types=["cool"], seed=9)
    assert {g.task_type for g in only.step_groups(0)} == {"cool"}
    code = (
        "import json,sys; from twinrun.core.envs.alfworld import AlfWorldCatalog as C; "
        "from twinrun.core.curation import TaskGroupSampler as S; "
        f"print(json.dumps(S(C({str(alfworld_data)!r}, 'valid_train'), 4, groups_per_step=3, seed=9).group(1, 2).to_row()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert json.loads(out) == s.group(1, 2).to_row()  # another process, another hash seed: the same group
    with pytest.raises(CurationError, match="environment.group_size: 50 exceeds the 19 'look' games"):
        TaskGroupSampler(cat, 50, groups_per_step=2, seed=0).group(0, 1)
    with pytest.raises(CurationError, match="group index"):
        s.group(0, 3)


def test_runtime_from_the_smoke_spec(repo_root, alfworld_data):
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    with CurationRuntime.from_spec(spec, environ={"ALFWORLD_DATA": str(alfworld_data)}) as rt:
        assert rt.tools == [CURATE_TOOL] and "curate" in rt.curator_system_prompt and "<!--" not in rt.curator_system_prompt
        groups = rt.sampler.step_groups(0)
        assert [g.task_type for g in groups] == ["pick", "look"] and all(len(g.games) == 3 for g in groups)
        assert rt.executor.policy.name == "scripted" and rt.executor.max_turns == spec.executor.max_turns
        with pytest.raises(CurationError, match="group_size"):
            rt.session(TaskGroup("x", "pick", groups[0].games[:2]), 0)


# ------------------------------------------------------------------------------------------------------------
# Full rollout with a tiny local curator


@pytest.mark.trl
@pytest.mark.slow
@pytest.mark.sampling
def test_full_rollout_with_a_tiny_local_qwen3_curator(pool, prompts, group, tmp_path_factory, tmp_path):
    """|G| = 3. The curator's turns come from a real tiny Qwen3 (random weights, local tokenizer): its sampled
    text is used as-is (turn 2: no tool call, nothing applied) or wrapped into a well-formed `curate` call
    (turn 1: a valid insert; turn 3: a valid update plus an invalid delete), since a random model never emits
    tool calls by itself."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from twinrun.models import build_tiny_qwen3

    path = build_tiny_qwen3(tmp_path_factory.mktemp("models"))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    torch.manual_seed(0)

    rt = runtime(pool, prompts, count_tokens=lambda t: len(tok.encode(t, add_special_tokens=False)))

    def curator(chi: str) -> str:
        msgs = [{"role": "system", "content": rt.curator_system_prompt}, {"role": "user", "content": chi}]
        text = tok.apply_chat_template(msgs, tools=rt.tools, add_generation_prompt=True, tokenize=False)
        ids = tok(text, return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=24, do_sample=True, temperature=1.0, pad_token_id=tok.pad_token_id)
        return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    try:
        session = rt.session(group.to_row(), rollout_index=0)  # a dataset row works as the group
        chi1 = session.start()
        for heading in ("# Task Context", "## Task Description", "## Past Skills", "## Agent Trajectory", "## Result"):
            assert heading in chi1
        assert "## Past Skills\n(none)" in chi1 and "Success" in chi1
        sampled = curator(chi1).replace("---", "")
        turn1 = sampled + "\n" + format_curate_call([{"function": "new_skill_insert", "arguments": {
            "skill_name": "place-found-object", "content": skill_md("place-found-object", SKILL_BODY + sampled)}}])
        chi2 = session.submit(turn1)
        assert chi2 and session.position == 2
        assert "place-found-object" in chi2  # position 2 retrieved the skill position 1's turn wrote
        turn2 = curator(chi2)
        chi3 = session.submit(turn2)  # whatever the model says, the loop moves on
        turn3 = curator(chi3) + format_curate_call([
            {"function": "skill_update", "arguments": {"skill_name": "place-found-object",
                                                       "new_content": skill_md("place-found-object")}},
            {"function": "skill_delete", "arguments": {"skill_name": "no-such-skill"}},
        ])
        assert session.submit(turn3) is None and session.done
        assert session.submit("<tool_call>late</tool_call>") is None  # after the last position: ignored
        result = session.finish()
    finally:
        rt.close()

    rec = result.record
    assert [p.outcome for p in rec.positions] == ["success"] * 3  # the expert executor wins all three
    assert rec.positions_measured == 2
    assert result.reward.r_task.denominator == 2 and result.reward.r_task.value == 1.0
    assert rec.ops_applied == 2 and rec.ops_invalid == 1 and rec.extra_turns_ignored == 1 and rec.turns_missing == 0
    assert [len(p.ops) for p in rec.positions] == [1, 0, 2] and rec.positions[1].no_valid_call
    # r_fc per position: Valid = 1/1, 0 (no op), 1/2 -> (1 + 0 + 0.5) / 3 (pooled it would be 2 valid / 3 ops)
    assert result.reward.r_fc.value == pytest.approx(0.5)
    assert result.reward_under(RewardSpec(call_pooling="pooled")).r_fc.value == pytest.approx(2 / 3)
    assert rec.positions[1].retrieved_skills == ["place-found-object"]
    # the default anchor (position, game, correctness read); the input hash is kept to re-key offline
    assert rec.anchors == [f"p{p.index}|{p.game_id}|success" for p in rec.positions]
    assert [p.input_digest for p in rec.positions] == [input_digest(p.curator_input) for p in result.positions]
    assert sum(result.step_rewards) == pytest.approx(result.total) and len(result.step_rewards) == 3
    assert rec.positions[0].curator_input_tokens == len(tok.encode(chi1, add_special_tokens=False))
    assert result.repo.names() == ["place-found-object"]
    assert len(result.episodes) == 3 and rec.executor_episodes == 3 and rec.first_position_source == "played"
    assert all(e.position == i + 1 and e.executor_settings_hash == "ex" for i, e in enumerate(result.episodes))
    # records are JSONL rows that read back into the schema
    with JsonlWriter(tmp_path / "episodes.jsonl") as ep, JsonlWriter(tmp_path / "rollouts.jsonl") as ro:
        result.write(ep, ro)
    rows = list(read_jsonl(tmp_path / "rollouts.jsonl"))
    assert CurationRecord.model_validate(rows[0]) == rec and len(list(read_jsonl(tmp_path / "episodes.jsonl"))) == 3


# ------------------------------------------------------------------------------------------------------------
# The loop the curator cannot shorten; async; shared first position; unmeasured positions


def test_the_curator_cannot_end_the_loop_early(pool, prompts, group):
    rt = runtime(pool, prompts, max_turns=2)
    try:
        s = rt.session(group, 0)
        with pytest.raises(CurationError, match="not started"):
            s.submit("")
        s.start()
        with pytest.raises(CurationError, match="already started"):
            s.start()
        # the TRL path: the framework parsed the call and invokes the tool with its arguments
        s.submit_operations([{"function": "new_skill_insert",
                              "arguments": {"skill_name": "a-skill", "content": skill_md("a-skill")}}])
        result = s.finish()  # the backend stopped generating after one turn
        assert s.finish() is result
    finally:
        rt.close()
    rec = result.record
    assert [p.outcome for p in rec.positions] == ["failure"] * 3  # two turns are too few to win
    assert rec.turns_missing == 2 and [p.turn_missing for p in rec.positions] == [False, True, True]
    assert result.reward.r_task.denominator == 2 and rec.positions_measured == 2
    assert rec.executor_episodes == 3 and rec.positions[2].retrieved_skills == ["a-skill"]


def test_async_twins_and_shared_first_position(pool, prompts, group):
    rt = runtime(pool, prompts, max_turns=2, share=True)

    async def drive(index: int):  # another event loop than the runtime's (like verl's agent loop)
        s = rt.session(group, index)
        chi = await s.astart()
        while chi is not None:
            chi = await s.asubmit(format_curate_call([]))
        return await s.afinish()

    async def both():
        return await asyncio.gather(drive(0), drive(1))

    try:
        r0, r1 = asyncio.run(both())
    finally:
        rt.close()
    sources = sorted([r0.record.first_position_source, r1.record.first_position_source])
    assert sources == ["played", "shared"]
    assert r0.anchors[0] == r1.anchors[0]  # the same chi_1: one GiGPO anchor group at position 1
    assert r0.positions[0].episode is r1.positions[0].episode
    assert r0.record.executor_episodes + r1.record.executor_episodes == 5  # 6 positions, one episode reused
    assert len(r0.episodes) + len(r1.episodes) == 5
    shared = r0 if r0.record.first_position_source == "shared" else r1
    assert shared.record.positions[0].episode_shared and shared.record.ops_applied == 0


def test_unmeasured_positions_leave_the_denominator(pool, prompts, group):
    def fail(idx, req):  # the endpoint fails during position 2's episode only
        return 500 if idx == 1 else None

    def respond(req):
        return "<think>x</think><action>look</action>"

    with LocalOpenAIServer(respond, fail=fail) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=0)
        rt = runtime(pool, prompts, policy=policy, max_turns=1)
        try:
            s = rt.session(group, 0)
            s.start()
            chi2 = s.submit("")
            assert "## Result\nUnmeasured" in chi2 and "HTTP 500" in chi2
            s.submit("")
            s.submit("")
            result = s.finish()
            counts = StepCounts.from_records([result.record.model_dump()])
            with pytest.raises(InfrastructureError, match="33% of this step's executor episodes were unmeasured"):
                check_step_health(counts, max_unmeasured_share=0.2)
            check_step_health(counts, max_unmeasured_share=0.5)
        finally:
            rt.close()
    assert [p.outcome for p in result.record.positions] == ["failure", "unmeasured", "failure"]
    assert result.reward.r_task.denominator == 1 and result.reward.unmeasured_positions == 1
    assert result.record.positions_measured == 1 and result.record.unmeasured_episodes == 1
    assert result.total is not None  # one measured scored position is enough (min_measured_positions=1)


def test_the_curator_reads_the_judged_correctness_and_records_keep_the_truth(pool, prompts, group):
    """curation.correctness: judged. The self-judge (an OpenAI-compatible endpoint, here a local server) says
    failure, success, then fails (HTTP 500): the curator is shown Failure / Success / Unknown, never the
    environment's win; records keep both, the anchor keys on what was shown, agreement is 1 of 2 known."""
    from twinrun.core.rewards.correctness import OpenAICorrectnessJudge, parse_correctness
    from twinrun.core.records import provenance
    from twinrun.core.advantages.step_metrics import curation_step_metrics

    answers = ['{"SUCCESS": false, "reason": "never put it down"}', "<think>hm</think>\nSUCCESS", None]

    def respond(req):
        return answers[srv.calls - 1]

    with LocalOpenAIServer(respond, fail=lambda i, req: 500 if i == 2 else None) as srv:
        rt = runtime(pool, prompts)
        rt.correctness_judge = OpenAICorrectnessJudge(base_url=srv.base_url, model="m", prompt="Did it succeed?",
                                                      retries=0)
        try:
            s = rt.session(group, 0)
            chis = [s.start(), s.submit(""), s.submit("")]
            s.submit("")
            rec = s.finish().record
        finally:
            rt.close()
    assert [c.split("## Result\n")[1].split()[0] for c in chis] == ["Failure", "Success", "Unknown:"]
    assert [p.outcome for p in rec.positions] == ["success"] * 3  # the expert executor won every game
    assert [p.correctness for p in rec.positions] == ["failure", "success", "unknown"]
    assert rec.correctness_source == "judged" and rec.anchors[0].endswith("|failure")
    row = curation_step_metrics(1, [rec.model_dump(mode="json")], backend="trl", optimizer_updates=1,
                                provenance=provenance(spec_hash="x", run_id="r", backend="trl",
                                                      framework_version="0", seed=0))
    assert row.judge_agreement == pytest.approx(0.5)
    assert parse_correctness("no verdict here") == (None, "no JSON verdict with a SUCCESS key in the answer")
    assert parse_correctness('{"success": "yes"}')[0] is True


class RecordingJudge(RulesJudge):
    """The rules content judge, keeping every request it was asked (what reached the r_cnt judge)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list = []

    def judge(self, request):
        self.requests.append(request)
        return super().judge(request)


@pytest.mark.parametrize("judged", [True, False])
def test_the_content_judge_reads_the_correctness_the_curator_read(pool, prompts, group, judged):
    """r_cnt's judge is told the correctness signal the curator was shown at the position it wrote in: under
    curation.correctness: judged the self-judge's verdict (here "failure" at every position while the expert
    executor wins every game), never the environment's label; under ground_truth the environment's outcome."""
    from twinrun.core.rewards.correctness import OpenAICorrectnessJudge

    with LocalOpenAIServer(lambda req: '{"SUCCESS": false, "reason": "no"}') as srv:
        rt = runtime(pool, prompts)
        rt.judge = RecordingJudge()
        if judged:
            rt.correctness_judge = OpenAICorrectnessJudge(base_url=srv.base_url, model="m", prompt="Did it succeed?",
                                                          retries=0)
        try:
            s = rt.session(group, 0)
            chi = s.start()
            results = []
            while chi is not None:
                results.append(chi.split("## Result\n")[1].split()[0])
                chi = s.submit(format_curate_call([{"function": "new_skill_insert", "arguments": {
                    "skill_name": f"skill-{s.position}", "content": skill_md(f"skill-{s.position}")}}]))
            rec = s.finish().record
        finally:
            rt.close()
    assert [p.outcome for p in rec.positions] == ["success"] * 3  # the environment's label
    shown = "failure" if judged else "success"
    assert results == [shown.capitalize()] * 3  # what the curator read
    assert [r.outcome for r in rt.judge.requests] == [shown] * 3  # what the content judge read
    assert [r.skill.name for r in rt.judge.requests] == ["skill-1", "skill-2", "skill-3"]


@pytest.mark.slow
def test_the_smoke_arms_curator_reads_its_self_judge_not_the_label(repo_root, alfworld_data):
    """The smoke arm as written (scripted executor, rules self-judge wrong on a seeded 20% of episodes): over its
    first three steps' task groups, wherever the self-judge disagrees with the environment the curator input's
    Result is the judged word and not the label, and so is what the r_cnt judge is told; judge_agreement is below 1
    (with a self-judge that always agreed, "judged" and "ground truth" could not be told apart here)."""
    from twinrun.core.records import provenance
    from twinrun.core.advantages.step_metrics import curation_step_metrics

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    assert spec.curation.correctness == "judged" and spec.executor.self_judge_error > 0
    records, disagreed = [], 0
    with CurationRuntime.from_spec(spec, environ={"ALFWORLD_DATA": str(alfworld_data)}, workers=0) as rt:
        rt.judge = RecordingJudge()
        for step in range(3):
            for group in rt.sampler.step_groups(step):
                s = rt.session(group, 0)
                chi, shown = s.start(), []
                while chi is not None:
                    shown.append(chi.split("## Result\n")[1].split()[0])
                    name = f"{group.task_type}-tips-{s.position}"
                    chi = s.submit(format_curate_call([{"function": "new_skill_insert", "arguments": {
                        "skill_name": name, "content": skill_md(name)}}]))
                rec = s.finish().record
                records.append(rec.model_dump(mode="json"))
                for p, word in zip(rec.positions, shown, strict=True):
                    assert word == p.correctness.capitalize(), (p.correctness, p.outcome, word)
                    disagreed += p.correctness != p.outcome
        told = [r.outcome for r in rt.judge.requests]
    assert disagreed > 0
    assert told == [p["correctness"] for r in records for p in r["positions"]]  # one insert per position
    row = curation_step_metrics(1, records, backend="trl", optimizer_updates=1,
                                provenance=provenance(spec_hash="x", run_id="r", backend="trl",
                                                      framework_version="0", seed=0))
    assert 0 < row.judge_agreement < 1


@pytest.mark.alfworld
def test_the_smoke_arms_content_judge_gives_the_warm_start_s_writes_both_verdicts(repo_root, alfworld_data):
    """The smoke arm as written, with its own content judge (judge.min_body_words: 5, issue 32): the four bodies the
    warm start teaches get both verdicts (one of them, "Check every receptacle.", is too short), so r_cnt is not 0
    in every rollout as it was under the default rule (>= 2 list steps; every taught body has none). One real task
    group whose turns write the taught writes (insert the short body, then two updates): r_cnt = (0 + 1 + 1) / 3."""
    from twinrun.models.warmstart import SKILL_BODIES, _op_templates

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    assert spec.judge.kind == "rules" and spec.judge.min_body_words > 0
    with CurationRuntime.from_spec(spec, environ={"ALFWORLD_DATA": str(alfworld_data)}, workers=0) as rt:
        verdicts = []
        for body in SKILL_BODIES:
            content = f"---\nname: pick-tips\ndescription: pick and put tasks\n---\n{body}\n"
            verdicts.append(rt.judge.judge(JudgeRequest(skill=parse_skill_md(content))).valid)
        assert verdicts == [False, True, True, True]  # "Check every receptacle." has 3 words
        group = rt.sampler.step_groups(0)[0]
        s = rt.session(group, 0)
        chi = s.start()
        turns = [_op_templates(group.task_type)[1], _op_templates(group.task_type, exists=True)[2],
                 _op_templates(group.task_type, exists=True)[4]]  # bodies 0 (short), 1, 3
        for ops in turns:
            assert chi is not None
            chi = s.submit(format_curate_call(ops))
        result = s.finish()
    assert result.record.ops_applied == 3 and result.record.ops_invalid == 0
    assert result.reward.r_cnt.value == pytest.approx(2 / 3)
    assert result.reward.r_cnt.contribution == pytest.approx(spec.reward.lambda_cnt * 2 / 3)
