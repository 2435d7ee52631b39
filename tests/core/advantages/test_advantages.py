"""Advantage math on hand-computed cases (arithmetic written out), plus a loop-based oracle for GiGPO.

Framework parity lives in tests/backends/test_advantage_parity.py; GiGPO has no installed reference, so its
cases here are computed by hand from docs/advantage-semantics.md §3.4/§6.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import defaultdict
from difflib import SequenceMatcher

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinrun.core.advantages import (
    PRESETS,
    AdvantageInputError,
    EstimatorConfig,
    advantages_for_rows,
    anchor_groups,
    compute_advantages,
    discounted_returns,
    dr_grpo,
    gigpo,
    group_normalize,
    rloo,
    with_knobs,
)
from twinrun.core.errors import TwinrunError
from twinrun.core.spec import AlgorithmSpec

nan = float("nan")
SD_1001 = math.sqrt(1 / 3)  # sample std (ddof=1) of [1, 0, 0, 1]: mean .5, squares 4 x .25 = 1, /3


# ------------------------------------------------------------------------------------------------------------
# group_normalize, dr_grpo, rloo


def test_group_scale_trl_and_verl_eps():
    r = [1.0, 0.0, 0.0, 1.0]
    # (1 - .5)/(sqrt(1/3) + eps)
    np.testing.assert_allclose(group_normalize(r, [0] * 4, eps=1e-4), np.array([1, -1, -1, 1]) * 0.5 / (SD_1001 + 1e-4))
    np.testing.assert_allclose(group_normalize(r, [0] * 4, eps=1e-6), np.array([1, -1, -1, 1]) * 0.5 / (SD_1001 + 1e-6))


def test_two_groups_are_independent_and_row_order_is_free():
    r = [3.0, 1.0, 10.0, 2.0, 20.0]
    g = ["a", "a", "b", "a", "b"]
    # a: [3, 1, 2] mean 2, sd 1 -> [1, -1, 0]/(1+eps); b: [10, 20] mean 15, sd sqrt(50) -> -5/sqrt(50), +5/sqrt(50)
    want = [1 / (1 + 1e-6), -1 / (1 + 1e-6), -5 / (math.sqrt(50) + 1e-6), 0.0, 5 / (math.sqrt(50) + 1e-6)]
    np.testing.assert_allclose(group_normalize(r, g, eps=1e-6), want)


def test_batch_scale_keeps_group_mean():
    r = [1.0, 0.0, 5.0, 7.0]
    g = [0, 0, 1, 1]
    # centres: group means .5 and 6; scale: sd of all four: mean 3.25, squares 5.0625+10.5625+3.0625+14.0625=32.75
    sd = math.sqrt(32.75 / 3)
    want = np.array([0.5, -0.5, -1.0, 1.0]) / (sd + 1e-4)
    np.testing.assert_allclose(group_normalize(r, g, scale="batch", eps=1e-4), want)


def test_scale_none_is_dr_grpo_and_paper_text():
    r = [1.0, 0.0, 0.0, 1.0, 0.25]
    g = [0, 0, 0, 0, 1]
    want = [0.5, -0.5, -0.5, 0.5, 0.0]  # singleton -> 0 by default
    np.testing.assert_allclose(group_normalize(r, g, scale="none"), want)
    np.testing.assert_allclose(dr_grpo(r, g), want)
    np.testing.assert_allclose(compute_advantages(PRESETS["twinrun_paper"].config, r, g), want)


@pytest.mark.parametrize(
    "singleton,scale,want",
    [
        ("zero", "group", 0.0),
        ("raw", "group", 0.7),
        ("mean0_std1", "group", 0.7 / (1 + 1e-6)),  # verl: mu=0, sigma=1 -> 0.7/(1+eps)
        ("mean0_std1", "none", 0.7),  # verl Dr.GRPO: raw score
    ],
)
def test_singleton_rules(singleton, scale, want):
    out = group_normalize([0.7, 1.0, 0.0], ["solo", "pair", "pair"], scale=scale, singleton=singleton)
    assert out[0] == pytest.approx(want, abs=1e-12)
    # the pair is unaffected: mean .5, sd sqrt(.5)
    d = 1 / math.sqrt(2) + 1e-6 if scale == "group" else 1.0
    np.testing.assert_allclose(out[1:], [0.5 / d, -0.5 / d])


def test_unmeasured_rows_leave_the_statistics_and_get_zero():
    # group of 5 with two unmeasured: statistics over [1, 0, 0] -> mean 1/3, sd sqrt((4/9+1/9+1/9)/2)=sqrt(1/3)
    r = [1.0, nan, 0.0, None, 0.0]
    out = group_normalize(np.array(r, dtype=object), ["g"] * 5, eps=1e-6)
    sd = math.sqrt(1 / 3)
    np.testing.assert_allclose(out, [(2 / 3) / (sd + 1e-6), 0.0, (-1 / 3) / (sd + 1e-6), 0.0, (-1 / 3) / (sd + 1e-6)])
    # a group left with one measured rollout: no baseline -> 0 (zero rule); all unmeasured -> 0
    assert list(group_normalize([nan, 2.0, nan, nan], [0, 0, 1, 1])) == [0.0, 0.0, 0.0, 0.0]


def test_all_equal_group_is_exactly_zero():
    for v in (0.0, 0.7, 1 / 3, 123.456):
        assert np.abs(group_normalize([v] * 8, [0] * 8, eps=1e-6)).max() < 1e-9


def test_pool_rows_vs_trajectory_bessel_factor():
    """verl-agent pools episode statistics over step rows: with N=4 trajectories of K=3 equal-length rows, the std
    is taken over 12 rows, so A^E is larger by sqrt((NK-1)/(K(N-1))) = sqrt(11/9) = 1.1055 (reference §3.4(c))."""
    R = [1.0, 0.0, 0.0, 1.0]
    scores = np.repeat(R, 3)
    traj = np.repeat(["a", "b", "c", "d"], 3)
    by_traj = group_normalize(scores, [0] * 12, pool="trajectory", traj_ids=traj, eps=0.0)
    by_rows = group_normalize(scores, [0] * 12, pool="rows", eps=0.0)
    np.testing.assert_allclose(by_rows / by_traj, math.sqrt(11 / 9))


def test_pool_trajectory_with_unequal_lengths_is_not_length_weighted():
    # traj a: 3 rows of 1.0, traj b: 1 row of 0.0. rows pool: mean 3/4; trajectory pool: mean 1/2
    s = [1.0, 1.0, 1.0, 0.0]
    t = ["a", "a", "a", "b"]
    np.testing.assert_allclose(group_normalize(s, [0] * 4, scale="none", pool="rows"), [0.25] * 3 + [-0.75])
    by_traj = group_normalize(s, [0] * 4, scale="none", pool="trajectory", traj_ids=t)
    np.testing.assert_allclose(by_traj, [0.5] * 3 + [-0.5])


def test_rloo_hand_values():
    # [1, 0, 0, 1]: leave-one-out baseline of a 1 is (0+0+1)/3 = 1/3 -> 2/3; of a 0 is 2/3 -> -2/3
    np.testing.assert_allclose(rloo([1, 0, 0, 1], [0] * 4), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # singleton: zero (verl rloo_vectorized) or raw (verl rloo); unmeasured excluded
    np.testing.assert_allclose(rloo([5.0, 1.0, nan, 3.0], ["s", "p", "p", "p"], singleton="raw"), [5.0, -2.0, 0.0, 2.0])
    np.testing.assert_allclose(rloo([5.0], ["s"]), [0.0])


# ------------------------------------------------------------------------------------------------------------
# GiGPO hand cases
#
# One episode group, three trajectories (rows deliberately not in time order for C):
#   A: steps 0,1,2  rewards 0,0,1  anchors s0,s1,s2
#   B: steps 0,1    rewards 0,0    anchors s0,s3
#   C: steps 0,1,2  rewards 0,1,0  anchors s0,s1,s1   (C revisits s1: two members of one step group)

ROWS = [  # (traj, step, reward, anchor)
    ("A", 0, 0.0, "s0"), ("A", 1, 0.0, "s1"), ("A", 2, 1.0, "s2"),
    ("B", 0, 0.0, "s0"), ("B", 1, 0.0, "s3"),
    ("C", 2, 0.0, "s1"), ("C", 0, 0.0, "s0"), ("C", 1, 1.0, "s1"),
]  # fmt: skip
TRAJ = [r[0] for r in ROWS]
STEP = [r[1] for r in ROWS]
REW = [r[2] for r in ROWS]
ANCH = [r[3] for r in ROWS]
GRP = ["g"] * len(ROWS)


def test_gigpo_mean_norm_rows_pool_gamma1_hand():
    # Episode: R_A = 1, R_B = 0, R_C = 1. Row scores: A 1,1,1  B 0,0  C 1,1,1 -> 8 rows, sum 6, mu_E = 0.75.
    #   A^E: A,C rows 1 - .75 = .25;  B rows 0 - .75 = -.75
    # Returns (gamma 1): A 1,1,1   B 0,0   C(step0,1,2) 1,1,0
    # Step groups: s0 = {A0:1, B0:0, C0:1} mu 2/3 -> +1/3, -2/3, +1/3
    #              s1 = {A1:1, C1:1, C2:0} mu 2/3 -> +1/3, +1/3, -2/3
    #              s2 = {A2}, s3 = {B1}: singletons -> 0
    a, ae, as_ = gigpo(REW, GRP, TRAJ, STEP, ANCH, gamma=1.0, step_weight=1.0, mode="mean_norm", pool="rows")
    want_e = {"A": 0.25, "B": -0.75, "C": 0.25}
    want_s = {("A", 0): 1 / 3, ("A", 1): 1 / 3, ("A", 2): 0.0, ("B", 0): -2 / 3, ("B", 1): 0.0,
              ("C", 0): 1 / 3, ("C", 1): 1 / 3, ("C", 2): -2 / 3}  # fmt: skip
    np.testing.assert_allclose(ae, [want_e[t] for t in TRAJ])
    np.testing.assert_allclose(as_, [want_s[(t, s)] for t, s in zip(TRAJ, STEP)])
    # A = A^E + A^S: A0 = A1 = C0 = C1 = 7/12, A2 = .25, B0 = -17/12, B1 = -.75, C2 = .25 - 2/3 = -5/12
    want = {("A", 0): 7 / 12, ("A", 1): 7 / 12, ("A", 2): 0.25, ("B", 0): -17 / 12, ("B", 1): -0.75,
            ("C", 0): 7 / 12, ("C", 1): 7 / 12, ("C", 2): -5 / 12}  # fmt: skip
    np.testing.assert_allclose(a, [want[(t, s)] for t, s in zip(TRAJ, STEP)])


def test_gigpo_mean_std_norm_trajectory_pool_discount_penalty_hand():
    eps = 1e-6
    invalid = [t == "C" and s == 2 for t, s in zip(TRAJ, STEP)]  # C's last turn was invalid, c_inv = 0.1
    a, ae, as_ = gigpo(
        REW, GRP, TRAJ, STEP, ANCH, gamma=0.5, step_weight=0.5, mode="mean_std_norm", pool="trajectory",
        invalid=invalid, invalid_penalty=0.1, eps=eps,
    )
    # Episode stats over trajectories' R = [1, 0, 1]: mu 2/3; deviations 1/3, -2/3, 1/3; sum sq 6/9; /2 -> sd sqrt(1/3)
    mu_e, sd_e = 2 / 3, math.sqrt(1 / 3)
    # row scores: A 1, B 0, C0 = C1 = 1, C2 = 1 - 0.1 = 0.9 (the penalty shifts only that row)
    s = {"A": 1.0, "B": 0.0, "C": 1.0}
    want_e = [((s[t] - (0.1 if bad else 0.0)) - mu_e) / (sd_e + eps) for t, bad in zip(TRAJ, invalid)]
    np.testing.assert_allclose(ae, want_e)
    # Returns, gamma .5: A: G2 = 1, G1 = 0 + .5*1 = .5, G0 = 0 + .5*.5 = .25
    #                    B: 0, 0
    #                    C: G2 = 0, G1 = 1 + .5*0 = 1, G0 = 0 + .5*1 = .5; penalty after discounting: G'_C2 = -0.1
    G = {("A", 0): 0.25, ("A", 1): 0.5, ("A", 2): 1.0, ("B", 0): 0.0, ("B", 1): 0.0,
         ("C", 0): 0.5, ("C", 1): 1.0, ("C", 2): -0.1}  # fmt: skip
    # s0 = {A0 .25, B0 0, C0 .5}: mu .25, sq dev 0 + .0625 + .0625 = .125, /2 -> sd .25
    # s1 = {A1 .5, C1 1, C2 -.1}: mu 1.4/3; sd = sqrt(sum sq dev / 2)
    s1 = np.array([0.5, 1.0, -0.1])
    mu1, sd1 = s1.mean(), math.sqrt(((s1 - s1.mean()) ** 2).sum() / 2)
    stats = {"s0": (0.25, 0.25), "s1": (mu1, sd1)}
    want_s = [
        (G[(t, st_)] - stats[an][0]) / (stats[an][1] + eps) if an in stats else 0.0
        for t, st_, an in zip(TRAJ, STEP, ANCH)
    ]
    np.testing.assert_allclose(as_, want_s)
    np.testing.assert_allclose(a, np.array(want_e) + 0.5 * np.array(want_s))
    # spot values: B0's step advantage = (0 - .25)/(.25 + 1e-6) = -0.999996
    assert as_[3] == pytest.approx(-0.25 / 0.250001)


def test_gigpo_similarity_matching_is_greedy_against_first_member():
    # ratio(b, a) = 2*9/20 = .9 >= .9 -> b joins a's cluster; ratio(c, a) = 2*8/20 = .8 < .9 -> c opens its own
    # cluster even though ratio(c, b) = .9: the representative is the cluster's FIRST member (no chaining).
    a, b, c = "aaaaaaaaaa", "aaaaaaaaab", "aaaaaaaabb"
    assert SequenceMatcher(None, b, a).ratio() == 0.9 and SequenceMatcher(None, c, b).ratio() == 0.9
    codes = anchor_groups([a, b, c, b, a], ["g"] * 5, anchor_match="similarity", similarity=0.9)
    assert codes[0] == codes[1] == codes[3] == codes[4] and codes[2] != codes[0]
    # exact matching keeps all three apart; groups never mix
    ex = anchor_groups([a, b, c, b, a], ["g"] * 5)
    assert len({ex[0], ex[1], ex[2]}) == 3 and ex[1] == ex[3] and ex[0] == ex[4]
    assert anchor_groups([a, a], ["g1", "g2"])[0] != anchor_groups([a, a], ["g1", "g2"])[1]


def test_gigpo_similarity_merges_near_identical_observations():
    k1 = "You are in the kitchen. On the counter you see a apple 1, a bread 1 and a knife 1."
    k2 = "You are in the kitchen. On the counter you see a apple 2, a bread 1 and a knife 1."  # ratio .988
    k3 = "You are in the bathroom. You see a towel 1."
    # two trajectories, one step each from k1/k2 (+ a k3 step): returns 1 and 0
    r, t, s = [1.0, 0.0, 0.0], ["x", "y", "y"], [0, 0, 1]
    anchors = [k1, k2, k3]
    _, _, exact = gigpo(r, ["g"] * 3, t, s, anchors, anchor_match="exact")
    _, _, sim = gigpo(r, ["g"] * 3, t, s, anchors, anchor_match="similarity", similarity=0.95)
    assert list(exact) == [0.0, 0.0, 0.0]  # all singletons
    # {k1: G=1, k2: G=0} merged: mu .5 -> +.5, -.5; k3 alone -> 0
    np.testing.assert_allclose(sim, [0.5, -0.5, 0.0])


def test_gigpo_unmeasured_trajectory_is_excluded_everywhere():
    r = [1.0, 0.0, nan, 1.0, 0.0, 0.0]  # traj U has an unmeasured step
    t = ["P", "P", "U", "U", "Q", "Q"]
    s = [0, 1, 0, 1, 0, 1]
    anchors = ["x", "y", "x", "y", "x", "y"]
    a, ae, as_ = gigpo(r, ["g"] * 6, t, s, anchors, pool="trajectory")
    assert list(a[2:4]) == [0.0, 0.0] and list(ae[2:4]) == [0.0, 0.0] and list(as_[2:4]) == [0.0, 0.0]
    # without U: R_P = 1, R_Q = 0 -> A^E = +.5 / -.5; step x: {P0 G=1, Q0 G=0} -> +.5/-.5; y: {P1 0, Q1 0} -> 0
    np.testing.assert_allclose(ae[[0, 1, 4, 5]], [0.5, 0.5, -0.5, -0.5])
    np.testing.assert_allclose(as_[[0, 1, 4, 5]], [0.5, 0.0, -0.5, 0.0])


def test_gigpo_errors_are_one_line():
    with pytest.raises(AdvantageInputError, match="repeats step"):
        gigpo([1, 2], ["g", "g"], ["t", "t"], [0, 0], [None, None])
    with pytest.raises(AdvantageInputError, match="two groups"):
        gigpo([1, 2], ["g", "h"], ["t", "t"], [0, 1], [None, None])
    with pytest.raises(TwinrunError, match="mode"):
        gigpo([1], ["g"], ["t"], [0], [None], mode="std")


def test_discounted_returns_unsorted_rows_and_gaps():
    # traj p rows given as steps 7, 2, 4 (rank order 2 < 4 < 7) with rewards 3, 1, 2; q a single step
    # p: G(7) = 3, G(4) = 2 + .5*3 = 3.5, G(2) = 1 + .5*3.5 = 2.75
    out = discounted_returns([3.0, 1.0, 5.0, 2.0], ["p", "p", "q", "p"], [7, 2, 0, 4], gamma=0.5)
    np.testing.assert_allclose(out, [3.0, 2.75, 5.0, 3.5])
    # gamma 0: the return is the step reward itself
    np.testing.assert_allclose(discounted_returns([3.0, 1.0], ["p", "p"], [0, 1], gamma=0.0), [3.0, 1.0])


# ------------------------------------------------------------------------------------------------------------
# GiGPO against a straightforward loop-and-dict transcription of verl-agent's algorithm (oracle)


def _oracle_gigpo(r, g, t, s, anchors, gamma, w, mode, pool, eps=1e-6):
    rows = list(range(len(r)))
    by_traj = defaultdict(list)
    for i in rows:
        by_traj[t[i]].append(i)
    ret, R = {}, {}
    for tr, idx in by_traj.items():
        idx.sort(key=lambda i: s[i])
        run = 0.0
        for i in reversed(idx):
            run = r[i] + gamma * run
            ret[i] = run
        R[tr] = sum(r[i] for i in idx)

    def norm(values, keys, singleton_raw):
        members = defaultdict(list)
        for i, k in keys.items():
            members[k].append(values[i])
        out = {}
        for i, k in keys.items():
            m = members[k]
            if len(m) == 1:
                out[i] = (values[i] / (1 + eps if mode == "mean_std_norm" else 1)) if singleton_raw else 0.0
                continue
            mu = sum(m) / len(m)
            sd = math.sqrt(sum((x - mu) ** 2 for x in m) / (len(m) - 1))
            out[i] = (values[i] - mu) / (sd + eps) if mode == "mean_std_norm" else values[i] - mu
        return out

    score = {i: R[t[i]] for i in rows}
    if pool == "rows":  # every step row is a member of its group's statistics
        ae = norm(score, {i: g[i] for i in rows}, True)
    else:  # one member per trajectory, then every row of the trajectory gets that trajectory's value
        first = {idx[0]: idx for idx in by_traj.values()}
        per_first = norm(score, {i: g[i] for i in first}, True)
        ae = {i: per_first[f] for f, idx in first.items() for i in idx}
    step_key = {i: (g[i], anchors[i]) for i in rows}
    as_ = norm(ret, step_key, False)
    a = [ae[i] + w * as_[i] for i in rows]
    return np.array(a), np.array([ae[i] for i in rows]), np.array([as_[i] for i in rows])


@st.composite
def _gigpo_batches(draw):
    n_groups = draw(st.integers(1, 3))
    rows = []
    for gi in range(n_groups):
        for ti in range(draw(st.integers(1, 5))):
            for si in range(draw(st.integers(1, 4))):
                rew = draw(st.sampled_from([0.0, 0.0, 1.0, 0.5, -0.25]))
                anchor = f"o{draw(st.integers(0, 3))}"
                rows.append((f"g{gi}", f"g{gi}t{ti}", si, rew, anchor))
    perm = draw(st.permutations(list(range(len(rows)))))
    return [rows[i] for i in perm]


@settings(max_examples=150, deadline=None)
@given(
    batch=_gigpo_batches(),
    gamma=st.sampled_from([1.0, 0.95, 0.5, 0.0]),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
    pool=st.sampled_from(["rows", "trajectory"]),
)
def test_gigpo_matches_loop_oracle(batch, gamma, mode, pool):
    g, t, s, r, an = (list(x) for x in zip(*batch))
    ours = gigpo(r, g, t, s, an, gamma=gamma, step_weight=0.7, mode=mode, pool=pool)
    want = _oracle_gigpo(r, g, t, s, an, gamma, 0.7, mode, pool)
    for o, w_ in zip(ours, want):
        np.testing.assert_allclose(o, w_, atol=1e-9, rtol=1e-9)


# ------------------------------------------------------------------------------------------------------------
# compute_advantages: the backends' entry point


def test_compute_advantages_maps_the_spec():
    r = [1.0, 0.0, 0.0, 1.0]
    g = [0, 0, 0, 0]
    np.testing.assert_allclose(compute_advantages(AlgorithmSpec(), r, g), [0.5, -0.5, -0.5, 0.5])  # default: none
    got = compute_advantages(AlgorithmSpec(scale="group", eps=1e-4), r, g)
    np.testing.assert_allclose(got, np.array([0.5, -0.5, -0.5, 0.5]) / (SD_1001 + 1e-4))
    got = compute_advantages(AlgorithmSpec(estimator="rloo"), r, g)
    np.testing.assert_allclose(got, [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    np.testing.assert_allclose(compute_advantages(AlgorithmSpec(estimator="dr_grpo"), r, g), [0.5, -0.5, -0.5, 0.5])
    # unmeasured (None) rollouts: excluded, advantage 0
    got = compute_advantages(AlgorithmSpec(), np.array([1.0, None, 0.0, None], dtype=object), g)
    np.testing.assert_allclose(got, [0.5, 0.0, -0.5, 0.0])
    # invalid penalty on an outcome estimator: subtracted from the score before centring
    got = compute_advantages(AlgorithmSpec(invalid_penalty=0.5), r, g, valid=[True, True, True, False])
    np.testing.assert_allclose(got, np.array([1.0, 0.0, 0.0, 0.5]) - 0.375)


def test_compute_advantages_gigpo_rows():
    spec = AlgorithmSpec(estimator="gigpo", gigpo={"gamma": 1.0, "step_weight": 1.0, "mode": "mean_norm"})
    episode = [{"A": 1.0, "B": 0.0, "C": 1.0}[x] for x in TRAJ]
    got = compute_advantages(spec, episode, GRP, traj_ids=TRAJ, step_index=STEP, anchors=ANCH, step_rewards=REW)
    # twinrun pools per trajectory (Eq. 3): mu_E = 2/3 -> A^E = +1/3 (A, C), -2/3 (B); A^S as in the rows case
    a_s = {("A", 0): 1 / 3, ("A", 1): 1 / 3, ("A", 2): 0.0, ("B", 0): -2 / 3, ("B", 1): 0.0,
           ("C", 0): 1 / 3, ("C", 1): 1 / 3, ("C", 2): -2 / 3}  # fmt: skip
    want = [(1 / 3 if t != "B" else -2 / 3) + a_s[(t, s)] for t, s in zip(TRAJ, STEP)]
    np.testing.assert_allclose(got, want)
    with pytest.raises(AdvantageInputError, match="step rewards sum"):
        compute_advantages(spec, [9.0] * 8, GRP, traj_ids=TRAJ, step_index=STEP, anchors=ANCH, step_rewards=REW)
    with pytest.raises(AdvantageInputError, match="step_rewards: None"):
        compute_advantages(spec, episode, GRP, traj_ids=TRAJ, step_index=STEP)


def test_advantages_for_rows_gives_outcome_estimators_one_value_per_trajectory():
    cfg = PRESETS["trl"].config
    out = advantages_for_rows(cfg, step_rewards=REW, group_ids=GRP, traj_ids=TRAJ, step_index=STEP, anchors=ANCH)
    # R = [1, 0, 1]: mean 2/3, sd sqrt(1/3): A/C rows (1/3)/(sd+1e-4), B rows (-2/3)/(sd+1e-4)
    sd = math.sqrt(1 / 3) + 1e-4
    np.testing.assert_allclose(out, [(1 / 3) / sd if t != "B" else (-2 / 3) / sd for t in TRAJ])


def test_presets_and_knobs():
    assert {"trl", "verl", "verl_agent_gigpo", "twinrun_paper"} <= set(PRESETS)
    k = PRESETS["verl_agent_gigpo"].config.knobs()
    assert k["episode_pool"] == "rows" and k["step_singleton"] == "zero" and k["invalid_penalty"] == 0.1
    assert "scale" not in k and "similarity" not in k
    assert PRESETS["trl"].config.knobs()["eps"] == 1e-4
    assert with_knobs("trl", scale="batch") == PRESETS["trl_batch"].config
    assert isinstance(PRESETS["verl"].config, EstimatorConfig)


def test_bad_knobs_are_one_line_errors():
    with pytest.raises(AdvantageInputError, match=r"scale: 'std' is not allowed \(fix: one of group, batch, none\)"):
        group_normalize([1.0, 2.0], [0, 0], scale="std")
    with pytest.raises(AdvantageInputError, match="2 labels for 3 rows"):
        group_normalize([1.0, 2.0, 3.0], [0, 0])
    with pytest.raises(AdvantageInputError, match="inf"):
        group_normalize([1.0, float("inf")], [0, 0])
    with pytest.raises(AdvantageInputError, match="appears in two groups"):
        group_normalize([1.0, 2.0], ["g", "h"], traj_ids=["t", "t"])
    with pytest.raises(AdvantageInputError, match="group_ids: contains None"):
        rloo([1.0, 2.0], ["g", None])


def test_core_module_does_not_import_frameworks():
    code = (
        "import sys, numpy as np, twinrun.core.advantages as a; "
        "a.gigpo([1.0,0.0],['g','g'],['x','y'],[0,0],['o','o']); "
        "print([m for m in ('torch','trl','verl','ray') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
