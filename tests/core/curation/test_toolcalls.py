"""Curator tool-call parsing (Qwen3/Hermes text) and the one-tool `curate` surface."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from twinrun.core.skills.repository import CURATOR_FUNCTIONS, SkillRepo
from twinrun.core.curation.toolcalls import (
    CURATE_TOOL,
    OPERATION_NAMES,
    format_curate_call,
    operations_from_calls,
    parse_curator_turn,
    parse_tool_calls,
)

SKILL = "---\nname: heat-it\ndescription: Heat an object with the microwave before placing it.\n---\n1. Take it.\n2. Heat it.\n"


def test_curate_tool_schema_wraps_the_three_paper_functions():
    fn = CURATE_TOOL["function"]
    assert CURATE_TOOL["type"] == "function" and fn["name"] == "curate"
    assert fn["parameters"]["required"] == ["operations"]
    variants = fn["parameters"]["properties"]["operations"]["items"]["anyOf"]
    assert [v["properties"]["function"]["enum"] for v in variants] == [[n] for n in OPERATION_NAMES]
    assert OPERATION_NAMES == ("new_skill_insert", "skill_update", "skill_delete")
    for v, f in zip(variants, CURATOR_FUNCTIONS):
        assert v["properties"]["arguments"] == f["function"]["parameters"]
    json.dumps(CURATE_TOOL)  # serialisable for chat templates


def test_hermes_text_with_reasoning_and_two_calls():
    text = (
        "<think>I could <tool_call>{\"name\": \"curate\"}</tool_call> here but I won't.</think>\n"
        + format_curate_call([
            {"function": "new_skill_insert", "arguments": {"skill_name": "heat-it", "content": SKILL}},
            {"function": "skill_delete", "arguments": {"skill_name": "old"}},
        ])
        + "\n"
        + format_curate_call([])
    )
    turn = parse_curator_turn(text)
    assert [c.name for c in turn.calls] == ["curate", "curate"]  # the call inside <think> is ignored
    assert [(o.function, o.error) for o in turn.operations] == [("new_skill_insert", None), ("skill_delete", None)]
    repo = SkillRepo()
    results = [repo.apply(o.function, o.arguments) for o in turn.operations]
    assert [r.ok for r in results] == [True, False]  # deleting an unknown skill is an invalid call
    assert repo.names() == ["heat-it"]


def test_malformed_calls_each_count_as_one_invalid_call():
    text = (
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "search_web", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "curate", "arguments": {"ops": []}}</tool_call>'
        '<tool_call>{"name": "curate", "arguments": {"operations": [42, {"arguments": {}}]}}</tool_call>'
        '<tool_call>["curate"]</tool_call>'
    )
    ops = parse_curator_turn(text).operations
    assert len(ops) == 6 and all(o.error for o in ops)
    assert "not JSON" in ops[0].error and "unknown tool 'search_web'" in ops[1].error
    assert "operations" in ops[2].error and "not an object" in ops[3].error and "function" in ops[4].error


def test_direct_paper_calls_openai_shapes_and_truncation():
    # a direct call of a paper function is one operation
    direct = '<tool_call>{"name": "skill_delete", "arguments": {"skill_name": "x"}}</tool_call>'
    assert [(o.function, o.arguments) for o in parse_curator_turn(direct).operations] == [("skill_delete", {"skill_name": "x"})]
    # arguments as a JSON string (OpenAI API style) and the {"function": {...}} wrapper
    parsed = parse_curator_turn([{"type": "function", "function": {"name": "curate", "arguments": json.dumps(
        {"operations": [{"function": "skill_delete", "arguments": {"skill_name": "y"}}]})}}])
    assert [o.arguments for o in parsed.operations] == [{"skill_name": "y"}]
    # an unclosed call at the end (length cap) still parses when its JSON is whole
    cut = '<tool_call>\n{"name": "curate", "arguments": {"operations": []}}'
    assert parse_curator_turn(cut).calls[0].name == "curate"
    cut_bad = '<tool_call>\n{"name": "curate", "argum'
    assert parse_curator_turn(cut_bad).operations[0].error
    # no tool call: no operations, and the turn says so
    plain = parse_curator_turn("I think the repo is fine.")
    assert not plain.has_tool_call and plain.operations == []
    assert parse_curator_turn([]).operations == []


@given(st.lists(st.sampled_from(OPERATION_NAMES), max_size=5), st.text(max_size=40))
def test_round_trip_of_generated_calls(names, free):
    ops = [{"function": n, "arguments": {"skill_name": f"s-{i}", "free": free}} for i, n in enumerate(names)]
    text = free.replace("<", "") + format_curate_call(ops)
    parsed = parse_curator_turn(text)
    assert [(o.function, o.arguments) for o in parsed.operations] == [(o["function"], o["arguments"]) for o in ops]
    assert operations_from_calls(parse_tool_calls(text)) == parsed.operations
