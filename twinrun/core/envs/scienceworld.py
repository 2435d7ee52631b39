"""ScienceWorld through the real `scienceworld` package (a Scala simulator in a JVM, driven over py4j).

A game is (task name, variation index) from one split (train / dev / test). The score is 0..100 and can be
negative (a failed task); an episode is won at 100. The expert is the simulator's gold action sequence
(``generateGoldPath=True``), which is a plan from the *start*: once an agent leaves it, :meth:`expert_plan`
returns the rest of the gold path as a best effort (there is no re-planning expert in ScienceWorld). The gold
path is drawn inside the simulator and can differ between loads of the same variation (e.g. which non-living
thing to find); it cannot be seeded from Python, so scripted ScienceWorld episodes replay the same outcome, not
always the same actions.

Each env owns one JVM (1.2 s to start). The heap is bounded (default 512 MiB; unbounded it takes 1-3 GB) by
setting ``JAVA_TOOL_OPTIONS`` for the child JVM only while it is launched (the package's constructor offers no
JVM options). An env is reused across episodes: ``load`` swaps the task inside the running JVM.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from twinrun.core.envs.base import EnvError, GameRef, Observation, Step
from twinrun.core.errors import DependencyMissing, InfrastructureError

SCIWORLD_SPLITS = ("train", "dev", "test")
_LAUNCH_LOCK = threading.Lock()


def _scienceworld() -> Any:
    try:
        import scienceworld
    except ImportError:
        raise DependencyMissing("sciworld: scienceworld is not installed (fix: pip install 'twinrun[sciworld]')") from None
    return scienceworld


def sciworld_task_names() -> list[str]:
    """The 30 task names, read from the package's tasks.json (no JVM needed)."""
    pkg = _scienceworld()
    data = json.loads((Path(pkg.__file__).parent / "tasks.json").read_text(encoding="utf-8"))
    return [t["task_name"] for t in data]


def launch_sciworld(heap: str = "512m", step_limit: int = 100) -> Any:
    """Start a `scienceworld.ScienceWorldEnv` whose JVM heap is capped at `heap` (e.g. "512m")."""
    pkg = _scienceworld()
    with _LAUNCH_LOCK:  # the variable is visible to this process only while the JVM is spawned
        old = os.environ.get("JAVA_TOOL_OPTIONS")
        os.environ["JAVA_TOOL_OPTIONS"] = f"{old + ' ' if old else ''}-Xmx{heap}"
        try:
            return pkg.ScienceWorldEnv("", envStepLimit=step_limit)
        except Exception as e:  # noqa: BLE001 - no Java, port trouble: infrastructure
            raise InfrastructureError(f"sciworld: the JVM did not start ({type(e).__name__}: {e}; needs Java 17)") from e
        finally:
            if old is None:
                os.environ.pop("JAVA_TOOL_OPTIONS", None)
            else:
                os.environ["JAVA_TOOL_OPTIONS"] = old


class ScienceWorldCatalog:
    """Games (task, variation) of one split. Variation lists need the simulator: a JVM is started on first use
    and closed by :meth:`close`; lists are cached per task."""

    def __init__(self, split: str, *, tasks: list[str] | None = None, heap: str = "512m"):
        if split not in SCIWORLD_SPLITS:
            raise EnvError(f"environment.split: {split!r} is not a ScienceWorld split (fix: one of {', '.join(SCIWORLD_SPLITS)})")
        names = sciworld_task_names()
        for t in tasks or []:
            if t not in names:
                raise EnvError(f"environment.task_types: {t!r} is not a ScienceWorld task (fix: one of {', '.join(names)})")
        self.split = split
        self._tasks = list(tasks) if tasks else names
        self._heap = heap
        self._env: Any = None
        self._cache: dict[str, list[GameRef]] = {}

    def task_types(self) -> list[str]:
        return list(self._tasks)

    def games(self, task_type: str | None = None) -> list[GameRef]:
        if task_type is None:
            return [g for t in self._tasks for g in self.games(t)]
        if task_type not in self._tasks:
            raise EnvError(f"task type: {task_type!r} is not in this catalogue (fix: one of {', '.join(self._tasks)})")
        if task_type not in self._cache:
            if self._env is None:
                self._env = launch_sciworld(self._heap)
            self._env.load(task_type, 0, "")
            variations = getattr(self._env, f"get_variations_{self.split}")()
            self._cache[task_type] = [
                GameRef(env="sciworld", game_id=f"{task_type}/{v}", task_type=task_type, split=self.split,
                        task_name=task_type, variation=int(v))
                for v in variations
            ]
        return list(self._cache[task_type])

    def close(self) -> None:
        if self._env is not None:
            _close_quietly(self._env)
            self._env = None


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001
        pass


