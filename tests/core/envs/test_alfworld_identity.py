"""The cached ALFWorld engine plays the same games as raw textworld, and no state crosses from one episode to
the next.

`tests/data/alfworld_raw_traces.json` holds raw textworld's traces of all 474 test games (expert plan played to the
end, then a seeded random-action episode; every observation, admissible-command list, score, done/won flag and
expert plan hashed), recorded by `python -m twinrun.testing.alfworld_traces record`. The slow test replays every
game through the cached engine and fails on any difference; the fast ones diff raw and cached live, state by
state, on a sample of games, and check that the caches are really used.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from twinrun.core.envs import EnvPool
from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv
from twinrun.core.envs.alfworld_engine import EngineCache, TextWorldAssets, start_textworld
from twinrun.testing import alfworld_traces as traces

pytestmark = pytest.mark.alfworld

TRACES = Path(__file__).resolve().parents[2] / "data" / "alfworld_raw_traces.json"
# one game per split, three task types, short expert plans (raw textworld steps cost ~0.1-0.3 s)
SAMPLE = [
    "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "valid_unseen/pick_cool_then_place_in_recep-Tomato-None-Microwave-10/trial_T20190909_102710_795182",
    "valid_train/pick_heat_then_place_in_recep-Tomato-None-Fridge-14/trial_T20190908_091828_220110",
]


@pytest.fixture(scope="module")
def games(alfworld_data):
    return dict(traces.all_games(alfworld_data))


def full_trace(engine, game_id: str) -> list:
    records: list = []
    traces.game_trace(engine, game_id, records)
    return records


def cached_cache() -> EngineCache:
    return EngineCache(max_idle=2, assets=TextWorldAssets(max_games=4))


def test_cached_engine_matches_raw_textworld_state_by_state(games):
    """Live diff on a sample: every feedback text, admissible list, score, done/won flag and expert plan."""
    cache = cached_cache()
    for gid in SAMPLE:
        raw = full_trace(start_textworld(games[gid], "handcoded"), gid)
        engine = cache.checkout(games[gid], "handcoded")
        with cache.scope("handcoded"):
            cached = full_trace(engine, gid)
        cache.checkin(games[gid], "handcoded", engine)
        assert len(cached) == len(raw) > 10
        for i, (r, c) in enumerate(zip(raw, cached)):
            assert c == r, f"{gid}: state {i} differs"
        assert [rec for ep, _, rec in raw if ep == "expert"][-1]["won"]  # the expert won: a real game was played
    # the sample really went through the caches: each game translated once (plain translation only, no planner),
    # its two resets and the engine's reuse for the next game hit the cache
    stats = cache.assets.stats
    assert stats["translations"] == len(SAMPLE) and stats["translation_hits"] >= 3 * len(SAMPLE)
    assert stats["logic_parses"] == len(SAMPLE) and stats["replan_skipped"] > 0
    assert cache.starts == 1 and cache.loads == len(SAMPLE) - 1


def test_planner_expert_gets_the_replanning_translation(games):
    """Only the planner expert replans (fast-downward search on the optimised translation): its engines get that
    translation, and its plans equal raw textworld's."""
    gid = SAMPLE[0]

    def episode(engine) -> list:
        return [rec for _, rec in traces.play_episode(engine, 1, traces.expert_action, 10)]

    raw = episode(start_textworld(games[gid], "planner"))
    cache = cached_cache()
    engine = cache.checkout(games[gid], "planner")
    with cache.scope("planner"):
        cached = episode(engine)
    assert cached == raw and raw[0]["plan"][:2] == ["go to desk 1", "use desklamp 1"] and raw[-1]["won"]
    assert cache.assets.stats["translations"] == 2 and cache.assets.stats["replan_skipped"] == 0


