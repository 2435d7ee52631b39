"""core.policy_input: which positions a curator turn's tokens stand for (the rule both backends apply)."""

from __future__ import annotations

from twinrun.core.curation.policy_input import segment_positions


def test_one_call_per_turn_maps_segments_to_positions():
    # |G| = 3: three curate calls in segments 0,1,2 applied to positions 1,2,3; segment 3 is the closing reply
    assert segment_positions(4, [(0, 1), (1, 2), (2, 3)], 3) == [[1], [2], [3], [3]]


def test_a_turn_without_a_call_is_the_pending_position():
    # the model stopped calling after position 1: its second message is position 2's (missing) turn
    assert segment_positions(2, [(0, 1)], 3) == [[1], [2]]
    # a first message with no valid curate call (e.g. an unknown tool) is position 1's attempt
    assert segment_positions(2, [(1, 1)], 3) == [[1], [1]]


def test_two_calls_in_one_message_cover_two_positions_and_late_calls_are_dropped():
    # message 0 made two curate calls (positions 1 and 2); message 1 one call (3) and one after the end (4 = |G|+1)
    assert segment_positions(2, [(0, 1), (0, 2), (1, 3), (1, 4)], 3) == [[1, 2], [3]]


def test_unknown_segments_fall_back_to_call_order():
    assert segment_positions(3, [(None, 1), (None, 2)], 3) == [[1], [2], [3]]
