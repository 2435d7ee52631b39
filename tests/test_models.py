"""The tiny local Qwen3 (issue 2 item 7): builds offline, reloads, caches, and TRL accepts its chat template."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("trl")

from twinrun.core.errors import TwinrunError
from twinrun.models import TINY_QWEN3, build_tiny_qwen3, resolve_model, trl_qwen3_template


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen3(tmp_path_factory.mktemp("models"))


def test_importing_models_is_free():
    # twinrun.models must not import torch/transformers at module level
    import subprocess

    code = "import sys, twinrun.models; print(any(m in sys.modules for m in ('torch', 'transformers', 'trl')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_builds_and_reloads_with_from_pretrained(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3ForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    tok = AutoTokenizer.from_pretrained(tiny)
    assert isinstance(model, Qwen3ForCausalLM)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert model.config.vocab_size == len(tok)
    assert 900 <= len(tok) <= 1100
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    # the tool-call markers are single tokens that survive decoding (TRL parses decoded text)
    for marker in ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        ids = tok(marker, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.decode(ids) == marker


def test_chat_template_is_trls_own_qwen3_text(tiny):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, get_training_chat_template

    tok = AutoTokenizer.from_pretrained(tiny)
    assert tok.chat_template == trl_qwen3_template()
    # TRL recognises it: tool-call parsing and the SFT training-template swap both work
    assert add_response_schema(tok).response_schema is not None
    assert get_training_chat_template(tok) is not None


def test_tool_prompt_round_trips_and_is_short(tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    tools = [{"type": "function", "function": {"name": "curate", "description": "Apply skill operations.",
              "parameters": {"type": "object", "properties": {"operations": {"type": "array", "items": {"type": "object"}}},
                             "required": ["operations"]}}}]
    msgs = [{"role": "system", "content": "You are a skill curator."},
            {"role": "user", "content": "Your task is to: put a clean apple in fridge."}]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < 400  # the corpus-trained merges keep the tool schema prompt short


def test_same_arguments_reuse_the_cache_and_new_ones_build_anew(tiny, tmp_path):
    again = build_tiny_qwen3(tiny.parent)
    assert again == tiny
    other = build_tiny_qwen3(tiny.parent, seed=1)
    assert other != tiny and other.parent == tiny.parent
    # same seed -> identical weights in a fresh cache (deterministic build)
    fresh = build_tiny_qwen3(tmp_path)
    assert fresh.name == tiny.name
    assert (fresh / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    assert json.loads((fresh / "tokenizer.json").read_text()) == json.loads((tiny / "tokenizer.json").read_text())


def test_build_leaves_no_temp_folders_and_marks_completion(tiny):
    assert (tiny / ".complete").is_file()
    assert not [p for p in tiny.parent.iterdir() if p.name.startswith(".")]


def test_resolve_model(tiny):
    assert resolve_model(TINY_QWEN3, tiny.parent) == str(tiny)
    assert resolve_model("Qwen/Qwen3-8B", None) == "Qwen/Qwen3-8B"
    assert resolve_model("/some/local/path", None) == "/some/local/path"
    with pytest.raises(TwinrunError, match="cache"):
        resolve_model(TINY_QWEN3, None)


def test_bad_shape_is_a_one_line_error(tmp_path):
    with pytest.raises(TwinrunError, match="hidden=65"):
        build_tiny_qwen3(tmp_path, hidden=65)
