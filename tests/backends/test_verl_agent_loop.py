"""The curator agent loop (agent_loop.py) without Ray, on a real core curation session (real ALFWorld games,
scripted executor) and verl's real config, tokenizer path and token builder.

The curator's turns come from `ScriptedCuratorServer`, a FAKE LLM server standing in for the policy: a random
tiny model never writes a tool call, and these tests need exact, known turns to check the loop's rules (the
end-to-end test with the real warm-started model and the real rollout server is test_verl_train.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.alfworld]

pytest.importorskip("verl")

from twinrun.backends.verl.estimators import decode_uid  # noqa: E402
from twinrun.backends.verl.loop_manager import TAG_FIELD  # noqa: E402
from twinrun.core.records import read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.core.curation.toolcalls import format_curate_call  # noqa: E402

INSERT = [{"function": "new_skill_insert", "arguments": {"skill_name": "pick-workflow",
                                                         "content": "---\nname: pick-workflow\ndescription: d\n---\n# W\n1. go."}}]


class ScriptedCuratorServer:
    """FAKE stand-in for verl's LLMServerClient: returns the next canned curator turn (text + <|im_end|>)."""

    def __init__(self, tokenizer, turns: list[str]):
        self.tok = tokenizer
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        text = self.turns.pop(0) if self.turns else "Done."
        ids = self.tok.encode(text, add_special_tokens=False)[: sampling_params["max_tokens"] - 1]
        ids.append(self.tok.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), stop_reason="completed",
                           extra_fields={"global_steps": 4, "min_global_steps": 4, "max_global_steps": 4})


@pytest.fixture(scope="module")
def setup(repo_root, alfworld_data, tmp_path_factory):
    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.train import VerlRunDirs, build_overrides, task_group_rows
    from twinrun.core.records import RunPaths
    from twinrun.models import build_tiny_qwen3

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["environment.workers=1", "curator.context=accumulated"])
    model = build_tiny_qwen3(tmp_path_factory.mktemp("models"))
    paths = RunPaths(tmp_path_factory.mktemp("run"))
    paths.spec.write_text(yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False))
    cfg = vconfig.compose(build_overrides(spec, paths, VerlRunDirs(paths.root), str(model)))
    return spec, cfg, paths, str(model), task_group_rows(spec)[0]


def _run(setup, turns: list[str], session_id: int = 0, response_length: int | None = None):
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from twinrun.backends.verl.agent_loop import CuratorAgentLoop

    spec, cfg, paths, model, row = setup
    tok = AutoTokenizer.from_pretrained(model)
    server = ScriptedCuratorServer(tok, turns)

    async def go():
        loop = CuratorAgentLoop(
            trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen3",
            spec_path=str(paths.spec), spec_dir=str(spec.source_dir), run_dir=str(paths.root),
        )
        if response_length is not None:  # the whole-completion cap (curator.max_completion_tokens)
            loop.response_length = response_length
        kwargs = {**row, "raw_prompt": row["prompt"], "uid": f"u{session_id}", "session_id": session_id,
                  "global_steps": 1, "index": 0}
        return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **kwargs)

    out = asyncio.run(go())
    return out, server, tok


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_three_curate_turns_then_the_closing_reply(setup):
    from twinrun.models.warmstart import final_tool_result

    spec = setup[0]
    out, server, tok = _run(setup, [format_curate_call(INSERT), format_curate_call([]), format_curate_call([])])
    g = spec.environment.group_size
    spans = _runs(out.response_mask)
    assert len(spans) == g + 1  # |G| curate turns + the reply after TRL's closing tool result
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    # the model's tokens are exactly the generated ones; everything between them is observation (mask 0)
    for (a, b), text in zip(spans, [format_curate_call(INSERT), format_curate_call([]), format_curate_call([]), "Done."]):
        assert tok.decode(out.response_ids[a:b], skip_special_tokens=True) == text
    observations = [tok.decode(out.response_ids[b:a2]) for (_, b), (a2, _) in zip(spans, spans[1:])]
    assert all("<tool_response>" in o for o in observations)
    assert final_tool_result(g) in observations[-1]
    # each generate call saw the whole conversation so far
    assert [len(p) for p in server.prompts] == sorted(len(p) for p in server.prompts)
    assert server.prompts[-1] == out.prompt_ids + out.response_ids[: spans[-1][0]]

    group, tag = decode_uid(out.extra_fields[TAG_FIELD])
    assert group == "u0" and tag.measured and len(tag.step_rewards) == len(tag.anchors) == g
    assert tag.segments == [[1], [2], [3], [3]]  # the closing reply carries the last position (TRL's rule)
    assert sum(tag.step_rewards) == pytest.approx(out.reward_score)
    assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 4
    rec = [r for r in read_jsonl(setup[2].rollouts) if r["rollout_index"] == 0][-1]
    assert rec["ops_applied"] == 1 and rec["turns_missing"] == 0 and rec["reward"]["total"] == pytest.approx(out.reward_score)
    assert [p["tool_calls"] for p in rec["positions"]] == [1, 1, 1]
    # r_fc per position: Valid = 1 (the insert), 0 (curate([]): no op), 0 -> 1/3 (pooled over calls it would be 1)
    assert rec["reward"]["r_fc"]["value"] == pytest.approx(1 / g) and rec["reward"]["r_fc"]["denominator"] == g
    # the row records the tokens verl trains on (`twinrun parity` replays them)
    assert rec["sequences"] == [{"prompt_ids": list(out.prompt_ids), "completion_ids": list(out.response_ids),
                                 "completion_mask": list(out.response_mask)}]


