"""The warm start of the tiny curator: conversation layout, training windows, and why windows are exact."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("trl")

from twinrun.models.warmstart import (
    FINAL_REPLY,
    Transcript,
    WarmStartSettings,
    build_conversations,
    final_tool_result,
    probe_prompts,
    receptive_field,
    tokenize_conversation,
    turn_windows,
)


def _transcripts():
    return [Transcript("pick", ["chi1 a", "chi2 a", "chi3 a"], [[], [], []]),
            Transcript("look", ["chi1 b", "chi2 b", "chi3 b"], [[], [], []])]


def test_conversations_look_like_a_curation_rollout():
    convs = build_conversations(_transcripts(), "SYSTEM", WarmStartSettings(conversations=4))
    assert len(convs) == 4
    c = convs[0]
    roles = [m["role"] for m in c]
    # system, chi_1, then |G| x (curate call, tool result), then the closing reply
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert c[1]["content"] == "chi1 a" and c[3]["content"] == "chi2 a" and c[5]["content"] == "chi3 a"
    assert c[7]["content"] == final_tool_result(3) and c[-1]["content"] == FINAL_REPLY
    for m in c[2:-1:2]:
        (call,) = m["tool_calls"]
        assert call["function"]["name"] == "curate" and isinstance(call["function"]["arguments"]["operations"], list)
    # the first pass replays the ops that produced the transcript; later passes re-draw them
    assert [m["tool_calls"][0]["function"]["arguments"]["operations"] for m in c[2:-1:2]] == [[], [], []]


def test_per_position_conversations_are_the_rows_a_per_position_rollout_trains():
    """Issue 17: a per_position curator's prompt at position i is [system, chi_i] (history 0), never a tool result;
    a warm start that taught the accumulated shape left 70% of its RL turns without a parseable call."""
    from twinrun.core.curation.context_shape import position_messages

    convs = build_conversations(_transcripts(), "SYSTEM", WarmStartSettings(conversations=2), context="per_position")
    assert len(convs) == 6  # 2 conversations x |G| positions
    for conv, chi in zip(convs, ["chi1 a", "chi2 a", "chi3 a", "chi1 b", "chi2 b", "chi3 b"], strict=True):
        assert conv[:-1] == position_messages("SYSTEM", chi)
        (call,) = conv[-1]["tool_calls"]
        assert call["function"]["name"] == "curate" and call["function"]["arguments"]["operations"] == []
    # with history, the earlier positions are prompt-only (input, turn-text) pairs before chi_i
    convs = build_conversations(_transcripts()[:1], "SYSTEM", WarmStartSettings(conversations=1),
                                context="per_position", history=1)
    assert [m["role"] for m in convs[2]] == ["system", "user", "assistant", "user", "assistant"]
    assert convs[2][1]["content"] == "chi2 a" and convs[2][3]["content"] == "chi3 a"
    assert '<tool_call>\n{"name": "curate"' in convs[2][2]["content"]


def test_probe_prompts_are_held_out_positions_in_the_spec_shape():
    t = _transcripts()[1:]
    per = probe_prompts(t, "SYSTEM", context="per_position")
    assert [p[-1]["content"] for p in per] == ["chi1 b", "chi2 b", "chi3 b"]
    acc = probe_prompts(t, "SYSTEM")
    assert [len(p) for p in acc] == [2, 4, 6] and [p[-1]["content"] for p in acc] == ["chi1 b", "chi2 b", "chi3 b"]
    assert probe_prompts([], "SYSTEM") == []


def test_turn_windows_cover_each_assistant_turn_with_bounded_context():
    mask = [0] * 10 + [1] * 3 + [0] * 5 + [1] * 2
    assert turn_windows(list(range(20)), mask, 4) == [(6, 10, 13), (14, 18, 20)]
    assert turn_windows(list(range(20)), mask, 100) == [(0, 10, 13), (0, 18, 20)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("models"))


def test_tokenized_conversation_masks_exactly_the_assistant_turns(tiny):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    tok = AutoTokenizer.from_pretrained(tiny)
    conv = build_conversations(_transcripts(), "SYSTEM", WarmStartSettings(conversations=1))[0]
    ids, mask = tokenize_conversation(tok, conv, get_training_chat_template(tok))
    turns = [tok.decode(ids[s:e]) for _, s, e in turn_windows(ids, mask, 0)]
    assert len(turns) == 4
    assert all(t.startswith("<think>\n\n</think>\n\n") for t in turns)
    assert all('<tool_call>\n{"name": "curate", "arguments": {"operations": []}}\n</tool_call><|im_end|>' in t
               for t in turns[:3])
    assert FINAL_REPLY in turns[3]


def test_a_taught_per_position_turn_follows_exactly_the_prompt_the_backends_render(tiny):
    """The SFT row's tokens before the assistant turn are the ids both backends generate from
    (core's prompt_token_ids), so the warm start teaches the turn after exactly the RL prompt."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    from twinrun.core.curation.context_shape import prompt_token_ids
    from twinrun.core.curation.toolcalls import CURATE_TOOL

    tok = AutoTokenizer.from_pretrained(tiny)
    for history in (0, 1):
        conv = build_conversations(_transcripts(), "SYSTEM", WarmStartSettings(conversations=1),
                                   context="per_position", history=history)[2]
        ids, mask = tokenize_conversation(tok, conv, get_training_chat_template(tok))
        ((_, start, end),) = turn_windows(ids, mask, 0)  # history turns are prompt-only, never trained
        assert ids[:start] == prompt_token_ids(tok, conv[:-1], [CURATE_TOOL])
        assert tok.decode(ids[start:end]).startswith("<think>\n\n</think>\n\n<tool_call>")


def test_windows_are_exact_for_the_sliding_window_tiny_model(tiny):
    """With every layer sliding, the logits at a turn depend only on the last layers x window tokens: training on
    a window of that much context is training on the full rollout."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    field = receptive_field(model.config)
    assert field == model.config.sliding_window * model.config.num_hidden_layers
    ids = torch.randint(0, model.config.vocab_size, (1, field + 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids).logits[0, -50:]
        start = ids.shape[1] - 50 - field
        window = model(ids[:, start:], position_ids=torch.arange(start, ids.shape[1])[None]).logits[0, -50:]
    torch.testing.assert_close(window, full, atol=1e-5, rtol=1e-5)


def test_warm_start_key_ignores_where_the_executor_listens_not_what_it_is(tmp_path):
    """A test server's port (or the key's variable) must not rebuild the cached warm start on every run; the
    executor's model and decoding must."""
    from pathlib import Path

    from twinrun.core.spec import load_spec
    from twinrun.models.warmstart import warm_start_key

    arm = Path(__file__).resolve().parents[1] / "experiments" / "smoke-cpu.yaml"
    openai = ["executor.kind=openai", "executor.skill_effect=0", "executor.self_judge_error=0", "executor.model=m",
              "curation.correctness=ground_truth"]

    def key(*extra: str) -> str:
        return warm_start_key(load_spec(arm, openai + list(extra)), tmp_path / "tiny", WarmStartSettings())

    here = key("executor.base_url=http://127.0.0.1:41001/v1", "executor.api_key_env=KEY_A")
    assert key("executor.base_url=http://127.0.0.1:52002/v1", "executor.api_key_env=KEY_B") == here
    assert key("executor.base_url=http://127.0.0.1:41001/v1", "executor.model=other") != here
    assert key("executor.base_url=http://127.0.0.1:41001/v1", "executor.max_turns=5") != here


