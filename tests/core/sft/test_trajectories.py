"""Trajectory records (issue 9 item 1): the native row, and loaders for `messages` and `conversations` rows."""

from __future__ import annotations

import json

import pytest

from twinrun.core.sft.trajectories import (
    TrajectoryError,
    TrajectoryRecord,
    Turn,
    load_trajectories,
    record_from_row,
    write_trajectories,
)

AGENTGYM_ROW = {
    "item_id": "sciworld_12",
    "conversations": [
        {"from": "human", "loss": None, "value": "You are an agent ... actions: [...]"},
        {"from": "gpt", "loss": False, "value": "OK. I'll follow your instructions."},
        {"from": "human", "loss": None, "value": "Your task is to boil water.\nThis room is called the hallway."},
        {"from": "gpt", "loss": True, "value": "Thought: go to the kitchen.\n\nAction: go to kitchen"},
        {"from": "human", "loss": None, "value": "You move to the kitchen."},
        {"from": "gpt", "loss": True, "value": "Thought: look.\n\nAction: look around"},
    ],
}


def test_turn_loss_defaults_to_the_role():
    assert Turn(role="assistant", content="x").trained
    assert not Turn(role="assistant", content="x", loss=False).trained
    assert not Turn(role="user", content="x").trained
    assert not Turn(role="tool", content="x", loss=None).trained


def test_loss_true_on_a_user_turn_is_refused_in_one_line():
    with pytest.raises(TrajectoryError) as e:
        record_from_row({"env": "sciworld", "task": "boil",
                         "messages": [{"role": "user", "content": "hi", "loss": True}]})
    msg = str(e.value)
    assert "\n" not in msg and "messages[0]" in msg and "fix:" in msg


def test_conversations_row_agentgym_format():
    rec = record_from_row(AGENTGYM_ROW, defaults={"env": "sciworld", "task": "boil", "teacher": "gpt-4"})
    assert rec.id == "sciworld_12"
    assert [t.role for t in rec.turns] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [t.loss for t in rec.turns] == [None, False, None, True, None, True]
    # the canned acknowledgement is not trained; the two replies are
    assert [t.trained for t in rec.turns] == [False, False, False, True, False, True]
    assert rec.trained_turns == 2
    assert rec.teacher == "gpt-4" and rec.env == "sciworld"


def test_messages_row_with_tool_calls_and_episode_aliases():
    row = {
        "id": "ep-1", "environment": "sciworld", "taskName": "melt", "variationIdx": 7, "split": "train",
        "score": -100, "success": False, "teacher": "gold-path", "skill_condition": "with", "source": "mine",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "content": "result"},
            {"role": "assistant", "content": "done", "loss": False},
        ],
    }
    rec = record_from_row(row)
    assert (rec.env, rec.task, rec.variation, rec.split) == ("sciworld", "melt", 7, "train")
    assert rec.final_score == -100.0  # negative scores are kept as they are
    assert rec.skill_condition == "with" and rec.meta == {"source": "mine"}
    assert rec.turns[2].content == "" and rec.turns[2].tool_calls[0]["function"]["name"] == "f"
    assert rec.turns[2].chat_message()["tool_calls"]
    assert [t.trained for t in rec.turns] == [False, False, True, False, False]


@pytest.mark.parametrize(
    "row, needle",
    [
        ({"env": "e", "task": "t", "conversations": [{"from": "robot", "value": "x"}]}, "'robot'"),
        ({"env": "e", "task": "t", "conversations": [{"from": "gpt"}]}, "lacks 'from'/'value'"),
        ({"env": "e", "task": "t", "messages": "not a list"}, "messages: a str"),
        ({"env": "e", "task": "t", "text": "x"}, "no 'turns', 'messages' or 'conversations'"),
        ({"task": "t", "messages": []}, ".env: missing"),
    ],
)
def test_bad_rows_give_one_line_errors(row, needle):
    with pytest.raises(TrajectoryError) as e:
        record_from_row(row, where="f.jsonl:3")
    assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("f.jsonl:3")


def test_native_round_trip_through_jsonl(tmp_path):
    rec = record_from_row(AGENTGYM_ROW, defaults={"env": "sciworld", "task": "boil"})
    path = tmp_path / "t.jsonl"
    assert write_trajectories(path, [rec, rec.model_copy(update={"id": "b"})]) == 2
    back = load_trajectories(path)
    assert [r.id for r in back] == ["sciworld_12", "b"]
    assert back[0] == rec


def test_load_mixed_formats_and_json_list(tmp_path):
    native = TrajectoryRecord(id="n", env="sciworld", task="boil", turns=[Turn(role="user", content="u")])
    jl = tmp_path / "mixed.jsonl"
    jl.write_text("\n".join([
        native.model_dump_json(),
        json.dumps({**AGENTGYM_ROW, "env": "sciworld", "task": "boil"}),
        json.dumps({"id": "m", "env": "sciworld", "task": "boil", "messages": [{"role": "user", "content": "u"}]}),
    ]) + "\n")
    assert [r.id for r in load_trajectories(jl)] == ["n", "sciworld_12", "m"]
    js = tmp_path / "list.json"
    js.write_text(json.dumps([AGENTGYM_ROW]))
    recs = load_trajectories(js, defaults={"env": "sciworld", "task": "boil"})
    assert recs[0].turns[3].content.startswith("Thought:")


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(TrajectoryError, match="is not a file"):
        load_trajectories(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TrajectoryError, match="not JSON"):
        load_trajectories(bad)
    obj = tmp_path / "obj.json"
    obj.write_text("{}")
    with pytest.raises(TrajectoryError, match="not a list"):
        load_trajectories(obj)
