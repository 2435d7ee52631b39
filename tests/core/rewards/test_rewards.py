"""Composite reward arithmetic on hand-computed cases (paper §3.2.2; docs/advantage-semantics.md §8.2)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from twinrun.core.rewards.composite import (
    PositionResult,
    RewardError,
    composite_reward,
    position_result,
    token_counter,
    whitespace_tokens,
)
from twinrun.core.skills.repository import SkillRepo
from twinrun.core.spec import RewardSpec

PAPER = RewardSpec()  # λ_f = 1.0, λ_u = 0.1, λ_c = 0.05, per-position r_fc / r_cnt
POOLED = RewardSpec(call_pooling="pooled")  # twinrun's earlier reading (DIVERGENCES C2)


def P(index, outcome, calls=0, valid=0, judged=(), repo=None, inp=None) -> PositionResult:
    return PositionResult(
        index=index, outcome=outcome, calls_total=calls, calls_valid=valid, judged=judged, repo_tokens=repo, curator_input_tokens=inp
    )


# |G| = 4. Scored positions 2..4: success, unmeasured, failure.
MIXED = [
    P(1, "failure", calls=2, valid=1, judged=(True,), repo=50, inp=200),
    P(2, "success", calls=1, valid=1, judged=(False,), repo=100, inp=400),
    P(3, "unmeasured", calls=3, valid=2, judged=(True, None), repo=120, inp=300),
    P(4, "failure", calls=0, valid=0, judged=(), repo=120, inp=240),
]


def test_mixed_rollout_by_hand_per_position() -> None:
    r = composite_reward(MIXED, PAPER)
    assert r.call_pooling == "per_position"
    assert (r.r_task.numerator, r.r_task.denominator, r.r_task.value, r.r_task.unmeasured) == (1.0, 2, 0.5, 1)
    # Valid(c_i) = 1/2, 1/1, 2/3, 0 (no op) -> r_fc = (1/2 + 1 + 2/3 + 0) / |G|=4
    assert r.r_fc.denominator == 4 and r.r_fc.value == pytest.approx((0.5 + 1 + 2 / 3) / 4)
    # Judge(c_i) = 1/1, 0/1, 1/1 (the None verdict leaves position 3's share only), 0 (no content) -> 2 / 4
    assert (r.r_cnt.numerator, r.r_cnt.denominator, r.r_cnt.value, r.r_cnt.unmeasured) == (2.0, 4, 0.5, 1)
    assert r.r_comp.value == pytest.approx(0.65)
    assert r.total == pytest.approx(0.5 + (0.5 + 1 + 2 / 3) / 4 + 0.1 * 0.5 + 0.05 * 0.65, abs=1e-12)
    # per turn: task credit for the NEXT position / 2, lambda_f Valid/4, lambda_u Judge/4, lambda_c comp/4
    expected = [
        0.5 + 0.5 / 4 + 0.1 * 1 / 4 + 0.05 * 0.75 / 4,
        0.0 + 1 / 4 + 0.0 + 0.05 * 0.75 / 4,
        0.0 + (2 / 3) / 4 + 0.1 * 1 / 4 + 0.05 * 0.6 / 4,
        0.0 + 0.0 + 0.0 + 0.05 * 0.5 / 4,
    ]
    assert r.step_rewards == pytest.approx(expected, abs=1e-12)
    assert sum(r.step_rewards) == pytest.approx(r.total, abs=1e-12)


def test_mixed_rollout_by_hand_pooled() -> None:
    r = composite_reward(MIXED, POOLED)
    assert r.call_pooling == "pooled"
    # r_task = 1 success / 2 measured (position 3 unmeasured leaves both)
    assert (r.r_task.numerator, r.r_task.denominator, r.r_task.value, r.r_task.unmeasured) == (1.0, 2, 0.5, 1)
    # r_fc = (1 + 1 + 2 + 0) / (2 + 1 + 3 + 0)
    assert (r.r_fc.numerator, r.r_fc.denominator) == (4.0, 6)
    assert r.r_fc.value == pytest.approx(2 / 3)
    # r_cnt = VALID 2 / measured 3 (True, False, True); the None verdict is excluded and counted
    assert (r.r_cnt.numerator, r.r_cnt.denominator, r.r_cnt.unmeasured) == (2.0, 3, 1)
    # r_comp = mean(1-50/200, 1-100/400, 1-120/300, 1-120/240) = mean(.75, .75, .6, .5) = 0.65
    assert r.r_comp.value == pytest.approx(0.65) and r.r_comp.denominator == 4
    # total = 0.5 + 1.0*(2/3) + 0.1*(2/3) + 0.05*0.65 = 1.2658333...
    assert r.total == pytest.approx(1.2658333333333334, abs=1e-12)
    assert (r.positions, r.scored_positions, r.measured_positions, r.unmeasured_positions) == (4, 3, 2, 1)
    # per-turn: task credit for the NEXT position / 2, own calls / 6, own VALIDs * .1 / 3, own comp * .05 / 4
    expected = [
        0.5 + 1 / 6 + 0.1 / 3 + 0.05 * 0.75 / 4,
        0.0 + 1 / 6 + 0.0 + 0.05 * 0.75 / 4,
        0.0 + 2 / 6 + 0.1 / 3 + 0.05 * 0.6 / 4,
        0.0 + 0.0 + 0.0 + 0.05 * 0.5 / 4,
    ]
    assert r.step_rewards == pytest.approx(expected, abs=1e-12)
    assert sum(r.step_rewards) == pytest.approx(r.total, abs=1e-12)
    assert r.terms() == {"r_task": 0.5, "r_fc": r.r_fc.value, "r_cnt": r.r_cnt.value, "r_comp": r.r_comp.value}
    json.loads(r.model_dump_json())  # a record: JSON, no NaN


def test_position_order_does_not_matter() -> None:
    assert composite_reward(list(reversed(MIXED)), PAPER) == composite_reward(MIXED, PAPER)


def _turns(G: int, calls: list[tuple[int, int]]) -> list[PositionResult]:
    """|G| positions, all measured failures; calls[i] = (ops, valid ops) of position i+1 (missing = no turn)."""
    out = []
    for i in range(G):
        c, v = calls[i] if i < len(calls) else (0, 0)
        out.append(P(i + 1, "failure", calls=c, valid=v))
    return out


@pytest.mark.parametrize(
    "case,G,calls,per_position,pooled",
    [
        # the early-stop exploit: one valid call, then the curator stops (or its completion is capped)
        ("stop after one valid call", 10, [(1, 1)], 0.1, 1.0),
        ("four valid at position 1, then nine invalid", 10, [(4, 4)] + [(1, 0)] * 9, 0.1, 4 / 13),
        ("one valid call at every position", 10, [(1, 1)] * 10, 1.0, 1.0),
        ("curate([]) every turn", 10, [(0, 0)] * 10, 0.0, None),
        ("half the positions' ops valid", 4, [(2, 1), (2, 1), (2, 1), (2, 1)], 0.5, 0.5),
        ("turns missing after position 2", 4, [(1, 1), (3, 3)], 0.5, 1.0),
    ],
)
def test_r_fc_is_a_mean_over_positions(case, G, calls, per_position, pooled) -> None:
    spec = RewardSpec(lambda_cnt=None, lambda_comp=None)
    r = composite_reward(_turns(G, calls), spec)
    assert r.r_fc.value == pytest.approx(per_position), case
    assert r.r_fc.denominator == G
    p = composite_reward(_turns(G, calls), spec.model_copy(update={"call_pooling": "pooled"}))
    assert p.r_fc.value == (pytest.approx(pooled) if pooled is not None else None), case
    for rr in (r, p):
        assert sum(rr.step_rewards) == pytest.approx(rr.total, abs=1e-12)


def test_unmeasured_verdicts_leave_only_their_positions_share() -> None:
    spec = RewardSpec(lambda_fc=None, lambda_comp=None, lambda_cnt=1.0)
    pos = [
        P(1, "failure", calls=1, valid=1, judged=(True,)),  # Judge 1
        P(2, "failure", calls=1, valid=1, judged=(None,)),  # every verdict unmeasured: leaves the mean
        P(3, "failure"),  # wrote nothing: Judge 0, stays in the mean
        P(4, "failure", calls=2, valid=2, judged=(False, True)),  # Judge 1/2
        P(5, "failure", calls=2, valid=2, judged=(None, False)),  # judged on its measured verdict: 0
    ]
    r = composite_reward(pos, spec)
    assert (r.r_cnt.numerator, r.r_cnt.denominator, r.r_cnt.unmeasured) == (1.5, 4, 2)
    assert r.r_cnt.value == pytest.approx(1.5 / 4)
    assert r.step_rewards == pytest.approx([1 / 4, 0.0, 0.0, 0.5 / 4, 0.0])
    # every verdict of the rollout unmeasured: the term is unmeasured (None), never 0
    r = composite_reward([P(1, "failure", calls=1, valid=1, judged=(None,)), P(2, "success", calls=1, valid=1,
                                                                                judged=(None,))], spec)
    assert r.r_cnt.value is None and r.r_cnt.denominator == 0 and r.total == 1.0
    # content written but no judge ran (content_ops without verdicts): unmeasured, not 0
    r = composite_reward([PositionResult(index=1, outcome="failure", calls_total=1, calls_valid=1, content_ops=1),
                          P(2, "success")], spec)
    assert (r.r_cnt.value, r.r_cnt.denominator) == (0.0, 1)  # position 2 (no content) alone: Judge 0


@pytest.mark.parametrize("pooling", ["per_position", "pooled"])
def test_step_rewards_sum_to_the_total_on_random_rollouts(pooling) -> None:
    import random

    rng = random.Random(7)
    spec = RewardSpec(call_pooling=pooling)
    for _ in range(300):
        G = rng.randint(2, 10)
        pos = []
        for i in range(G):
            calls = rng.choice([0, 0, 1, 2, 4])
            valid = rng.randint(0, calls)
            judged = tuple(rng.choice([True, False, None]) for _ in range(rng.randint(0, valid)))
            pos.append(P(i + 1, rng.choice(["success", "failure", "unmeasured"]), calls=calls, valid=valid,
                         judged=judged, repo=rng.randint(0, 500), inp=rng.randint(1, 500)))
        r = composite_reward(pos, spec)
        if r.total is not None:
            assert len(r.step_rewards) == G
            assert sum(r.step_rewards) == pytest.approx(r.total, abs=1e-9)


def test_step_rewards_are_section_8_2s_form_when_every_position_is_measured() -> None:
    # all measured, any number of calls and verdicts per turn:
    # r_i = 1(ξ_{i+1})/(G-1)[i<G] + (λf Valid(c_i) + λu Judge(c_i) + λc C_i)/G
    G = 5
    outcomes = ["failure", "success", "success", "failure", "success"]
    calls = [(1, 1), (3, 1), (2, 2), (0, 0), (4, 3)]
    verdicts = [(True,), (False,), (True, False), (), (True, True, False)]
    pos = [P(i + 1, outcomes[i], calls=calls[i][0], valid=calls[i][1], judged=verdicts[i], repo=10 * (i + 1), inp=100)
           for i in range(G)]
    r = composite_reward(pos, PAPER)
    valid = [1, 1 / 3, 1, 0, 3 / 4]
    judge = [1, 0, 1 / 2, 0, 2 / 3]
    for i in range(G):
        task = (outcomes[i + 1] == "success") / (G - 1) if i < G - 1 else 0.0
        own = (1.0 * valid[i] + 0.1 * judge[i] + 0.05 * (1 - 10 * (i + 1) / 100)) / G
        assert r.step_rewards[i] == pytest.approx(task + own, abs=1e-12)
    assert r.total == pytest.approx(3 / 4 + sum(valid) / G + 0.1 * sum(judge) / G + 0.05 * (1 - 0.3))
    assert sum(r.step_rewards) == pytest.approx(r.total, abs=1e-12)


def test_no_measured_scored_position_is_an_unmeasured_rollout_not_zero() -> None:
    pos = [P(1, "success", calls=1, valid=1), P(2, "unmeasured", calls=1, valid=1), P(3, "unmeasured")]
    r = composite_reward(pos, PAPER)
    assert r.total is None and r.unmeasured and r.step_rewards == []
    assert r.r_task.value is None and (r.r_task.numerator, r.r_task.denominator, r.r_task.unmeasured) == (0.0, 0, 2)
    assert r.r_fc.value == pytest.approx(2 / 3)  # the other terms are still computed and recorded


def test_position_one_is_never_scored() -> None:
    # position 1's success does not count; only position 2 is scored
    r = composite_reward([P(1, "success"), P(2, "failure")], PAPER)
    assert (r.r_task.value, r.total) == (0.0, 0.0)
    r = composite_reward([P(1, "unmeasured"), P(2, "success")], PAPER)
    assert r.total == 1.0 and r.unmeasured_positions == 0


def test_min_measured_positions_gates_the_rollout() -> None:
    pos = [P(1, "failure"), P(2, "success"), P(3, "unmeasured"), P(4, "unmeasured")]
    assert composite_reward(pos, RewardSpec(min_measured_positions=1)).total == 1.0
    r = composite_reward(pos, RewardSpec(min_measured_positions=2))
    assert r.total is None and r.measured_positions == 1 and r.min_measured_positions == 2


def test_disabled_terms_are_recorded_as_disabled() -> None:
    r = composite_reward(MIXED, RewardSpec(lambda_fc=None, lambda_cnt=None, lambda_comp=None))
    for t in (r.r_fc, r.r_cnt, r.r_comp):
        assert t.disabled and t.value is None and t.numerator is None and t.denominator is None and t.contribution == 0.0
    assert r.total == 0.5 and r.step_rewards == [0.5, 0.0, 0.0, 0.0]


def test_zero_weight_computes_and_logs_without_weight() -> None:
    r = composite_reward(MIXED, RewardSpec(lambda_fc=0.0, lambda_cnt=0.0, lambda_comp=0.0))
    assert not r.r_fc.disabled and r.r_fc.value == pytest.approx(13 / 24) and r.r_fc.contribution == 0.0
    assert r.total == 0.5


def test_empty_denominators_give_none_terms_that_add_nothing() -> None:
    pos = [P(1, "failure"), P(2, "success"), P(3, "success")]  # no calls, nothing judged, no token counts
    r = composite_reward(pos, POOLED)
    assert r.total == 1.0
    assert (r.r_fc.value, r.r_fc.denominator) == (None, 0)
    assert (r.r_cnt.value, r.r_cnt.denominator) == (None, 0)
    assert (r.r_comp.value, r.r_comp.denominator, r.r_comp.unmeasured) == (None, 0, 3)
    r = composite_reward(pos, PAPER)  # per position: no op and no content score 0 at every position
    assert r.total == 1.0 and (r.r_fc.value, r.r_fc.denominator) == (0.0, 3) and (r.r_cnt.value, r.r_cnt.denominator) == (0.0, 3)
    assert (r.r_comp.value, r.r_comp.denominator, r.r_comp.unmeasured) == (None, 0, 3)


def test_compression_is_not_clipped_and_skips_positions_without_counts() -> None:
    pos = [P(1, "success", repo=300, inp=100), P(2, "success"), P(3, "success", repo=0, inp=50)]
    r = composite_reward(pos, RewardSpec(lambda_fc=None, lambda_cnt=None, lambda_comp=1.0))
    assert r.r_comp.value == pytest.approx(((1 - 3) + 1) / 2) and r.r_comp.unmeasured == 1
    assert r.total == pytest.approx(1.0 + 0.0 * 0 + -0.5)


@pytest.mark.parametrize(
    "positions,fragment",
    [
        ([], "empty"),
        ([P(1, "success"), P(1, "failure")], "not 1..2"),
        ([P(2, "success"), P(3, "failure")], "not 1..2"),
    ],
)
def test_bad_position_lists(positions, fragment) -> None:
    with pytest.raises(RewardError, match=fragment):
        composite_reward(positions, PAPER)


def test_bad_position_values() -> None:
    with pytest.raises(ValidationError, match="exceeds calls_total"):
        P(1, "success", calls=1, valid=2)
    with pytest.raises(ValidationError):
        P(1, "success", inp=0)
    with pytest.raises(ValidationError):
        P(0, "success")
    with pytest.raises(ValidationError):
        P(1, "crashed")


def test_position_result_from_a_real_turn() -> None:
    repo = SkillRepo()
    ops = [
        repo.apply("new_skill_insert", {"skill_name": "a1", "content": "---\nname: a1\ndescription: do x\n---\n- go\n"}),
        repo.apply("skill_delete", {"skill_name": "missing"}),
    ]
    chi = "# Task Context\n## Task Description\nput a mug in the cabinet"
    p = position_result(2, "success", ops, [True], repo_text=repo.text(), curator_input=chi, count_tokens=whitespace_tokens)
    assert (p.calls_total, p.calls_valid, p.judged, p.content_ops) == (2, 1, (True,), 1)
    assert (p.valid_share, p.judge_share) == (0.5, 1.0)
    assert (p.repo_tokens, p.curator_input_tokens) == (len(repo.text().split()), len(chi.split()))
    p = position_result(2, "success", ops, [], repo_text=None, curator_input=chi, count_tokens=whitespace_tokens)
    assert p.repo_tokens is None and p.curator_input_tokens is None


class EncodeOnlyTokenizer:
    """Test double with the HF tokenizer `encode(text, add_special_tokens=...)` signature (a real HF tokenizer
    needs a model download; the adapter only relies on this one method)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ord(c) for c in text]
        return ([0] + ids) if add_special_tokens else ids


