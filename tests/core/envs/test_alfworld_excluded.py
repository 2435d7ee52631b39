"""The games twinrun leaves out of a split (envs.alfworld.EXCLUDED_GAMES) still fail in alfworld itself: each
exclusion's reason is replayed here through raw textworld with alfworld's wrappers (as alfworld's AlfredTWEnv
plays a game) and through twinrun's engine. If an alfworld release fixes one, this test goes red: drop the game
from EXCLUDED_GAMES (new sweeps then play it again)."""

from __future__ import annotations

import traceback

import pytest

KEYCHAIN = "valid_seen/look_at_obj_in_light-KeyChain-None-DeskLamp-327/trial_T20190906_202601_548273"
# the shortest of the failing action lists found by playing the scripted executor's mix (expert or random
# admissible action) on this game: 'use desklamp 1' is admissible at drawer 7, the lamp (on dresser 1) is not in view
ACTIONS = ["go to drawer 7", "take keychain 4 from drawer 7"]


def _where(e: BaseException) -> tuple[str, str]:
    """(file, function) of the frame that called random.choice: whose empty sequence it was."""
    frames = traceback.extract_tb(e.__traceback__)
    caller = [f for f in frames if not f.filename.endswith("random.py")][-1]
    return caller.filename.replace("\\", "/").split("site-packages/")[-1], caller.line or ""


def test_every_excluded_game_names_a_reason():
    from twinrun.core.envs.alfworld import EXCLUDED_GAMES, excluded_games

    assert set(EXCLUDED_GAMES) == {KEYCHAIN}  # a new exclusion gets its own replay below
    assert all(len(why) > 40 for why in EXCLUDED_GAMES.values())
    assert excluded_games(["valid_seen/x/t", KEYCHAIN]) == {KEYCHAIN: EXCLUDED_GAMES[KEYCHAIN]}


@pytest.mark.slow  # three engine starts (raw textworld translates the game's PDDL at each)
@pytest.mark.alfworld
def test_alfworlds_handcoded_expert_crashes_on_the_keychain_game(alfworld_data):
    from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv
    from twinrun.core.envs.alfworld_engine import EngineCache, start_textworld
    from twinrun.core.errors import InfrastructureError

    game = next(g for g in AlfWorldCatalog(alfworld_data, "valid_seen").games() if g.game_id == KEYCHAIN)
    # raw textworld + AlfredDemangler/AlfredInfos/AlfredExpert(handcoded): alfworld's own engine, no twinrun code
    raw = start_textworld(game.path, "handcoded")
    try:
        raw.reset()
        raw.step(ACTIONS[0])
        with pytest.raises(IndexError, match="Cannot choose from an empty sequence") as err:
            raw.step(ACTIONS[1])
    finally:
        raw.close()
    where, line = _where(err.value)
    assert where == "alfworld/agents/expert/handcoded_expert.py" and "random.choice(objs_of_interest)" in line

    # twinrun's engine (cached assets) fails the same way, and says so as infrastructure (an unmeasured episode)
    cache = EngineCache()
    env = AlfWorldEnv(cache=cache)
    try:
        env.reset(game)
        env.step(ACTIONS[0])
        with pytest.raises(InfrastructureError, match="Cannot choose from an empty sequence") as err2:
            env.step(ACTIONS[1])
        assert _where(err2.value.__cause__)[0] == where
        # without the expert (what an LLM executor plays with) the same actions play: the game itself is sound
        plain = AlfWorldEnv(expert_type=None, cache=cache)
        plain.reset(game)
        step = [plain.step(a) for a in ACTIONS][-1]
        assert "You pick up the keychain 4" in step.observation.text
        assert "use desklamp 1" in step.observation.admissible_actions
        plain.close()
    finally:
        env.close()
        cache.close()
