"""The forced-turns test stand-in (twinrun/models/forced_turns.py, issue 34): a model folder holding the script
generates exactly the script's turns through transformers' ``generate`` (TRL's path) and through verl's transformers
rollout server, whatever the model's weights and the CPU's kernels; the smoke arm's script is valid curate calls
that all apply to a repository."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.sampling

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from twinrun.core.skills.repository import SkillRepo  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.core.curation.toolcalls import parse_curator_turn  # noqa: E402
from twinrun.models.forced_turns import (  # noqa: E402
    curate_turns,
    forced_curator_folder,
    forced_turns,
    install_forced_turns,
)

SCRIPT = ["<think>\n\n</think>\n\nfirst turn", "second turn, longer than the first one", "Done."]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def forced(tiny, tmp_path_factory):
    return forced_curator_folder(tiny, tmp_path_factory.mktemp("forced") / "forced-curator", SCRIPT)


def _prompt(tok, turns: int, verl: bool = False) -> list[int]:
    """A curation tool loop after ``turns`` curator turns (each a call and its tool result), ready for the next.
    ``verl``: each turn also re-rendered before its tool result, as verl's accumulated loop lays the tokens out."""
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "chi 1"}]
    ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
    for i in range(turns):
        call = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "curate", "arguments": {"operations": []}}}]}
        before = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        msgs += [call, {"role": "tool", "content": f"chi {i + 2}"}]
        after = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        generated = "<tool_call>...</tool_call><|im_end|>" if verl else ""
        ids += tok.encode(generated + after[len(before) - (len("<|im_start|>assistant\n") if verl else 0):],
                          add_special_tokens=False)
    return ids


def test_a_plain_model_folder_is_not_forced(tiny):
    assert forced_turns(tiny) is None and forced_turns("Qwen/Qwen3-8B") is None


def test_transformers_generate_emits_each_turns_script_in_a_left_padded_sampled_batch(forced):
    """Two prompts (first turn, third turn) of different lengths in one left-padded batch, sampled at temperature
    1 with top-k: each row gets its own turn's text, then the end-of-turn token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(forced)
    model = AutoModelForCausalLM.from_pretrained(forced)
    rule = forced_turns(forced, tok)
    install_forced_turns(model, rule)
    prompts = [_prompt(tok, 0), _prompt(tok, 2)]
    assert rule.next_token(_prompt(tok, 1, verl=True)) == rule.next_token(_prompt(tok, 1)) != rule.next_token(prompts[0])
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=5,
                         max_new_tokens=40, pad_token_id=tok.pad_token_id)
    texts = [tok.decode(row[width:], skip_special_tokens=False) for row in out]
    assert texts[0].startswith(SCRIPT[0] + tok.eos_token) and texts[1].startswith(SCRIPT[2] + tok.eos_token)


def test_verl_rollout_server_emits_the_script_with_the_models_own_logprobs(forced):
    pytest.importorskip("verl")
    from transformers import AutoTokenizer

    from twinrun.backends.verl.hf_rollout import HFGenerationServer

    tok = AutoTokenizer.from_pretrained(forced)
    server = HFGenerationServer(str(forced), prompt_length=256, response_length=32, seed=0)
    prompt = _prompt(tok, 1)
    out = asyncio.run(server.generate(prompt, {"temperature": 0.7, "logprobs": True}, "r"))
    assert tok.decode(out.token_ids) == SCRIPT[1] + tok.eos_token and out.stop_reason == "completed"
    with torch.no_grad():
        logits = server.model(input_ids=torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1:-1] / 0.7
    ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(ref, torch.tensor(out.log_probs), atol=1e-4)


def test_the_curate_script_applies_every_operation_and_fits_the_smoke_arms_turn(smoke_spec_path, tiny):
    from transformers import AutoTokenizer

    spec = load_spec(smoke_spec_path)
    g = spec.environment.group_size
    turns = curate_turns(g)
    assert len(turns) == g + 1  # one per position, then the closing reply
    repo, applied = SkillRepo.for_experiment(spec), 0
    for text in turns[:-1]:
        turn = parse_curator_turn(text)
        assert len(turn.calls) == 1 and not turn.calls[0].error
        for op in turn.operations:
            assert not op.error and repo.apply(op.function, op.arguments).ok, (text, op)
            applied += 1
    assert applied == g and not parse_curator_turn(turns[-1]).calls
    tok = AutoTokenizer.from_pretrained(tiny)
    assert max(len(tok.encode(t, add_special_tokens=False)) + 1 for t in turns) <= spec.curator.max_response_tokens
