"""ALFWorld through the real `alfworld` + `textworld` packages (text-only TextWorld-PDDL games).

Games live under a data root in ALFWorld's layout: ``json_2.1.1/<split>/<task_dir>/<trial>/game.tw-pddl`` with
``traj_data.json`` beside it (its ``task_type`` gives the group type). The data root is always passed in
explicitly; :func:`resolve_alfworld_data` maps the conventional ``ALFWORLD_DATA`` variable for callers (CLI,
tests) that want it.

Each game is played with ``textworld.start(game, wrappers=[AlfredDemangler(shuffle=False), AlfredInfos,
AlfredExpert(expert_type=...)])``. ``expert_type`` is passed by keyword: alfworld 0.4.2's own ``AlfredTWEnv`` passes
it positionally and silently ignores it. Raw textworld re-translates the game's PDDL on every reset and re-parses
its grammar on every step; :mod:`.alfworld_engine` caches both per game and reuses started engines, with the same
observations, admissible commands, scores and expert plans (``tests/core/envs/test_alfworld_identity.py`` checks all
474 test games against recorded raw traces). textworld is not thread-safe: use one env per thread, parallelise with
processes (:mod:`.pool`).

The game selection follows alfworld's ``AlfredTWEnv.collect_game_files``: trials under a ``movable`` or ``Sliced``
task folder, without ``game.tw-pddl``, or whose game file is not marked ``solvable`` are skipped
(:func:`alfworld_game_files`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twinrun.core.envs.alfworld_engine import EngineCache, close_quietly, shared_assets
from twinrun.core.envs.base import EnvError, GameRef, Observation, Step
from twinrun.core.errors import InfrastructureError

# ALFRED task_type -> the spec's short type (ALFWORLD_TASK_TYPES in spec.py)
ALFWORLD_TYPE_MAP = {
    "pick_and_place_simple": "pick",
    "look_at_obj_in_light": "look",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "pick2",
}
SHORT_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")
_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
_TASK_MARK = "Your task is to: "


def resolve_alfworld_data(explicit: str | Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The ALFWorld data root: `explicit` if given, else ``environ['ALFWORLD_DATA']`` when the caller passes its
    environment (core never reads os.environ itself)."""
    raw = str(explicit) if explicit else (environ or {}).get("ALFWORLD_DATA")
    if not raw:
        raise EnvError("alfworld data: not set (fix: pass the data folder or set ALFWORLD_DATA to it)")
    root = Path(raw).expanduser()
    if not (root / "json_2.1.1").is_dir():
        raise EnvError(
            f"alfworld data: {str(root)!r} has no json_2.1.1/ folder (fix: point ALFWORLD_DATA at the folder "
            "that holds json_2.1.1, e.g. the output of alfworld-download)"
        )
    return root


# AlfredTWEnv.collect_game_files skips these, in this order (its counts on a full alfworld-download: train 3,553,
# valid_seen 140, valid_unseen 134)
SKIP_REASONS = ("movable or Sliced", "no game file", "no solvable flag", "unsolvable")


# Games that alfworld itself cannot play through (issue 53): game id -> why. A sweep planned since leaves them out of
# the split before its game list is drawn and names them in sweep.json (`excluded_games`) and in the compare report;
# a sweep folder planned before keeps its list (and its games_hash), so its rows stay comparable and resumable.
# Found by replaying the failing episodes' actions through alfworld's own AlfredTWEnv (docs/install.md#games-twinrun-
# leaves-out; tests/core/envs/test_alfworld_excluded.py replays them).
EXCLUDED_GAMES: dict[str, str] = {
    "valid_seen/look_at_obj_in_light-KeyChain-None-DeskLamp-327/trial_T20190906_202601_548273": (
        "alfworld's handcoded expert crashes on it (IndexError, alfworld/agents/expert/handcoded_expert.py:318: "
        "random.choice of no visible desklamp): 'use desklamp 1' is admissible at drawer 7, where the lamp is not in "
        "view, so taking a keychain there, or reaching drawer 7 with one, kills the episode"
    ),
}


def excluded_games(game_ids: list[str]) -> dict[str, str]:
    """{game id: why} for the games among `game_ids` that twinrun leaves out of a split (:data:`EXCLUDED_GAMES`)."""
    return {g: EXCLUDED_GAMES[g] for g in game_ids if g in EXCLUDED_GAMES}