class SciWorldEnv:
    """One ScienceWorld episode at a time, in a JVM started on first reset and reused afterwards.

    gold_path: ask the simulator for the gold action sequence at load (the expert; costs load time)."""

    name = "sciworld"

    def __init__(self, *, heap: str = "512m", step_limit: int = 100, gold_path: bool = True, simplification: str = ""):
        self.heap = heap
        self.step_limit = step_limit
        self.gold_path = gold_path
        self.simplification = simplification
        self._env: Any = None
        self._game: GameRef | None = None
        self._task = ""
        self._gold: list[str] = []
        self._taken: list[str] = []

    @property
    def game(self) -> GameRef | None:
        return self._game

    def reset(self, game: GameRef, seed: int | None = None) -> Observation:
        # the simulator is deterministic given (task, variation); `seed` is accepted for the protocol
        if game.env != "sciworld" or game.task_name is None or game.variation is None:
            raise EnvError(f"game: {game.game_id!r} is not a ScienceWorld game (fix: list games with ScienceWorldCatalog)")
        if self._env is None:
            self._env = launch_sciworld(self.heap, self.step_limit)
        try:
            self._env.load(game.task_name, game.variation, self.simplification, generateGoldPath=self.gold_path)
            obs, info = self._env.reset()
            self._gold = list(self._env.get_gold_action_sequence()) if self.gold_path else []
        except ValueError as e:  # the package's own validation of task / simplification names
            raise EnvError(f"game: {game.game_id!r} cannot be loaded ({e})") from None
        except Exception as e:  # noqa: BLE001 - JVM / gateway failure
            self._restart()
            raise InfrastructureError(f"sciworld reset failed on {game.game_id}: {type(e).__name__}: {e}") from e
        self._game = game
        self._taken = []
        self._task = str(info.get("taskDesc", "")).replace("Task Description:", "", 1).strip()
        return Observation(text=str(obs).strip(), task=self._task, admissible_actions=tuple(info.get("valid") or ()))

    def step(self, action: str) -> Step:
        if self._env is None or self._game is None:
            raise EnvError("sciworld step: no episode is running (fix: call reset(game) first)")
        try:
            obs, _reward, done, info = self._env.step(action)
        except Exception as e:  # noqa: BLE001
            self._restart()
            raise InfrastructureError(f"sciworld step failed on {self._game.game_id}: {type(e).__name__}: {e}") from e
        self._taken.append(action)
        score = float(info.get("score", 0))
        won = score >= 100
        observation = Observation(text=str(obs).strip(), task=self._task, admissible_actions=tuple(info.get("valid") or ()))
        return Step(observation, score, bool(done) or won, won)

    def expert_plan(self) -> list[str]:
        """Rest of the gold path after the actions taken so far (exact while the agent has followed it)."""
        return self._gold[len(self._taken):]

    def _restart(self) -> None:
        if self._env is not None:
            _close_quietly(self._env)
        self._env = None
        self._game = None

    def close(self) -> None:
        """End the episode; the JVM stays up for the next reset (use :meth:`shutdown` to stop it)."""
        self._game = None

    def shutdown(self) -> None:
        self._restart()
