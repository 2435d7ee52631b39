"""Same tool surface as TRL: the verl agent loop's "which tool calls does this turn make" rule agrees with TRL 1.16's
own parser (`trl.chat_template_utils.parse_response` with the Qwen3 response schema) on well-formed and broken
turns, including the broken shapes the warm-started tiny curator actually writes."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.trl]

pytest.importorskip("trl")
pytest.importorskip("transformers")

from twinrun.backends.verl.session import CurationContext  # noqa: E402

CALL = '<tool_call>\n{"name": "curate", "arguments": {"operations": []}}\n</tool_call>'
INSERT = ('<tool_call>\n{"name": "curate", "arguments": {"operations": [{"function": "new_skill_insert", '
          '"arguments": {"skill_name": "a", "content": "---\\nname: a\\ndescription: b\\n---\\n# W"}}]}}\n</tool_call>')
TURNS = [
    CALL,
    INSERT,
    "<think>\n\n</think>\n\n" + CALL,
    "Let me update the repository.\n" + CALL,
    CALL + "\n" + CALL,
    '<tool_call>\n{"name": "skill_search", "arguments": {"q": "x"}}\n</tool_call>',
    '<tool_call>\n{"name": "curate", "arguments": \n</tool_call>',
    '<tool_call>\n{"name": "curate"}\n</tool_call>',
    "<tool_call>\n<think>\n</think>\n\n\n" + CALL,  # the warm-started tiny model's stray opener
    "</think>\n\n</think>\n\n<tool_call>\n" + CALL,
    "Done.",
    "",
    CALL + "\n" + '<tool_call>\n{"name": "curate", "arguments": [1]}\n</tool_call>',
]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    from twinrun.models import build_tiny_qwen3

    return add_response_schema(AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path_factory.mktemp("m"))))


@pytest.mark.parametrize("turn", TURNS)
def test_verl_executes_the_calls_trl_executes(tok, turn):
    from trl.chat_template_utils import parse_response

    ids = tok.encode(turn + "<|im_end|>", add_special_tokens=False)
    trl_calls = parse_response(tok, ids).get("tool_calls") or []
    trl = [(c["function"]["name"], c["function"]["arguments"]) for c in trl_calls]
    ours = [(c.name, c.arguments) for c in CurationContext.tool_calls(tok.decode(ids, skip_special_tokens=True))]
    assert ours == trl
