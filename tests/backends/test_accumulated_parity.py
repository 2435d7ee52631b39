"""Both backends lay out an accumulated-shape row alike: the same prompt tokens, completion tokens and loss mask
for the same curator turns and the same tool results (DIVERGENCES B20).

verl: twinrun's real agent loop (CuratorAgentLoop, ``curator.context: accumulated``) on a real core session (real
ALFWorld games, scripted executor), verl's real config and token builder; the rollout server is a FAKE that
answers with fixed turns. TRL: TRL 1.16's own ``GRPOTrainer._tool_call_loop`` and ``_get_tool_suffix_ids`` (the
code that builds TRL's accumulated completion), called on a stand-in trainer object that holds only what those two
methods read; its generation answers with the same fixed turns and its one tool replays the tool results verl's
session returned, in order. So the tokens each framework adds around a turn are each framework's own."""

from __future__ import annotations

import asyncio
import functools
import json
from types import SimpleNamespace

import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("verl")

from twinrun.core.curation.toolcalls import CURATE_TOOL, format_curate_call
from twinrun.core.spec import load_spec

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.verl, pytest.mark.alfworld]


def _insert(name: str) -> str:
    content = f"---\nname: {name}\ndescription: d\n---\n# Workflow\n1. look around\n"
    return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}])


# |G| = 3 curate turns (one each position), then the reply after the closing tool result
TURNS = [_insert("s-1"), format_curate_call([]), _insert("s-3"), "Done."]


def _turn_ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


def _verl_row(spec, tok, model: str, tmp_path):
    """The accumulated row verl trains on, the conversation it started from and the tool messages its session
    returned (in order)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.agent_loop import CuratorAgentLoop
    from twinrun.backends.verl.train import (
        VerlRunDirs,
        build_overrides,
        task_group_rows,
    )
    from twinrun.core.records import RunPaths

    paths = RunPaths(tmp_path / "verl-run")
    paths.root.mkdir(parents=True)
    paths.spec.write_text(yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False))
    cfg = vconfig.compose(build_overrides(spec, paths, VerlRunDirs(paths.root), model))
    row = task_group_rows(spec)[0]
    turns = list(TURNS)

    class ScriptedServer:  # FAKE rollout server: the next fixed turn
        async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
            ids = _turn_ids(tok, turns.pop(0))
            return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), stop_reason="completed",
                               extra_fields={"min_global_steps": 1, "max_global_steps": 1})

    results: list[dict] = []
    prompt: list[dict] = []

    async def go():
        loop = CuratorAgentLoop(
            trainer_config=DictConfigWrap(cfg), server_manager=ScriptedServer(), tokenizer=tok, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen3",
            spec_path=str(paths.spec), spec_dir=str(spec.source_dir), run_dir=str(paths.root),
        )
        dispatch, open_session = loop.ctx.dispatch, loop.ctx.open_session

        def opened(*args, **kw):  # record the first input, so TRL is prompted with the same conversation
            session = open_session(*args, **kw)
            start = session.astart

            async def started():
                first = await start()
                prompt.extend([{"role": "system", "content": loop.ctx.system_prompt},
                               {"role": "user", "content": first}])
                return first

            session.astart = started
            return session

        async def recorded(session, calls):
            out, reached = await dispatch(session, calls)
            results.extend(out)
            return out, reached

        loop.ctx.dispatch, loop.ctx.open_session = recorded, opened
        try:
            kwargs = {**row, "raw_prompt": row["prompt"], "uid": "u0", "session_id": 0, "global_steps": 1, "index": 0}
            return await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **kwargs)
        finally:
            loop.ctx.dispatch, loop.ctx.open_session = dispatch, open_session
            loop.ctx.runtime.close()

    out = asyncio.run(go())
    return out, prompt, results


def _trl_row(spec, tok, prompt: list[dict], tool_results: list[dict]):
    """TRL's accumulated row for the same turns: its own tool loop, tool results replayed from verl's session."""
    from trl import GRPOTrainer
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        parse_response,
    )

    tok = add_response_schema(tok)  # what GRPOTrainer.__init__ does for a tool-calling run
    replies = iter(tool_results)

    def curate(**_arguments):
        msg = next(replies)
        assert msg["name"] == "curate"
        return msg["content"]

    turns = [_turn_ids(tok, t) for t in TURNS]
    fake = SimpleNamespace(
        _sync_tool_dicts=[{"curate": curate}], _async_tool_dicts=[{}], tools=[CURATE_TOOL], environment_factories=None,
        max_tool_calling_iterations=spec.environment.group_size,  # as backends/trl/compile.py sets it
        max_completion_length=spec.curator.max_completion_tokens, use_vllm=False, _is_vlm=False,
        model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=1 << 20)),
        processing_class=tok, _tokenizer=tok, chat_template=get_training_chat_template(tok), chat_template_kwargs={},
    )
    fake._get_tool_suffix_ids = functools.partial(GRPOTrainer._get_tool_suffix_ids, fake)
    fake._generate_single_turn = lambda ids, *a, **k: ([turns.pop(0) for _ in ids], None)

    prompt_ids = tok.apply_chat_template(prompt, tools=[CURATE_TOOL], add_generation_prompt=True, tokenize=True,
                                         chat_template=fake.chat_template, return_dict=False)
    first = turns.pop(0)
    completions = [[parse_response(tok, first, prefix=prompt_ids, tools=[CURATE_TOOL])]]
    mask, _, completion_ids, _, calls, failures, _ = GRPOTrainer._tool_call_loop(
        fake, [list(prompt)], [prompt_ids], [first], completions, None, None, None)
    assert failures == 0 and calls == len(tool_results)
    return prompt_ids, completion_ids[0], mask[0]


def test_trl_and_verl_lay_out_the_same_accumulated_row(repo_root, alfworld_data, tmp_path):
    from transformers import AutoTokenizer

    from twinrun.models import build_tiny_qwen3

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["environment.workers=1", "executor.max_turns=3", "curator.context=accumulated"])
    model = str(build_tiny_qwen3(tmp_path / "models"))
    tok = AutoTokenizer.from_pretrained(model)
    out, prompt, results = _verl_row(spec, tok, model, tmp_path)
    assert len(results) == spec.environment.group_size  # one tool result per curate turn, the last the closing note
    trl_prompt, trl_completion, trl_mask = _trl_row(spec, tok, prompt, results)

    assert list(out.prompt_ids) == trl_prompt
    verl_completion, verl_mask = list(out.response_ids), list(out.response_mask)
    if verl_completion != trl_completion:  # say where the layouts part, in text
        k = next((i for i, (a, b) in enumerate(zip(verl_completion, trl_completion)) if a != b),
                 min(len(verl_completion), len(trl_completion)))
        pytest.fail(f"accumulated rows part at completion token {k} (verl {len(verl_completion)} tokens, TRL "
                    f"{len(trl_completion)}): verl {tok.decode(verl_completion[k:k + 24])!r} vs TRL "
                    f"{tok.decode(trl_completion[k:k + 24])!r}")
    assert verl_mask == trl_mask
    # the layout itself: each turn once (mask 1), each tool result once between turns (mask 0)
    spans = [i for i in range(1, len(verl_mask)) if verl_mask[i] != verl_mask[i - 1]]
    assert len(spans) == 2 * (len(TURNS) - 1)
    assert tok.decode(verl_completion).count("<tool_response>") == len(results)
    assert tok.decode(verl_completion).count("<|im_start|>assistant") == len(TURNS) - 1
