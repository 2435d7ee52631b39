"""The AgentGym ReAct format and the gold-path dataset builder (issue 9 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twinrun.core.errors import TwinrunError
from twinrun.core.sft.data import (
    GOLD_PATH_TEACHER,
    REACT_ACK,
    first_observation_text,
    parse_action,
    react_turns,
    render_reply,
    sciworld_instruction,
)
from twinrun.core.sft.trajectories import load_trajectories

GOLD = Path(__file__).parents[2] / "backends" / "data" / "sciworld-gold-mini.jsonl"


def test_react_turns_are_agentgym_shaped():
    replies = [render_reply("t1", "look around"), render_reply("t2", "open door to kitchen")]
    turns = react_turns("INSTR", "TASK\nOBS0", replies, ["OBS1", "OBS2 (dropped: nothing answers it)"])
    assert [(t.role, t.loss) for t in turns] == [
        ("user", None), ("assistant", False), ("user", None), ("assistant", None), ("user", None), ("assistant", None),
    ]
    assert turns[1].content == REACT_ACK and not turns[1].trained
    assert turns[3].content == "Thought:\nt1\n\nAction:\nlook around" and turns[3].trained
    assert turns[4].content == "OBS1" and turns[-1].content.endswith("open door to kitchen")
    with pytest.raises(TwinrunError, match="observations"):
        react_turns("I", "O", replies * 2, [])


def test_first_observation_is_task_then_observation():
    assert first_observation_text("Your task is X.", "This room is Y.") == "Your task is X.\nThis room is Y."
    assert first_observation_text("Your task is X.", "Your task is X.\nRoom") == "Your task is X.\nRoom"
    assert first_observation_text("", "Room") == "Room"


def test_instruction_lists_the_literal_templates():
    text = sciworld_instruction()
    assert '"action": "open/close OBJ"' in text and '"action": "de/activate OBJ"' in text
    # the published study's reply format: Thought:\n...\n\nAction:\n<one command>
    assert text.endswith("Reply in this format:\nThought:\nyour reasoning\n\nAction:\nyour next action (one command)")
    assert parse_action(render_reply("a\nmulti-line thought", "open door to kitchen")) == "open door to kitchen"


def test_fixture_records_say_they_are_gold_paths():
    recs = load_trajectories(GOLD)
    assert len(recs) == 4
    for r in recs:
        assert r.teacher == GOLD_PATH_TEACHER and r.split == "train" and r.env == "sciworld"
        assert r.meta["thought_template"] and r.turns[1].loss is False
        replies = [t.content for t in r.turns if t.trained]
        assert replies and all(x.startswith("Thought:\nFollowing the plan") and "\n\nAction:\n" in x for x in replies)
        assert r.success == (r.final_score == 100.0)


@pytest.mark.sciworld
@pytest.mark.slow
def test_builder_reproduces_the_fixture_and_resumes(tmp_path):
    pytest.importorskip("scienceworld")
    from twinrun.core.envs.base import GameRef
    from twinrun.core.envs.scienceworld import SciWorldEnv
    from twinrun.core.sft.data import build_gold_path_dataset

    want = next(r for r in load_trajectories(GOLD) if r.id == "sciworld/find-non-living-thing/133/gold-path")
    game = GameRef(env="sciworld", game_id="find-non-living-thing/133", task_type="find-non-living-thing",
                   split="train", task_name="find-non-living-thing", variation=133)
    env = SciWorldEnv(gold_path=True)
    try:
        out = tmp_path / "gold.jsonl"
        rep = build_gold_path_dataset(env, [game], out, max_steps=8)
        assert (rep.written, rep.skipped_existing, rep.unmeasured) == (1, 0, [])
        got = load_trajectories(out)[0]
        # the variation fixes the world (same first observation); ScienceWorld's gold path for "find a
        # non-living thing" may pick a different object in another simulator session, so later turns may differ
        assert got.turns[:3] == want.turns[:3]
        assert got.final_score == want.final_score == 100.0 and got.success and got.teacher == "gold-path"
        again = build_gold_path_dataset(env, [game], out, max_steps=8)
        assert (again.written, again.skipped_existing) == (0, 1)
        assert len(load_trajectories(out)) == 1
    finally:
        env.shutdown()