def test_warm_start_inserts_vary_in_relevance_under_the_stand_in_rule():
    """Issue 17: the inserts the warm start teaches differ in what the skill-sensitive scripted executor gets from
    them, for each demo task type, so the curator's first samples differ in reward."""
    from twinrun.core.executors.skill_effect import relevance
    from twinrun.core.skills.repository import parse_skill_md, render_for_prompt
    from twinrun.models.warmstart import _op_templates

    for task_type in ("pick", "look"):
        scores = []
        for ops in _op_templates(task_type):
            inserts = [op for op in ops if op["function"] == "new_skill_insert"]
            for op in inserts:
                skill = parse_skill_md(op["arguments"]["content"])
                assert skill.name == op["arguments"]["skill_name"] == f"{task_type}-tips"
                scores.append(relevance(render_for_prompt([skill]), task_type))
        assert max(scores) == 1.0 and min(scores) == 0.25 and len(set(scores)) >= 3, (task_type, scores)


@pytest.mark.slow  # records the warm start's sessions twice
@pytest.mark.alfworld
def test_the_self_judge_s_error_changes_neither_the_warm_start_nor_what_it_is_taught_on(alfworld_data,
                                                                                      smoke_spec_path, tmp_path):
    """The warm start's sessions are recorded with the scripted self-judge's error off (issue 32): with the smoke
    arm's seeded 20% of flipped Result words in its transcripts, its held-out parse rate fell from 92% to 69% and in
    the demo's TRL run no curator call was valid. A spec that differs only in executor.self_judge_error has the
    same key, and its recorded curator inputs are the error-free ones, word for word, while the RL rollouts' own
    inputs do read the flipped words (tests/core/curation/test_curation.py)."""
    from twinrun.core.spec import load_spec
    from twinrun.models.tiny import build_tiny_qwen3
    from twinrun.models.warmstart import record_transcripts, warm_start_key

    spec = load_spec(smoke_spec_path)
    assert spec.executor.self_judge_error > 0
    clean = load_spec(smoke_spec_path, ["executor.self_judge_error=0"])
    base = build_tiny_qwen3(tmp_path)
    settings = WarmStartSettings(transcripts=4, probe_transcripts=0)
    assert warm_start_key(spec, base, settings) == warm_start_key(clean, base, settings)
    env = {"ALFWORLD_DATA": str(alfworld_data)}
    taught = record_transcripts(spec, base, settings, environ=env)
    assert [t.inputs for t in taught] == [t.inputs for t in record_transcripts(clean, base, settings, environ=env)]


