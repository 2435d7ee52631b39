"""The null environment: a stand-in with negligible CPU for measuring the harness alone
(``environment.name: null_env``; bench/train_concurrency.py ``--env null``).

A game engine's CPU (ALFWorld's reset and steps) competes with the trainer for the machine's cores, so a bench on
a small machine mixes the harness's own losses with the machine's. This environment does no work: an episode is
a counter that ends after a number of turns drawn once per (game, seed) from a heavy-tailed distribution, the
shape of a real LLM executor's episodes (most end in a few turns, a few run to the cap):

    turns = clip(round(LogNormal(ln(TURNS_MEDIAN), TURNS_SIGMA)), TURNS_MIN, TURNS_MAX)
          = median 8, sigma 0.8, clipped to [2, 50]: mean ~10.7, p90 ~22, p99 ~50

Observations are one word (the curator's prompt, which holds the trajectory, stays short). Every action is
admissible and advances the counter; the episode is won at its end with probability WIN_SHARE
(drawn with the length), so rewards vary. The executor's own turn cap (``executor.max_turns``) still applies: set
it to at least TURNS_MAX for the lengths above to be the episodes' lengths.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from twinrun.core.envs.base import EnvError, GameRef, Observation, Step

TURNS_MEDIAN, TURNS_SIGMA, TURNS_MIN, TURNS_MAX = 8, 0.8, 2, 50
WIN_SHARE = 0.5
GAMES_PER_TYPE = 512
TASK_TYPES = ("null-a", "null-b")  # two types, so task groups alternate as they do in ALFWorld
ACTIONS = ("look", "wait", "inventory")


def episode_plan(game_id: str, seed: int | None) -> tuple[int, bool]:
    """(turns, won) of an episode of `game_id` with `seed`: a pure function of both (replays are identical)."""
    digest = hashlib.sha256(f"{game_id}|{seed}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    turns = round(float(rng.lognormal(math.log(TURNS_MEDIAN), TURNS_SIGMA)))
    return min(max(turns, TURNS_MIN), TURNS_MAX), bool(rng.random() < WIN_SHARE)


class NullCatalog:
    """GAMES_PER_TYPE games of each of TASK_TYPES, for any split name."""

    def __init__(self, split: str, task_types: list[str] | None = None):
        bad = [t for t in task_types or [] if t not in TASK_TYPES]
        if bad:
            raise EnvError(f"environment.task_types: {bad[0]!r} is not a null-environment type "
                           f"(fix: one of {', '.join(TASK_TYPES)}, or null)")
        self.split = split

    def task_types(self) -> list[str]:
        return list(TASK_TYPES)

    def games(self, task_type: str | None = None) -> list[GameRef]:
        types = TASK_TYPES if task_type is None else (task_type,)
        return [GameRef(env="null_env", game_id=f"{self.split}/{t}/{i:04d}", task_type=t, split=self.split)
                for t in types for i in range(GAMES_PER_TYPE)]


class NullEnv:
    """One episode at a time: a turn counter (see the module docstring)."""

    name = "null_env"

    def __init__(self) -> None:
        self._game: GameRef | None = None
        self._turns = 0
        self._won = False
        self._done = 0

    def reset(self, game: GameRef, seed: int | None = None) -> Observation:
        if game.env != "null_env":
            raise EnvError(f"null environment: game {game.game_id!r} is a {game.env} game (fix: environment.name)")
        self._game = game
        self._turns, self._won = episode_plan(game.game_id, seed)
        self._done = 0
        return self._observation()

    def _observation(self) -> Observation:
        # one word: the curator's prompt (which holds the trajectory) stays short, so generating its turn on a
        # CPU does not swamp what the bench measures
        return Observation(text="ok", task="wait", admissible_actions=ACTIONS)

    def step(self, action: str) -> Step:
        if self._game is None:
            raise EnvError("null environment: step before reset (fix: reset(game) first)")
        self._done += 1
        done = self._done >= self._turns
        won = done and self._won
        return Step(self._observation(), 1.0 if won else 0.0, done, won)

    def expert_plan(self) -> list[str]:
        return ["wait"] * max(0, self._turns - self._done)

    @property
    def game(self) -> GameRef | None:
        return self._game

    def close(self) -> None:
        self._game = None


__all__ = ["NullCatalog", "NullEnv", "TASK_TYPES", "TURNS_MAX", "TURNS_MEDIAN", "TURNS_MIN", "TURNS_SIGMA",
           "episode_plan"]