def alfworld_game_files(split_dir: Path) -> tuple[list[Path], dict[str, int]]:
    """The trials of one split that alfworld's ``AlfredTWEnv`` plays, and how many it skips per reason.

    A trial is a folder ``<task_dir>/<trial>/`` holding ``traj_data.json``. Skipped, as AlfredTWEnv skips them:
    trials whose path (below the split folder) contains ``movable`` or ``Sliced``, trials without
    ``game.tw-pddl``, and games whose file lacks the ``solvable`` key or has it false. (AlfredTWEnv tests its
    whole path, data root included; twinrun tests only the part below the split, so a data folder named e.g.
    ``Sliced-data`` does not empty every split.)"""
    selected: list[Path] = []
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    for traj in sorted(split_dir.glob("*/*/traj_data.json")):
        trial = traj.parent
        rel = str(trial.relative_to(split_dir))
        game_file = trial / "game.tw-pddl"
        if "movable" in rel or "Sliced" in rel:
            skipped["movable or Sliced"] += 1
        elif not game_file.is_file():
            skipped["no game file"] += 1
        else:
            flag = _read_solvable(game_file)
            if flag is None:
                skipped["no solvable flag"] += 1
            elif not flag:
                skipped["unsolvable"] += 1
            else:
                selected.append(game_file)
    return selected, skipped


