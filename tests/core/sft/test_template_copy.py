"""The literal template-copy metric (the study's `open/close OBJ`) beside the any-template share (issue 15 item 3),
on hand-written replies in both reply formats."""

from __future__ import annotations

import pytest

from twinrun.core.sft.data import parse_action, render_reply, sciworld_instruction
from twinrun.core.sft.template_copy import (
    STUDY_LITERAL_COPIES,
    copied_template,
    is_literal_copy,
    literal_copy_counts,
    prompt_action_list,
    template_copy_counts,
)

TEMPLATES = prompt_action_list(sciworld_instruction())

# (reply, literal copy of the study's list?, any-template copy?)
HAND_WRITTEN = [
    (render_reply("the door is closed", "open/close OBJ"), True, True),
    ("Thought:\nx\n\nAction:\n  OPEN/CLOSE   obj.", True, True),  # case, spacing and a final period ignored
    ("Thought: x\n\nAction: open/close OBJ", True, True),  # the older one-line format parses the same
    (render_reply("x", "de/activate OBJ"), False, True),  # a template, but not the study's literal
    (render_reply("x", "go to LOC"), False, True),
    (render_reply("x", "use OBJ [on OBJ]"), False, True),
    (render_reply("x", "open door to kitchen"), False, False),  # a filled-in command
    (render_reply("x", "open/close door"), False, False),  # half filled in: not literal
    (render_reply("x", "look around"), False, False),
    ("Thought:\nI am not sure.", False, False),  # no Action: the first line goes to the simulator
]


@pytest.mark.parametrize("reply, literal, any_template", HAND_WRITTEN)
def test_literal_and_any_template_on_hand_written_replies(reply, literal, any_template):
    action = parse_action(reply)
    assert is_literal_copy(action) is literal
    assert (copied_template(action, TEMPLATES) is not None) is any_template


def test_counts_over_a_conversation():
    actions = [parse_action(r) for r, _, _ in HAND_WRITTEN]
    assert literal_copy_counts(actions) == (3, 10)
    assert template_copy_counts(actions, TEMPLATES) == (6, 10)
    # the configured list decides what "literal" means
    assert literal_copy_counts(actions, ["go to LOC", "open/close OBJ"]) == (4, 10)
    assert STUDY_LITERAL_COPIES == ("open/close OBJ",)
    assert not is_literal_copy(None)
