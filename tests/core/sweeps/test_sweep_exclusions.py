"""A game alfworld cannot play (envs.alfworld.EXCLUDED_GAMES) is left out of a new sweep's split, named with its
reason in sweep.json and the compare report; a sweep folder planned before keeps its game list and games_hash (the
committed controls' rows stay analysable and their sweep resumable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.compare.exclusions import excluded_game_notes
from twinrun.core.envs.alfworld import EXCLUDED_GAMES, AlfWorldCatalog
from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw

KEYCHAIN = "valid_seen/look_at_obj_in_light-KeyChain-None-DeskLamp-327/trial_T20190906_202601_548273"


def _pool(alfworld_data: Path, spec):
    """The games a sweep of `spec` draws from (sweep.sweep's pool: the eval split, the spec's task types)."""
    types = spec.environment.task_types
    return [g for g in AlfWorldCatalog(alfworld_data, "valid_seen").games() if not types or g.task_type in types]


@pytest.fixture(scope="module")
def learn(repo_root):
    return load_spec(repo_root / "experiments" / "learn-cpu.yaml")  # the controls' arm (pick and look games)


@pytest.mark.alfworld
def test_the_controls_sweep_keeps_its_game_list_and_hash(alfworld_data, learn, controls_sweep):
    import dataclasses

    raw = json.loads((controls_sweep / "sweep.json").read_text())
    fields = {f.name for f in dataclasses.fields(sw.SweepPlan)}  # the committed copy also lists later runs (`added`)
    plan = sw.SweepPlan.from_dict({k: v for k, v in raw.items() if k in fields})
    assert plan.excluded_games is None  # planned before exclusions existed
    pool = _pool(alfworld_data, learn)
    left = sw.split_exclusions("alfworld", pool, plan)
    assert left == {}
    games = sw.select_games([g for g in pool if g.game_id not in left], len(plan.games), plan.seed)
    assert [g.game_id for g in games] == plan.game_ids and sw.games_hash(plan.game_ids) == plan.games_hash
    assert KEYCHAIN in plan.game_ids  # so its report says why that game's episodes are unmeasured
    assert sw._kept_broken("alfworld", plan) == {KEYCHAIN: EXCLUDED_GAMES[KEYCHAIN]}  # what `twinrun sweep` prints
    notes = excluded_game_notes(raw)
    assert notes == [(f"Sweep `{plan.sweep_id}` plays `{KEYCHAIN}`, a game twinrun now leaves out of new sweeps "
                      f"({EXCLUDED_GAMES[KEYCHAIN]}); the episodes it kills are unmeasured, not failures.")]


@pytest.mark.alfworld
def test_a_new_sweep_leaves_the_game_out_and_says_why(alfworld_data, learn, tmp_path):
    spec = learn
    pool = _pool(alfworld_data, spec)
    left = sw.split_exclusions("alfworld", pool, None)
    assert left == {KEYCHAIN: EXCLUDED_GAMES[KEYCHAIN]}
    games = sw.select_games([g for g in pool if g.game_id not in left], spec.environment.eval_games, spec.seed)
    ids = [g.game_id for g in games]
    assert KEYCHAIN not in ids and len(ids) == spec.environment.eval_games
    plan = sw.plan_sweep(spec, {}, tmp_path / "out", games=games, split="valid_seen", executor_settings_hash="x",
                         excluded_games=left)
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert manifest["excluded_games"] == left and manifest["games_hash"] == plan.games_hash
    assert excluded_game_notes(manifest) == [
        (f"Left out of split `valid_seen` by sweep `{plan.sweep_id}` before its game list was drawn: `{KEYCHAIN}` "
         f"({EXCLUDED_GAMES[KEYCHAIN]}).")]
    # resumed, the folder keeps what it left out (a later table change does not move its game list)
    assert sw.split_exclusions("alfworld", pool, sw.load_plan(tmp_path / "out")) == left


def test_other_environments_leave_nothing_out():
    assert sw.split_exclusions("sciworld", [], None) == {}


@pytest.mark.alfworld
def test_sweep_writes_the_exclusion_into_its_manifest(alfworld_data, learn, tmp_path):
    """Through sweep() itself (planned, no arm played): the game is left out, sweep.json and the result name it."""
    res = sw.sweep(learn, {}, tmp_path / "out", data_root=alfworld_data, workers=0, progress=False, arms=[],
                   policy_factory=sw.no_ops_policy_factory)
    manifest = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert res.excluded_games == manifest["excluded_games"] == {KEYCHAIN: EXCLUDED_GAMES[KEYCHAIN]}
    assert KEYCHAIN not in [g["game_id"] for g in manifest["games"]] and res.kept_broken == {}
    assert res.summary()["excluded_games"] == res.excluded_games


def test_the_compare_report_notes_name_the_game(controls_sweep):
    from twinrun.core.compare.report import sweep_notes

    notes = sweep_notes([controls_sweep])
    assert any(KEYCHAIN in n and "unmeasured, not failures" in n for n in notes)