@pytest.mark.slow  # BM25 over every held-out game of each type
def test_warm_start_inserts_reach_the_executor_of_their_own_type(alfworld_data, smoke_spec_path):
    """Issue 17: every insert the warm start teaches is BM25-retrieved (the smoke arm's retrieval settings) for the
    real goals of its type's held-out games, else the stand-in's rule never sees it and a curator writing it earns
    nothing. The description carries the goals' verb ("put", "examine"); without it a pick skill with a body that
    lacks "put" and every look skill on an "examine ..." goal are never retrieved."""
    import random

    from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv
    from twinrun.core.skills.repository import SkillRepo
    from twinrun.core.spec import load_spec
    from twinrun.models.warmstart import _op_templates

    spec = load_spec(smoke_spec_path)
    cat, env = AlfWorldCatalog(alfworld_data, "valid_seen"), AlfWorldEnv()
    try:
        for task_type in ("pick", "look"):
            games = cat.games(task_type)
            random.Random(0).shuffle(games)
            goals = {env.reset(g).task for g in games[:12]}
            if task_type == "look":
                assert any(g.startswith("examine") for g in goals), goals  # both phrasings are covered
            for ops in _op_templates(task_type):
                for op in (o for o in ops if o["function"] == "new_skill_insert"):
                    repo = SkillRepo.for_experiment(spec)
                    assert repo.new_skill_insert(op["arguments"]["skill_name"], op["arguments"]["content"]).ok
                    missed = [g for g in goals if not repo.retrieve(g, spec.retrieval.top_k)]
                    assert not missed, (task_type, op["arguments"]["content"], missed)
    finally:
        env.close()


def test_warm_start_plans_write_only_calls_the_repository_accepts(smoke_spec_path):
    """Issue 17: a taught write is an insert where the type's skill is missing and an update where it is there, so
    every write applies; only a delete of a missing skill fails. When the warm start taught inserts at every
    position, an insert after position 1 was invalid, delete was the one valid call there, and GRPO followed the
    paper's r_fc (1/|G| per valid call) to deletes that spread to position 1."""
    import random

    from twinrun.core.skills.repository import SkillRepo
    from twinrun.core.spec import load_spec
    from twinrun.models.warmstart import _draw_plan, _skill_present

    spec = load_spec(smoke_spec_path)
    rng, kinds = random.Random(0), set()
    for k in range(200):
        task_type = ("pick", "look")[k % 2]
        plan = _draw_plan(task_type, 3, rng)
        repo = SkillRepo.for_experiment(spec)
        for present, turn in zip(_skill_present(plan), plan, strict=True):
            assert (f"{task_type}-tips" in repo.names()) == present
            for op in turn:
                result = repo.apply(op["function"], op["arguments"])
                kinds.add((present, op["function"], result.ok))
                if op["function"] != "skill_delete":
                    assert result.ok, (present, op, result)
    # both states occur, with writes and both fates of a delete
    assert {(False, "new_skill_insert", True), (True, "skill_update", True), (True, "skill_delete", True),
            (False, "skill_delete", False)} <= kinds, kinds


