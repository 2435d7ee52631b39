"""Real ALFWorld (textworld) and ScienceWorld (JVM) games behind the TextEnv protocol, and the worker pool."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from twinrun.core.envs import EnvError, EnvPool, GameRef, make_catalog
from twinrun.core.envs.alfworld import (
    ALFWORLD_TYPE_MAP,
    AlfWorldCatalog,
    AlfWorldEnv,
    resolve_alfworld_data,
    split_counts,
)
from twinrun.core.errors import InfrastructureError

# Games whose handcoded expert wins in 5-6 steps (kept short: a reset costs ~1 s, a step ~0.1 s)
LOOK_5 = "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790"
PICK_5 = "valid_seen/pick_and_place_simple-Box-None-Dresser-224/trial_T20190907_164104_229696"

pytestmark = pytest.mark.alfworld


@pytest.fixture(scope="module")
def catalog(alfworld_data):
    return AlfWorldCatalog(alfworld_data, "valid_seen")


def game(catalog, game_id: str) -> GameRef:
    return next(g for g in catalog.games() if g.game_id == game_id)


def play_expert(env, g: GameRef, seed: int | None = None, max_steps: int = 30) -> tuple[list[str], bool]:
    env.reset(g, seed)
    actions = []
    for _ in range(max_steps):
        a = env.expert_plan()[0]
        actions.append(a)
        if env.step(a).done:
            return actions, True
    return actions, False


def test_catalog_types_match_the_paper_split(catalog):
    counts = {t: len(catalog.games(t)) for t in catalog.task_types()}
    # valid_seen as used by SkillOS: Pick 35, Look 13, Clean 27, Heat 16, Cool 25, Pick2 24 (140)
    assert counts == {"pick": 35, "look": 13, "clean": 27, "heat": 16, "cool": 25, "pick2": 24}
    assert set(ALFWORLD_TYPE_MAP.values()) == set(counts)
    g = catalog.games("look")[0]
    assert g.env == "alfworld" and g.path.endswith("game.tw-pddl") and g.game_id.startswith("valid_seen/")
    assert GameRef.from_dict(g.to_dict()) == g


def test_bad_inputs_are_one_line_errors(alfworld_data, tmp_path):
    with pytest.raises(EnvError, match=r"environment.split: 'nope' .*fix: one of \['valid_seen'"):
        AlfWorldCatalog(alfworld_data, "nope")
    with pytest.raises(EnvError, match="ALFWORLD_DATA"):
        resolve_alfworld_data(None, {})
    with pytest.raises(EnvError, match="no json_2.1.1"):
        resolve_alfworld_data(tmp_path)
    assert resolve_alfworld_data(None, {"ALFWORLD_DATA": str(alfworld_data)}) == alfworld_data
    with pytest.raises(EnvError, match="look"):
        AlfWorldCatalog(alfworld_data, "valid_seen").games("looking")
    with pytest.raises(EnvError, match="environment.name"):
        make_catalog("minecraft", "x")


def test_alfworld_expert_wins_and_replays_identically(catalog):
    env = AlfWorldEnv()
    g = game(catalog, LOOK_5)
    obs = env.reset(g)
    assert obs.task == "look at alarmclock under the desklamp."
    assert "Welcome" not in obs.text and "help" not in obs.admissible_actions and "look" in obs.admissible_actions
    first, won = play_expert(env, g, seed=7)
    assert won and len(first) <= 6
    second, _ = play_expert(env, g, seed=7)
    assert first == second
    assert env.cache.starts == 1  # the started game was reused by the second episode
    step = env.step("examine nothing")  # stepping after the win still answers; an unknown action does nothing
    assert step.observation.text == "Nothing happens."
    env.close()
    env.cache.close()


def test_interleaved_envs_do_not_perturb_each_other(catalog):
    """alfworld's expert draws from the global `random`: envs sharing a worker must keep their own streams."""
    a, b = AlfWorldEnv(), AlfWorldEnv()
    g1, g2 = game(catalog, LOOK_5), game(catalog, PICK_5)
    alone, _ = play_expert(a, g1, seed=3)
    a.reset(g1, seed=3)
    b.reset(g2, seed=5)
    together = []
    for _ in range(len(alone)):
        act = a.expert_plan()[0]
        together.append(act)
        b.step(b.expert_plan()[0] if b.expert_plan() else "look")
        a.step(act)
    assert together == alone
    for e in (a, b):
        e.close()
        e.cache.close()