def test_no_state_crosses_episodes_or_games(games):
    """Play a game to a changed state, reset, replay: the same trace. Then play other games on the same engine
    and come back: still the same (engines are reused across games, assets across episodes)."""
    gid, other = SAMPLE[0], SAMPLE[1]
    cache = cached_cache()
    engine = cache.checkout(games[gid], "handcoded")
    with cache.scope("handcoded"):
        first = full_trace(engine, gid)
        second = full_trace(engine, gid)
    cache.checkin(games[gid], "handcoded", engine)
    assert first == second
    engine_b = cache.checkout(games[other], "handcoded")
    assert engine_b is engine  # the idle engine was reloaded with the other game
    with cache.scope("handcoded"):
        reused = full_trace(engine_b, other)
    cache.checkin(games[other], "handcoded", engine_b)
    fresh_cache = EngineCache(assets=cache.assets)
    with fresh_cache.scope("handcoded"):
        assert reused == full_trace(fresh_cache.checkout(games[other], "handcoded"), other)
    engine_c = cache.checkout(games[gid], "handcoded")
    with cache.scope("handcoded"):
        assert full_trace(engine_c, gid) == first
    cache.checkin(games[gid], "handcoded", engine_c)


def test_cached_parses_and_context_copies_are_fresh_objects(games):
    """Every caller gets its own parse tree, and copy_context builds what textgen's deepcopy-based one builds:
    equal values, new objects (aliasing kept within a dict), state and facts shared."""
    from textworld.envs.pddl import textgen

    from twinrun.core.envs.alfworld_engine import _textworld_originals, copy_context

    assets = TextWorldAssets()
    one, two = (assets.parse_symbols("You see [{o.name | in(o:object, r:receptacle)}].", rule_name="symbols")
                for _ in range(2))
    assert repr(one) == repr(two) and one is not two and all(a is not b for a, b in zip(one, two))
    assert one[1].symbol is not two[1].symbol and one[1].symbol.expression is not two[1].symbol.expression

    engine = start_textworld(games[SAMPLE[0]], None)
    state = engine.reset()
    infos = engine.unwrapped._entity_infos
    action = state["_valid_actions"][0]
    info = next(iter(infos.values()))
    context = {"state": object(), "facts": [], "entity_infos": infos, "mapping": action.mapping,
               "variables": {**{ph.name: infos[v.name] for ph, v in action.mapping.items()}, "x": info, "y": info}}
    ours, theirs = copy_context(context), textgen.copy_context(context)
    assert textgen.copy_context is not copy_context and _textworld_originals()
    assert ours == theirs
    for part in ("state", "facts", "entity_infos"):
        assert ours[part] is context[part]
    for part in ("variables", "mapping"):
        assert ours[part] is not context[part]
        for (k, v), (k0, v0) in zip(ours[part].items(), context[part].items()):
            assert v is not v0 and (isinstance(k, str) or k is not k0)
    assert ours["variables"]["x"] is ours["variables"]["y"]  # deepcopy's memo: one copy per original


def test_two_envs_on_one_game_share_assets_not_state(games, alfworld_data):
    """The N rollouts of a task group play one game side by side on the shared per-game assets."""
    cat = AlfWorldCatalog(alfworld_data, "valid_seen")
    g = next(x for x in cat.games() if x.game_id == SAMPLE[0])
    cache = EngineCache(assets=TextWorldAssets())
    a, b = AlfWorldEnv(cache=cache), AlfWorldEnv(cache=cache)
    alone_env = AlfWorldEnv(cache=EngineCache(assets=None))  # raw textworld behind the same wrapper
    alone = [alone_env.reset(g, seed=1)]
    for _ in range(30):
        step = alone_env.step(alone_env.expert_plan()[0])
        alone.append(step.observation)
        if step.done:
            break
    assert step.won
    a_obs, b_obs = [a.reset(g, seed=1)], [b.reset(g, seed=1)]
    rng = random.Random(0)
    for _ in range(len(alone) - 1):
        b_obs.append(b.step(rng.choice(b_obs[-1].admissible_actions)).observation)  # b wanders
        a_obs.append(a.step(a.expert_plan()[0]).observation)
    assert a_obs == alone
    assert cache.starts == 2 and cache.assets.stats["translations"] == 1


def test_textworld_is_restored_after_each_engine_call(alfworld_data):
    """The caches are installed only around engine calls: raw textworld code runs everywhere else."""
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen

    before = (pddl_logic.fast_downward, pddl_logic.GameLogic, textgen._parse_and_convert, textgen.Rule,
              textgen.copy_context)
    env = AlfWorldEnv()
    env.reset(AlfWorldCatalog(alfworld_data, "valid_seen").games("look")[0])
    env.step("look")
    env.close()
    after = (pddl_logic.fast_downward, pddl_logic.GameLogic, textgen._parse_and_convert, textgen.Rule,
             textgen.copy_context)
    assert after == before