def test_token_counter_adapters() -> None:
    assert token_counter(EncodeOnlyTokenizer())("abc") == 3  # special tokens excluded
    assert token_counter(lambda s: s.split())("a b c") == 3
    assert token_counter(len)("abcd") == 4
    with pytest.raises(RewardError):
        token_counter(5)


def _md(name: str, body: str = "- go\n- look\n") -> str:
    return f"---\nname: {name}\ndescription: do x\n---\n{body}"


def test_reverted_calls_flag_what_the_same_turn_undid() -> None:
    """reward.churn_guard's rule on real repository operations: a write whose skill the turn later deletes and that
    delete are flagged; a delete of a skill that was there before the turn, a failed call, a rename followed by a
    delete of the new name, and an update overwritten by a later update are read as written."""
    from twinrun.core.rewards.composite import reverted_calls

    repo = SkillRepo()
    repo.apply("new_skill_insert", {"skill_name": "old", "content": _md("old")})  # an earlier turn's skill
    ops = [
        repo.apply("new_skill_insert", {"skill_name": "a", "content": _md("a")}),  # 0: deleted at 4 -> reverted
        repo.apply("skill_update", {"skill_name": "old", "new_content": _md("old", "- new\n")}),  # 1: deleted at 5
        repo.apply("new_skill_insert", {"skill_name": "b", "content": _md("b")}),  # 2: renamed to c, deleted at 6
        repo.apply("skill_update", {"skill_name": "b", "new_name": "c"}),  # 3: rename of this turn's skill
        repo.apply("skill_delete", {"skill_name": "a"}),  # 4: deletes this turn's insert -> reverted
        repo.apply("skill_delete", {"skill_name": "old"}),  # 5: deletes an earlier skill: a real change
        repo.apply("skill_delete", {"skill_name": "c"}),  # 6: deletes this turn's (renamed) skill -> reverted
        repo.apply("skill_delete", {"skill_name": "a"}),  # 7: fails (already gone)
        repo.apply("new_skill_insert", {"skill_name": "d", "content": _md("d")}),  # 8: overwritten, survives
        repo.apply("skill_update", {"skill_name": "d", "new_content": _md("d", "- again\n- twice\n")}),  # 9
    ]
    assert [o.ok for o in ops] == [True] * 7 + [False, True, True]
    assert reverted_calls(ops) == [True, True, True, True, True, False, True, False, False, False]
    assert len(repo) == 1 and repo.get("d") is not None