def test_a_turn_without_a_wellformed_call_ends_the_completion(setup):
    # TRL's parser falls back to plain text for a malformed call: the tool loop ends, finish() plays on
    out, server, _ = _run(setup, ['<tool_call>\n{"name": "curate", "arguments": \n</tool_call>'], session_id=1)
    assert len(_runs(out.response_mask)) == 1 and len(server.prompts) == 1
    rec = [r for r in read_jsonl(setup[2].rollouts) if r["rollout_index"] == 1][-1]
    assert rec["turns_missing"] == setup[0].environment.group_size and rec["ops_applied"] == 0
    assert rec["reward"]["r_fc"]["value"] == 0.0  # no turn at any position: Valid 0 everywhere, not "no data"


def _record(setup, rollout_index):
    return [r for r in read_jsonl(setup[2].rollouts) if r["rollout_index"] == rollout_index][-1]


def test_one_valid_call_then_stopping_earns_one_position_of_r_fc(setup):
    """The early-stop exploit: a valid insert at position 1, then plain text. The loop still plays |G| positions and
    r_fc counts the missing turns as 0 (1/|G|), where the pooled reading would pay the full weight."""
    g = setup[0].environment.group_size
    out, server, _ = _run(setup, [format_curate_call(INSERT), "I am done."], session_id=3)
    assert len(_runs(out.response_mask)) == 2
    rec = _record(setup, 3)
    assert rec["turns_missing"] == g - 1 and rec["ops_applied"] == 1
    assert rec["reward"]["r_fc"]["value"] == pytest.approx(1 / g)
    assert [p["turn_missing"] for p in rec["positions"]] == [False] + [True] * (g - 1)


def test_the_completion_cap_leaves_positions_without_turns(setup):
    """curator.max_completion_tokens reached: the next tool result does not fit, the loop ends (the call was
    applied), finish() plays the rest with no ops; those positions score Valid 0."""
    g = setup[0].environment.group_size
    out, server, _ = _run(setup, [format_curate_call(INSERT)] * g, session_id=4, response_length=120)
    assert len(server.prompts) == 1 and len(out.response_mask) <= 120
    rec = _record(setup, 4)
    assert rec["ops_applied"] == 1 and rec["turns_missing"] == g - 1
    assert rec["reward"]["r_fc"]["value"] == pytest.approx(1 / g)


def test_an_unknown_tool_gets_an_error_and_does_not_advance(setup):
    bad = '<tool_call>\n{"name": "skill_search", "arguments": {"q": "x"}}\n</tool_call>'
    out, server, tok = _run(setup, [bad, format_curate_call([]), format_curate_call([]), format_curate_call([])],
                            session_id=2)
    spans = _runs(out.response_mask)
    first_obs = tok.decode(out.response_ids[spans[0][1]: spans[1][0]])
    assert "Tool skill_search not found." in first_obs
    # TRL counts the failed round too (max_tool_calling_iterations = |G|): the 4th turn's call is not executed
    rec = [r for r in read_jsonl(setup[2].rollouts) if r["rollout_index"] == 2][-1]
    assert [p["tool_calls"] for p in rec["positions"]] == [1, 1, 0] and rec["turns_missing"] == 1
    assert rec["reward"]["r_fc"]["value"] == 0.0  # curate([]) twice (no op), then no turn: Valid 0 at each
    assert decode_uid(out.extra_fields[TAG_FIELD])[1].segments == [[1], [1], [2], [3]]
