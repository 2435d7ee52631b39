"""Episodes in flight per step (core.in_flight): the step function over the episodes' own intervals."""

from __future__ import annotations

import pytest

from twinrun.core.in_flight import episode_intervals, ideal_executor_s, in_flight, step_in_flight


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