def _read_solvable(game_file: Path) -> bool | None:
    try:
        data = json.loads(game_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise EnvError(f"alfworld game: {str(game_file)!r} is not readable JSON ({e}; fix: restore it from "
                       "alfworld-download)") from None
    return bool(data["solvable"]) if isinstance(data, dict) and "solvable" in data else None


class AlfWorldCatalog:
    """The games of one split that alfworld's AlfredTWEnv would play (:func:`alfworld_game_files`), grouped by
    short task type. Pure file listing (no engine). `skipped`: trials left out, per reason."""

    def __init__(self, data_root: str | Path, split: str):
        self.root = resolve_alfworld_data(data_root)
        self.split = split
        split_dir = self.root / "json_2.1.1" / split
        if not split_dir.is_dir():
            have = sorted(p.name for p in (self.root / "json_2.1.1").iterdir() if p.is_dir())
            raise EnvError(f"environment.split: {split!r} is not under {self.root}/json_2.1.1 (fix: one of {have})")
        files, self.skipped = alfworld_game_files(split_dir)
        games: list[GameRef] = []
        for game_file in files:
            trial = game_file.parent
            task_type = _read_task_type(trial)
            games.append(
                GameRef(
                    env="alfworld",
                    game_id=f"{split}/{trial.parent.name}/{trial.name}",
                    task_type=task_type,
                    split=split,
                    path=str(game_file.resolve()),
                )
            )
        if not games:
            raise EnvError(f"environment.split: {split!r} has no playable game under {split_dir} (skipped: "
                           f"{skipped_text(self.skipped)}; fix: check the data)")
        self._games = games

    def task_types(self) -> list[str]:
        present = {g.task_type for g in self._games}
        return [t for t in SHORT_TYPES if t in present]

    def games(self, task_type: str | None = None) -> list[GameRef]:
        if task_type is None:
            return list(self._games)
        if task_type not in SHORT_TYPES:
            raise EnvError(f"task type: {task_type!r} is not an ALFWorld task type (fix: one of {', '.join(SHORT_TYPES)})")
        return [g for g in self._games if g.task_type == task_type]


def skipped_text(skipped: Mapping[str, int]) -> str:
    """'3 movable or Sliced, 1 unsolvable' (or 'none')."""
    return ", ".join(f"{n} {why}" for why, n in skipped.items() if n) or "none"


def split_counts(data_root: str | Path) -> dict[str, tuple[int, dict[str, int]]]:
    """Per split under ``json_2.1.1/``: games selected and skipped per reason (what ``twinrun doctor`` prints)."""
    root = resolve_alfworld_data(data_root)
    out = {}
    for split_dir in sorted(p for p in (root / "json_2.1.1").iterdir() if p.is_dir()):
        files, skipped = alfworld_game_files(split_dir)
        out[split_dir.name] = (len(files), skipped)
    return out


def _read_task_type(trial: Path) -> str:
    traj = trial / "traj_data.json"
    try:
        raw = json.loads(traj.read_text(encoding="utf-8"))["task_type"]
    except (OSError, KeyError, json.JSONDecodeError) as e:
        raise EnvError(f"alfworld game: {str(traj)!r} has no readable task_type ({e}; fix: restore traj_data.json)") from None
    try:
        return ALFWORLD_TYPE_MAP[raw]
    except KeyError:
        raise EnvError(f"alfworld game: {str(traj)!r} task_type {raw!r} is unknown (fix: one of {list(ALFWORLD_TYPE_MAP)})") from None


class AlfWorldEnv:
    """One ALFWorld episode at a time. `expert_type`: "handcoded" (default), "planner", or None (no expert: faster
    steps, `expert_plan()` returns []). `cache`: started engines (default: a new one on the process's shared
    per-game assets; ``EngineCache(assets=None)`` plays raw textworld)."""

    name = "alfworld"

    def __init__(self, *, expert_type: str | None = "handcoded", cache: EngineCache | None = None):
        if expert_type not in (None, "handcoded", "planner"):
            raise EnvError(f"alfworld expert_type: {expert_type!r} is unknown (fix: handcoded, planner or None)")
        self.expert_type = expert_type
        self.cache = cache if cache is not None else EngineCache(assets=shared_assets())
        self._env: Any = None
        self._game: GameRef | None = None
        self._task = ""
        self._plan: list[str] = []
        self._rng_state: Any = None

    @property
    def game(self) -> GameRef | None:
        return self._game

    @contextlib.contextmanager
    def _engine_call(self) -> Any:
        """alfworld's handcoded expert draws from the *global* `random` module; several envs interleaved in one
        worker would then perturb each other. Each env keeps its own stream and swaps it in around engine calls."""
        saved = random.getstate()
        random.setstate(self._rng_state)
        try:
            with self.cache.scope(self.expert_type):
                yield
        finally:
            self._rng_state = random.getstate()
            random.setstate(saved)

    def reset(self, game: GameRef, seed: int | None = None) -> Observation:
        if game.env != "alfworld" or not game.path:
            raise EnvError(f"game: {game.game_id!r} is not an ALFWorld game (fix: list games with AlfWorldCatalog)")
        if not Path(game.path).is_file():
            raise EnvError(f"game: {game.path!r} does not exist (fix: check the ALFWorld data folder)")
        self._release()
        if seed is None:
            seed = int.from_bytes(hashlib.sha256(game.game_id.encode()).digest()[:8], "big")
        self._rng_state = random.Random(seed).getstate()
        try:
            self._env = self.cache.checkout(game.path, self.expert_type)
            self._game = game
            with self._engine_call():
                state = self._env.reset()
        except Exception as e:  # noqa: BLE001 - an engine crash is infrastructure, not a task failure
            self._env, self._game = None, None
            raise InfrastructureError(f"alfworld reset failed on {game.game_id}: {type(e).__name__}: {e}") from e
        text = state["feedback"].split(_BANNER, 1)[-1].strip()
        self._task = text.split(_TASK_MARK, 1)[1].strip() if _TASK_MARK in text else ""
        return self._observe(state, text)

    def step(self, action: str) -> Step:
        if self._env is None:
            raise EnvError("alfworld step: no episode is running (fix: call reset(game) first)")
        try:
            with self._engine_call():
                state, _reward, done = self._env.step(action)
        except Exception as e:  # noqa: BLE001 - a crashed engine is not reused
            close_quietly(self._env)
            self._env = None
            raise InfrastructureError(f"alfworld step failed on {self._game.game_id if self._game else '?'}: {e}") from e
        won = bool(state["won"])
        return Step(self._observe(state, state["feedback"].strip()), 1.0 if won else 0.0, bool(done) or won, won)

    def expert_plan(self) -> list[str]:
        return list(self._plan)

    def _observe(self, state: Any, text: str) -> Observation:
        self._plan = list(state.get("extra.expert_plan") or []) if self.expert_type else []
        admissible = tuple(a for a in (state.get("admissible_commands") or []) if a != "help")
        return Observation(text=text, task=self._task, admissible_actions=admissible)

    def _release(self) -> None:
        if self._env is not None and self._game is not None and self._game.path:
            self.cache.checkin(self._game.path, self.expert_type, self._env)
        self._env, self._game = None, None

    def close(self) -> None:
        """End the episode; the started game goes back to the cache (owners close the cache)."""
        self._release()
