"""The null environment (core/envs/null.py): a turn counter whose episode lengths follow the stated heavy-tailed
distribution, playable through the pool and named by a spec like any environment."""

from __future__ import annotations

import math

import numpy as np
import pytest

from twinrun.core.envs import EnvError, EnvPool, make_catalog
from twinrun.core.envs.null import TURNS_MAX, TURNS_MEDIAN, TURNS_MIN, TURNS_SIGMA, NullEnv, episode_plan


def test_lengths_follow_the_stated_lognormal_clipped_distribution():
    turns = np.array([episode_plan(f"s/null-a/{i:04d}", seed)[0] for i in range(4000) for seed in (0, 1)])
    assert turns.min() == TURNS_MIN and turns.max() == TURNS_MAX
    assert np.median(turns) == TURNS_MEDIAN
    # P(turns >= 50) = P(Z >= (ln 49.5 - ln 8) / 0.8) ~ 1.1%; P(turns <= 2) = P(Z < (ln 2.5 - ln 8) / 0.8) ~ 7.3%
    z_hi = (math.log(TURNS_MAX - 0.5) - math.log(TURNS_MEDIAN)) / TURNS_SIGMA
    z_lo = (math.log(TURNS_MIN + 0.5) - math.log(TURNS_MEDIAN)) / TURNS_SIGMA
    p_hi, p_lo = 0.5 * math.erfc(z_hi / math.sqrt(2)), 0.5 * math.erfc(-z_lo / math.sqrt(2))
    n = len(turns)
    for observed, p in (((turns == TURNS_MAX).mean(), p_hi), ((turns == TURNS_MIN).mean(), p_lo)):
        assert abs(observed - p) < 4 * math.sqrt(p * (1 - p) / n)
    wins = np.array([episode_plan(f"s/null-a/{i:04d}", 0)[1] for i in range(4000)])
    assert abs(wins.mean() - 0.5) < 4 * math.sqrt(0.25 / 4000)


def test_an_episode_ends_after_its_turns_and_replays_identically():
    cat = make_catalog("null_env", "valid_train")
    game = cat.games("null-b")[7]
    assert game.env == "null_env" and game.task_type == "null-b" and len(cat.games()) == 2 * len(cat.games("null-a"))
    turns, won = episode_plan(game.game_id, 5)
    env = NullEnv()
    env.reset(game, 5)
    assert len(env.expert_plan()) == turns
    steps = [env.step("look") for _ in range(turns)]
    assert [s.done for s in steps] == [False] * (turns - 1) + [True] and steps[-1].won == won
    with EnvPool("null_env", workers=0) as pool:
        lease = pool.lease()
        try:
            lease.reset(game, 5)
            got = [lease.step("wait") for _ in range(turns)]
        finally:
            lease.close()
    assert [s.done for s in got] == [s.done for s in steps]
    with pytest.raises(EnvError, match="task_types"):
        make_catalog("null_env", "x", task_types=["pick"])


def test_a_spec_names_the_null_environment(repo_root):
    from twinrun.core.spec import load_spec

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["environment.name=null_env", "environment.task_types=null", "executor.skill_effect=0"])
    assert spec.environment.name == "null_env"
