"""`twinrun sft-data stats`: the study's four numbers on hand-built trajectory files (issue 15 item 2)."""

from __future__ import annotations

import json

from twinrun.core.sft.data import react_turns, render_reply, sciworld_instruction
from twinrun.core.sft.stats import render_stats, trajectory_stats
from twinrun.core.sft.trajectories import TrajectoryRecord, Turn

REJECT = "No known action matches that input."


def _record(i, actions, observations, success, *, student_prefix=0):
    turns = react_turns(sciworld_instruction(), "Task\nRoom", [render_reply("t", a) for a in actions], observations)
    if student_prefix:  # ROSE: the first replies are the student's (context, no loss)
        k = 0
        for j, t in enumerate(turns):
            if t.role == "assistant" and t.loss is None and k < student_prefix:
                turns[j] = Turn(role="assistant", content=t.content, loss=False)
                k += 1
    return TrajectoryRecord(id=f"e{i}", env="sciworld", task="boil", variation=i, split="train",
                            final_score=100.0 if success else 20.0, success=success, teacher="m", turns=turns)


def test_hand_counted_file():
    recs = [
        # 4 supervised turns: 2 literal copies (both rejected), 1 other template copy, 1 command
        _record(0, ["open/close OBJ", "go to LOC", "open/close OBJ", "look around"], [REJECT, REJECT, REJECT],
                True),
        # 2 supervised turns: no copy
        _record(1, ["look around", "focus on cup"], ["room"], False),
        # 3 replies, the first 2 the student's: 1 supervised turn, a literal copy
        _record(2, ["open/close OBJ", "look around", "open/close OBJ"], [REJECT, "room"], None, student_prefix=2),
    ]
    s = trajectory_stats(recs)
    assert (s["episodes"], s["outcome_known"], s["successes"]) == (3, 2, 1)
    assert s["teacher_success"] == 0.5
    assert s["supervised_turns"] == 4 + 2 + 1
    assert (s["literal_copies"], s["template_copies"]) == (3, 4)
    assert s["literal_share"] == 3 / 7 and s["template_share"] == 4 / 7
    # answered supervised replies (the last reply's observation is not in a record): 3 + 1 + 0; rejected 3
    assert s["rejected_share"] == 3 / 4
    assert trajectory_stats(recs, ["go to LOC"])["literal_copies"] == 1
    line = render_stats(s, path="teacher.jsonl")
    assert line.startswith("teacher.jsonl: 3 episodes, teacher success 50.00% (1/2), 7 supervised turns, literal "
                           "template copies (open/close OBJ) 42.86%")
    assert "2,059 episodes, teacher success 41.96%, 46,035 supervised turns" in line and "29.89%" in line


def test_cli_stats_prints_the_line_and_json(tmp_path):
    from typer.testing import CliRunner

    from twinrun.cli import app

    f = tmp_path / "t.jsonl"
    f.write_text("".join(r.model_dump_json() + "\n" for r in [
        _record(0, ["open/close OBJ", "look around"], [REJECT], True)]))
    res = CliRunner().invoke(app, ["sft-data", "stats", str(f)])
    assert res.exit_code == 0, res.output
    assert "1 episodes, teacher success 100.00% (1/1), 2 supervised turns" in res.output and "50.00%" in res.output
    res = CliRunner().invoke(app, ["sft-data", "stats", str(f), "--json", "--literal", "look around"])
    assert res.exit_code == 0 and json.loads(res.output)["literal_copies"] == 1
    res = CliRunner().invoke(app, ["sft-data", "stats", str(tmp_path / "missing.jsonl")])
    assert res.exit_code != 0
