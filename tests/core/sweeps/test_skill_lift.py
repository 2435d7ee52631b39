"""The paired skill lift (twinrun.core.sweeps.skill_lift): real curation rollouts on real ALFWorld games with the scripted
stand-in executor, replayed without skills under the rollouts' own executor seeds."""

from __future__ import annotations

import pytest

from twinrun.core.sweeps.skill_lift import (
    ScoredPosition,
    lift_by_step,
    replay_without_skills,
    scored_positions,
    seed_check,
)

GOOD_PICK = {"function": "new_skill_insert", "arguments": {"skill_name": "pick-tips", "content": (
    "---\nname: pick-tips\ndescription: pick and put tasks\n---\nTake the object, then put it in the target.\n")}}
GOOD_LOOK = {"function": "new_skill_insert", "arguments": {"skill_name": "look-tips", "content": (
    "---\nname: look-tips\ndescription: look and examine tasks\n---\nTake the object and use the lamp.\n")}}


def _rollouts(spec, alfworld_data, *, insert: bool, steps: int = 2, rollouts: int = 2) -> list[dict]:
    from twinrun.core.curation import CurationRuntime

    records = []
    with CurationRuntime.from_spec(spec, environ={"ALFWORLD_DATA": str(alfworld_data)}, judge=None, workers=0) as rt:
        for step in range(steps):
            for g in range(spec.batch.groups_per_step):
                group = rt.task_group(step, g)
                for r in range(rollouts):
                    s = rt.session(group, rollout_index=r)
                    s.start()
                    op = GOOD_PICK if group.task_type == "pick" else GOOD_LOOK
                    for i in range(spec.environment.group_size):
                        s.submit_operations([op] if insert and i == 0 else [])
                    res = s.finish()
                    records.append(res.record.model_dump(mode="json") | {"step": step})
    return records


@pytest.fixture(scope="module")
def spec(smoke_spec_path):
    from twinrun.core.spec import load_spec

    return load_spec(smoke_spec_path)


@pytest.mark.slow  # curation rollouts and their no-skill replay on real games
def test_the_replay_reproduces_every_position_that_retrieved_nothing(spec, alfworld_data, tmp_path):
    """The wiring of the seeds: a rollout whose curator wrote nothing plays exactly the no-skill replay, so the lift
    is 0 at every step and the check agrees everywhere; a replay under other seeds does not (the check can fail)."""
    positions = scored_positions(_rollouts(spec, alfworld_data, insert=False))
    assert positions and not any(p.retrieved for p in positions)
    assert {p.relevance for p in positions} == {0.0}  # recorded: the stand-in read no skill
    cache = tmp_path / "replay.json"
    replay = replay_without_skills(spec, {p.key for p in positions}, environ={"ALFWORLD_DATA": str(alfworld_data)},
                                   cache=cache, workers=0)
    agree, compared = seed_check(positions, replay)
    assert compared == len(positions) and agree == compared
    assert all(s.lift == 0 for s in lift_by_step(positions, replay))
    # the replay is cached: a second call plays nothing (an unknown game would fail if it did)
    assert replay_without_skills(spec, {p.key for p in positions}, environ={}, cache=cache) == replay

    import twinrun.core.sweeps.skill_lift as sl

    real = sl.rollout_episode_seed
    try:
        sl.rollout_episode_seed = lambda seed, gid, ri, pos: real(seed + 1, gid, ri, pos)  # the cut: other seeds
        wrong = replay_without_skills(spec, {p.key for p in positions}, environ={"ALFWORLD_DATA": str(alfworld_data)}, workers=0)
    finally:
        sl.rollout_episode_seed = real
    agree, compared = seed_check(positions, wrong)
    assert agree < compared


@pytest.mark.slow  # curation rollouts and their no-skill replay on real games
def test_relevant_skills_show_a_positive_paired_lift(spec, alfworld_data):
    """With a relevant skill inserted at position 1 the stand-in plays the expert more often at positions 2..|G|:
    the paired lift over the same games without skills is positive (16 rollouts x 2 scored positions)."""
    positions = scored_positions(_rollouts(spec, alfworld_data, insert=True, steps=2, rollouts=4))
    assert all(p.retrieved for p in positions)
    assert {p.relevance for p in positions} == {1.0}  # what the stand-in read: the best skill of each type
    replay = replay_without_skills(spec, {p.key for p in positions}, environ={"ALFWORLD_DATA": str(alfworld_data)}, workers=0)
    steps = lift_by_step(positions, replay)
    total = sum(s.lift * s.n for s in steps) / sum(s.n for s in steps)
    assert total > 0.2, [(s.r_task, s.no_skill) for s in steps]
    assert seed_check(positions, replay) == (0, 0)  # nothing to compare: every position had a skill


def test_scored_positions_keep_the_last_row_of_a_resumed_rollout_and_only_measured_scored_positions():
    def row(step, outcome2, outcome3, retrieved=()):
        pos = [{"index": 1, "outcome": "success", "game_id": "g1", "retrieved_skills": []},
               {"index": 2, "outcome": outcome2, "game_id": "g2", "retrieved_skills": list(retrieved)},
               {"index": 3, "outcome": outcome3, "game_id": "g3", "retrieved_skills": []}]
        return {"kind": "curation_rollout", "step": step, "group_id": "s0-g0-pick", "rollout_index": 0,
                "positions": pos}

    rows = [row(0, "failure", "failure"), {"kind": "other"}, row(0, "success", "unmeasured", ["pick-tips"])]
    assert scored_positions(rows) == [ScoredPosition(0, "s0-g0-pick", 0, 2, "g2", True, True)]


def test_lift_by_step_pairs_each_position_with_its_own_replay():
    ps = [ScoredPosition(0, "g", 0, 2, "a", True, True), ScoredPosition(0, "g", 0, 3, "b", False, False),
          ScoredPosition(1, "g", 0, 2, "c", True, True), ScoredPosition(1, "g", 1, 2, "c", False, False)]
    replay = {("g", 0, 2, "a"): False, ("g", 0, 3, "b"): False, ("g", 0, 2, "c"): True}  # (g, 1, 2, c) unmeasured
    (s0, s1) = lift_by_step(ps, replay)
    assert (s0.step, s0.n, s0.r_task, s0.no_skill, s0.lift) == (0, 2, 0.5, 0.0, 0.5)
    assert (s1.step, s1.n, s1.r_task, s1.no_skill, s1.lift) == (1, 1, 1.0, 1.0, 0.0)
    assert seed_check(ps, replay) == (1, 1)