def test_patched_engine_calls_exclude_other_threads():
    """Two threads swapping textworld's functions would leave one thread's caches installed for good."""
    import threading

    from twinrun.core.envs.alfworld_engine import _PATCH_LOCK

    def other_thread_can_enter() -> bool:
        got = []

        def try_enter() -> None:
            got.append(_PATCH_LOCK.acquire(blocking=False))
            if got[0]:
                _PATCH_LOCK.release()

        t = threading.Thread(target=try_enter)
        t.start()
        t.join()
        return got[0]

    assets = TextWorldAssets()
    assert other_thread_can_enter()
    with assets.patched(replan=False):
        assert not other_thread_can_enter()
        with TextWorldAssets().patched(replan=True):  # nested in one thread: fine
            pass
    assert other_thread_can_enter()


def test_pool_workers_cache_and_raw_is_one_option(alfworld_data):
    g = AlfWorldCatalog(alfworld_data, "valid_seen").games("look")[0]
    for games_cached, expect in ((256, True), (0, False)):
        with EnvPool("alfworld", workers=0, options={"expert_type": None, "cache_games": games_cached}) as pool:
            with pool.lease() as env:
                env.reset(g)
                env.step("look")
            assets = pool.stats()[0]["assets"]
        assert bool(assets.get("translations")) is expect


@pytest.mark.long  # every one of the 474 games through the real engine: make test-all
@pytest.mark.slow
def test_all_474_games_match_the_recorded_raw_traces(alfworld_data, capsys):
    """Section 2 of issue #16: every test game, expert plan and seeded random episode, cached engine vs raw."""
    assert TRACES.exists(), f"no recording at {TRACES} (fix: python -m twinrun.testing.alfworld_traces record)"
    recorded = traces.load_traces(TRACES)
    everything = traces.all_games(alfworld_data)
    assert len(everything) == 474 == len(recorded["games"])
    live = traces.play_all(everything, cached=True, workers=2, label="cached ALFWorld engine",
                           log=lambda line: print(line, flush=True))
    problems = traces.compare(recorded, live)
    assert not problems, "\n".join(problems[:20])
    assert sum(t["expert"]["won"] for t in live.values()) > 400  # the expert really played the games


def test_trace_comparison_names_the_first_differing_step(games, tmp_path):
    """compare() is what makes the slow test fail: a changed state is reported with its game, episode and step."""
    gid = SAMPLE[0]
    live = dict(traces.play_all([(gid, games[gid])], cached=True, workers=0, label="one game", log=lambda _: None))
    path = tmp_path / "t.json"
    traces.write_traces(path, live)
    recorded = traces.load_traces(path)
    assert traces.compare(recorded, live) == []
    live[gid]["random"]["hashes"][3] = "0" * 12
    (line,) = traces.compare(recorded, live)
    assert gid in line and "random episode differs at step 3" in line
    recorded["versions"]["textworld"] = "0.0"
    assert any("re-record" in p for p in traces.compare(recorded, live))
    del live[gid]
    assert "recorded but not played" in traces.compare(recorded, live)[-1]


def test_cut_off_record_resumes_from_its_partial_file(games, tmp_path):
    """A cut-off `record` keeps its finished games: they are not played again unless the engine or the game
    files changed; the line being written when it was cut off is skipped."""
    gid = SAMPLE[0]
    kept = {"files": traces.files_hash(games[gid]), "expert": {"hashes": ["a"], "won": True},
            "random": {"hashes": ["b"], "won": False}}
    out = tmp_path / "t.json"
    partial = tmp_path / "t.json.partial"
    partial.write_text("\n".join([json.dumps(traces.engine_versions()), json.dumps([[gid, kept]]), '[["x", {"fi']))
    assert traces.record([(gid, games[gid])], out, workers=0) == {gid: kept}  # nothing left to play
    assert traces.load_traces(out)["games"][gid]["expert"]["hashes"] == ["a"] and not partial.exists()
    stale = {**kept, "files": "0" * 16}
    partial.write_text("\n".join([json.dumps(traces.engine_versions()), json.dumps([[gid, stale]])]))
    assert traces.resume_record([(gid, games[gid])], partial) == {}
    partial.write_text("\n".join([json.dumps({"textworld": "0.0"}), json.dumps([[gid, kept]])]))
    assert traces.resume_record([(gid, games[gid])], partial) == {}