def test_warm_start_conversations_redraw_writes_that_fit_the_recorded_repository():
    """The conversations after the first pass re-draw each turn; the input it follows was recorded under the
    transcript's own plan, so the re-drawn write must fit that plan's repository (update where the recorded plan
    left the skill, insert where it did not)."""
    import random

    from twinrun.models.warmstart import Transcript, WarmStartSettings, _draw_plan, _skill_present, build_conversations

    rng = random.Random(1)
    transcripts = [Transcript("pick", [f"input {k}.{i}" for i in range(3)], _draw_plan("pick", 3, rng)) for k in range(6)]
    present = {f"input {k}.{i}": p for k, t in enumerate(transcripts) for i, p in enumerate(_skill_present(t.ops))}
    seen = set()
    for conv in build_conversations(transcripts, "system", WarmStartSettings(conversations=60), context="per_position"):
        chi, call = conv[-2]["content"], conv[-1]["tool_calls"][0]["function"]["arguments"]["operations"]
        for op in call:
            seen.add((present[chi], op["function"]))
            if op["function"] != "skill_delete":
                assert op["function"] == ("skill_update" if present[chi] else "new_skill_insert"), (chi, op)
    assert {(False, "new_skill_insert"), (True, "skill_update")} <= seen, seen


# what the warm start has learnt, as a rate: the share of turns sampled at temperature 1 on the held-out inputs that
# parse as curate calls, pooled over PROBE_SEEDS draws of warmstart.py's own probe (16 turns per input each). Its
# weights, and so the rate, differ with the CPU's kernels (issue 34); the bound sits far below the 98% recorded for
# this warm start (DIVERGENCES B13) and far above an untrained model's 0%
PROBE_SEEDS = 4
MIN_PARSE_RATE = 0.5


@pytest.mark.slow
@pytest.mark.alfworld
@pytest.mark.sampling
@pytest.mark.parametrize("context", ["per_position", "accumulated"])
def test_the_warm_started_curator_writes_curate_calls_on_held_out_inputs(context, smoke_spec_path, cache_dir,
                                                                         alfworld_data):
    """The RL tests force the curator's turns (twinrun/models/forced_turns.py); whether the warm start teaches the
    tiny model to call ``curate`` at all is checked here, on inputs its SFT never saw, over several seeds."""
    import os

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    from twinrun.core.spec import load_spec
    from twinrun.models.tiny import build_tiny_qwen3
    from twinrun.models.warmstart import _system_prompt, cached_transcripts, probe, warm_started_tiny_curator

    spec = load_spec(smoke_spec_path, [f"curator.context={context}"])
    settings, environ = WarmStartSettings(), dict(os.environ)
    folder = warm_started_tiny_curator(spec, cache_dir, data_root=alfworld_data, environ=environ)
    recorded = cached_transcripts(spec, build_tiny_qwen3(cache_dir), settings,
                                  folder.with_name(folder.name + ".transcripts.json"), data_root=alfworld_data,
                                  environ=environ, say=print)
    prompts = probe_prompts(recorded[settings.transcripts:], _system_prompt(spec), context=spec.curator.context,
                            history=spec.curator.history)
    assert prompts
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    rates = []
    with torch.random.fork_rng(devices=[]):
        for seed in range(PROBE_SEEDS):
            torch.manual_seed(seed)
            rates.append(probe(model, tok, prompts, get_training_chat_template(tok), settings))
    print(f"warm start ({context}) parse rate per seed: {rates}")
    assert sum(rates) / len(rates) >= MIN_PARSE_RATE, rates
