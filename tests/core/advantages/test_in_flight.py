"""Episodes in flight per step (core.in_flight): the step function over the episodes' own intervals."""

from __future__ import annotations

import pytest

from twinrun.core.advantages.in_flight import episode_intervals, executor_losses, ideal_executor_s, in_flight, step_in_flight


def test_in_flight_is_the_time_weighted_count_over_the_window():
    # 0..4: [0,2] [1,3] [1,4] -> count 1 on [0,1), 3 on [1,2), 2 on [2,3), 1 on [3,4): mean (1+3+2+1)/4
    assert in_flight([(0, 2), (1, 3), (1, 4)]) == (pytest.approx(7 / 4), 3)
    # back to back: one end and the next start at the same instant are never two in flight
    assert in_flight([(0, 1), (1, 2), (2, 3)]) == (pytest.approx(1.0), 1)
    # a gap (the curator generating between positions) counts as zero in flight
    assert in_flight([(0, 1), (3, 4)]) == (pytest.approx(0.5), 1)
    assert in_flight([]) == (None, None) and in_flight([(5, 5), (5, 5)]) == (2.0, 2)
    assert ideal_executor_s(96, 0.5, 32) == pytest.approx(1.5)


def test_intervals_come_from_the_rollout_rows_and_a_shared_episode_counts_once():
    def pos(start, wall, shared=False):
        return {"episode_started_at": start, "episode_wall_s": wall, "episode_shared": shared}

    rows = [{"positions": [pos(100.0, 2.0), pos(102.0, 1.0)]},
            {"positions": [pos(100.0, 2.0, shared=True), pos(101.0, 3.0)]},
            {"positions": [{"index": 1}]}]  # written before the fields existed: left out
    assert episode_intervals(rows) == [(100.0, 102.0), (102.0, 103.0), (101.0, 104.0)]
    assert step_in_flight(rows) == (pytest.approx((1 + 2 + 2 + 1) / 4), 2)


def test_executor_losses_charge_idle_slots_to_what_the_rollouts_do():
    # C = 2 over [0, 6] (12 slot-seconds). A: episode [0,2] with calls [0,1],[1,2]; episode [3,5] with call [3,4].
    # B: episode [0,4] with calls [0,1],[1.5,4]; episode [5,6] with call [5,6].
    calls = [(0, 1), (1, 2), (3, 4), (0, 1), (1.5, 4), (5, 6)]
    rollouts = [[(0, 2), (3, 5)], [(0, 4), (5, 6)]]
    # [1,1.5) B between calls: environment .5; [2,3) A between episodes while B's episode 1 runs: barrier 1 (under
    # a barrier, A waits for B's episode 1 to end at 4); [4,5) A's episode 2 off-call (environment 1) and B between
    # episodes (curator 1: episode 1 has ended for both); [5,6) A finished: drain 1; calls 7.5
    got = executor_losses(calls, rollouts, 2, barrier=True)
    assert got == pytest.approx({"calls": 7.5 / 12, "environment": 1.5 / 12, "barrier": 1 / 12, "curator": 1 / 12,
                                 "drain": 1 / 12})
    # without a barrier A's wait is its own curator turn
    got = executor_losses(calls, rollouts, 2, barrier=False)
    assert got == pytest.approx({"calls": 7.5 / 12, "environment": 1.5 / 12, "barrier": 0.0, "curator": 2 / 12,
                                 "drain": 1 / 12})
    # more waiting rollouts than idle slots: the slots are shared out in proportion (C = 1, two rollouts off-call
    # on [0,1), one call on [1,2))
    assert executor_losses([(1, 2)], [[(0, 2)], [(0, 2)]], 1) == pytest.approx(
        {"calls": 0.5, "environment": 0.5, "barrier": 0.0, "curator": 0.0, "drain": 0.0})