def test_pool_worker_process_plays_and_survives_a_crash(catalog):
    g = game(catalog, PICK_5)
    with EnvPool("alfworld", workers=1, options={"expert_type": "handcoded"}) as pool:
        with pool.lease() as env:
            obs = env.reset(g)
            assert obs.task.startswith("put")
            worker = pool._workers[0]
            os.kill(worker._proc.pid, 9)  # the engine process dies mid-episode
            with pytest.raises(InfrastructureError, match="died|restarted"):
                env.step("look")
            with pytest.raises(InfrastructureError, match="restarted"):
                env.step("look")  # this lease's env is gone for good
        # a new lease gets a fresh worker and plays to the end, through the async API
        async def play() -> bool:
            lease = pool.lease()
            await lease.areset(g)
            for _ in range(10):
                step = await lease.astep((await lease.aexpert_plan())[0])
                if step.won:
                    break
            await lease.aclose()
            return step.won

        assert asyncio.run(play())
        assert pool.stats()[0]["restarts"] == 1


@pytest.mark.sciworld
@pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs Java 17")
def test_sciworld_gold_path_wins_with_bounded_heap():
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv

    with pytest.raises(EnvError, match="not a ScienceWorld split"):
        ScienceWorldCatalog("valid_seen")
    with pytest.raises(EnvError, match="not a ScienceWorld task"):
        ScienceWorldCatalog("train", tasks=["boiling"])
    tasks = ["find-non-living-thing", "lifespan-longest-lived"]  # gold paths of 5-6 actions
    train = ScienceWorldCatalog("train", tasks=tasks, heap="256m")
    try:
        games = [train.games(t)[0] for t in tasks]
        train_vars = {g.variation for g in train.games(tasks[0])}
    finally:
        train.close()
    assert all(g.split == "train" and g.env == "sciworld" for g in games)
    dev = ScienceWorldCatalog("dev", tasks=tasks[:1], heap="256m")
    try:
        assert {g.variation for g in dev.games(tasks[0])}.isdisjoint(train_vars)
    finally:
        dev.close()

    env = SciWorldEnv(heap="256m")
    try:
        for g in games:
            obs = env.reset(g)
            assert obs.task and len(obs.admissible_actions) > 10
            plan = env.expert_plan()
            assert 0 < len(plan) <= 8
            for i, a in enumerate(plan):
                assert env.expert_plan() == plan[i:]
                step = env.step(a)
                if step.done:
                    break
            assert step.won and step.score == 100
        # the JVM runs with the heap bound
        pid = env._env._gateway.java_process.pid
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert b"-Xmx256m" in f.read()
        assert "JAVA_TOOL_OPTIONS" not in os.environ or "-Xmx256m" not in os.environ["JAVA_TOOL_OPTIONS"]
    finally:
        env.shutdown()