def test_churn_guard_takes_undone_writes_out_of_r_fc_and_r_cnt() -> None:
    """Insert-then-delete at every position (|G| = 3) earns the full r_fc and r_cnt under the paper's reward; under
    reward.churn_guard both are 0, while an honest turn (an insert that stays) scores the same either way."""
    guard = RewardSpec(churn_guard=True)
    churn, honest = [], []
    for i in (1, 2, 3):
        repo = SkillRepo()
        ops = [repo.apply("new_skill_insert", {"skill_name": f"s{i}", "content": _md(f"s{i}")}),
               repo.apply("skill_delete", {"skill_name": f"s{i}"})]
        churn.append(position_result(i, "success", ops, [True], repo_text=repo.text(), curator_input="a b c d",
                                     count_tokens=whitespace_tokens))
        kept = SkillRepo()
        ops = [kept.apply("new_skill_insert", {"skill_name": f"s{i}", "content": _md(f"s{i}")})]
        honest.append(position_result(i, "success", ops, [True], repo_text="a", curator_input="a b c d",
                                      count_tokens=whitespace_tokens))
    assert churn[0].calls_reverted == 2 and churn[0].judged_reverted == (True,)
    paper, guarded = composite_reward(churn, PAPER), composite_reward(churn, guard)
    assert (paper.r_fc.value, paper.r_cnt.value) == (1.0, 1.0)
    assert (guarded.r_fc.value, guarded.r_cnt.value) == (0.0, 0.0)
    assert guarded.r_comp.value == paper.r_comp.value and guarded.r_task.value == paper.r_task.value
    assert guarded.total == pytest.approx(paper.total - 1.0 - 0.1)
    assert sum(guarded.step_rewards) == pytest.approx(guarded.total)
    assert composite_reward(honest, guard).model_dump() == composite_reward(honest, PAPER).model_dump()
    with pytest.raises(ValidationError, match="calls_reverted"):
        PositionResult(index=1, outcome="success", calls_total=1, calls_valid=0, calls_reverted=1)