def _trial(root, split, task_dir, trial, task_type, game):
    d = root / "json_2.1.1" / split / task_dir / trial
    d.mkdir(parents=True)
    (d / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    if game is not None:
        (d / "game.tw-pddl").write_text(json.dumps(game))
    return d


def alfred_tw_env_selection(data_path) -> list[str]:
    """What alfworld's own AlfredTWEnv selects from `data_path` (all six task types, no game limit)."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {"env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
              "dataset": {"data_path": str(data_path), "num_train_games": -1}}
    return sorted(str(Path(f).resolve()) for f in AlfredTWEnv(config, train_eval="train").game_files)


def test_catalog_selects_what_alfred_tw_env_selects(tmp_path, capsys):
    """Trials under movable/Sliced folders, without a game file, without a solvable flag or unsolvable are left
    out, exactly as alfworld's AlfredTWEnv leaves them out (a full alfworld-download: train 3553, valid_seen 140,
    valid_unseen 134); doctor prints the per-split counts."""
    ok = {"solvable": True}
    keep = [
        _trial(tmp_path, "train", "pick_and_place_simple-Book-None-Desk-1", "trial_T1", "pick_and_place_simple", ok),
        _trial(tmp_path, "train", "pick_two_obj_and_place-CD-None-Safe-2", "trial_T2", "pick_two_obj_and_place", ok),
    ]
    _trial(tmp_path, "train", "pick_and_place_with_movable_recep-Pen-Mug-Desk-3", "trial_T3",
           "pick_and_place_with_movable_recep", ok)  # a task type twinrun does not know: skipped before it is read
    _trial(tmp_path, "train", "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-4", "trial_T4",
           "pick_heat_then_place_in_recep", ok)
    _trial(tmp_path, "train", "look_at_obj_in_light-CD-None-DeskLamp-5", "trial_T5", "look_at_obj_in_light", None)
    _trial(tmp_path, "train", "pick_cool_then_place_in_recep-Egg-None-Sink-6", "trial_T6",
           "pick_cool_then_place_in_recep", {"pddl_problem": "..."})
    _trial(tmp_path, "train", "pick_clean_then_place_in_recep-Cup-None-Shelf-7", "trial_T7",
           "pick_clean_then_place_in_recep", {"solvable": False})
    _trial(tmp_path, "valid_seen", "look_at_obj_in_light-Box-None-DeskLamp-8", "trial_T8", "look_at_obj_in_light", ok)

    cat = AlfWorldCatalog(tmp_path, "train")
    assert sorted(g.path for g in cat.games()) == sorted(str((d / "game.tw-pddl").resolve()) for d in keep)
    assert [g.task_type for g in cat.games()] == ["pick", "pick2"]
    assert cat.skipped == {"movable or Sliced": 2, "no game file": 1, "no solvable flag": 1, "unsolvable": 1}
    assert sorted(g.path for g in cat.games()) == alfred_tw_env_selection(tmp_path / "json_2.1.1" / "train")
    assert split_counts(tmp_path) == {"train": (2, cat.skipped), "valid_seen": (1, dict.fromkeys(cat.skipped, 0))}

    _trial(tmp_path, "valid_unseen", "pick_x-AppleSliced-None-Desk-9", "trial_T9", "pick_and_place_simple", ok)
    with pytest.raises(EnvError, match=r"valid_unseen.*no playable game.*1 movable or Sliced"):
        AlfWorldCatalog(tmp_path, "valid_unseen")

    from typer.testing import CliRunner

    from twinrun.cli import app

    out = CliRunner().invoke(app, ["doctor"], env={"ALFWORLD_DATA": str(tmp_path), "COLUMNS": "200"}).output
    assert re.search(r"ALFWorld train\s*│\s*2 games\s*│\s*ok \(skipped: 2 movable or Sliced, 1 no game file, "
                     r"1 no solvable flag, 1 unsolvable\)", out), out
    assert re.search(r"ALFWorld valid_unseen\s*│\s*0 games\s*│\s*no playable game", out), out


def test_catalog_matches_alfred_tw_env_on_the_test_games(alfworld_data):
    for split in ("valid_seen", "valid_unseen", "valid_train"):
        ours = sorted(g.path for g in AlfWorldCatalog(alfworld_data, split).games())
        assert ours == alfred_tw_env_selection(alfworld_data / "json_2.1.1" / split)
