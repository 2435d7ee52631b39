"""The protocol's settings, its per-episode row, and which variations it plays.

The test variations are by default the **pinned list** shipped with twinrun
(``twinrun/assets/sciworld-test-variations.json``): 200 (task, variation) pairs of ScienceWorld's test split,
the same for every arm and every run, checked against the installed simulator before anything is played. It is
*not* the published study's list (not available here): it was drawn once with :func:`draw_pinned_variations`
(stratified by task: 4 to 7 of each of the 30 tasks' test variations, numpy ``default_rng`` draws, ordered by
game id) and frozen; DIVERGENCES E6 says so. ``--variations N`` (N < 200) plays a seeded draw of N from the pinned list;
another split (train/dev) draws from that split as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from twinrun.core.errors import TwinrunError
from twinrun.core.records import SCHEMA_VERSION, Outcome, Provenance
from twinrun.core.sft.template_copy import STUDY_LITERAL_COPIES
from twinrun.core.sft.trajectories import SkillCondition

PINNED_VARIATIONS_FILE = Path(__file__).resolve().parents[3] / "assets" / "sciworld-test-variations.json"
PINNED_COUNT = 200
PINNED_SEED = 0


class AgentEvalSettings(BaseModel):
    """The protocol's knobs (defaults = the protocol). `twinrun eval-agent` takes each option's default and help
    from these fields."""

    model_config = ConfigDict(extra="forbid")
    passes: int = Field(4, ge=1, description="independent passes over the variations")
    variations: int = Field(200, ge=1, description="variations played (fewer than the pinned 200: a draw of that "
                            "many with the seed)")
    pinned: bool = Field(True, description="play the shipped pinned test list (test split only), or a seeded draw "
                         "from the split")
    seed: int = Field(0, description="seed of the variation draw and of every episode's sampling (the same in "
                      "every arm)")
    split: Literal["train", "dev", "test"] = Field("test", description="train, dev or test")
    tasks: list[str] | None = Field(None, description="only these ScienceWorld tasks (default: every task)")
    temperature: float = Field(0.4, ge=0.0, le=2.0, description="sampling temperature of every reply")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling of every reply (1: off)")
    max_rounds: int = Field(30, ge=1, description="replies per episode")
    max_tokens: int = Field(512, ge=1, description="new tokens per reply")
    thinking: bool = Field(False, description="Qwen3 thinking (protocol: off)")
    skill_top_k: int = Field(5, ge=0, description="skills retrieved per task")
    n_boot: int = Field(10_000, ge=100, description="bootstrap resamples")
    literal_copies: list[str] = Field(default_factory=lambda: list(STUDY_LITERAL_COPIES), min_length=1,
                                      description="actions counted by the literal template-copy share")

    def settings_hash(self) -> str:
        blob = json.dumps(self.model_dump(mode="json", exclude={"n_boot"}), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class AgentEpisodeRow(BaseModel):
    """One episode of one arm in one pass (episodes.jsonl)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["agent_episode"] = "agent_episode"
    arm: str
    checkpoint: str
    skill_condition: SkillCondition | None = None
    skills_source: str | None = None
    pass_index: int
    game_id: str
    game_index: int
    task: str
    variation: int | None
    split: str
    outcome: Outcome
    unmeasured_reason: str | None = None
    final_score: float | None = None
    success: bool | None = None
    rounds: int = 0
    stopped: str | None = Field(None, description="done (simulator), rounds (max_rounds) or context (full)")
    actions: list[str | None] = Field(default_factory=list)
    template_copies: int = Field(0, description="replies copying any template of the action list literally")
    literal_copies: int = Field(0, description="replies whose action is one of settings.literal_copies")
    retrieved_skills: list[str] = Field(default_factory=list)
    seed: int
    wall_s: float = 0.0
    trajectory_id: str
    provenance: Provenance


# ------------------------------------------------------------------------------------------------------------
# Variations


def sample_games(games: Sequence[Any], n: int, seed: int) -> list[Any]:
    """``n`` games drawn without replacement with ``seed`` from the list sorted by game_id (so the draw does not
    depend on listing order); returned sorted by game_id. Fewer than ``n`` available: all of them."""
    pool = sorted(games, key=lambda g: g.game_id)
    if n >= len(pool):
        return pool
    pick = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted((pool[i] for i in pick), key=lambda g: g.game_id)


def episode_seed(seed: int, pass_index: int, game_id: str) -> int:
    """The sampling seed of one (pass, game): identical across arms, so arms pair on the same random stream."""
    h = hashlib.sha256(f"{seed}|{pass_index}|{game_id}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def draw_pinned_variations(test_games: Sequence[Any], n: int = PINNED_COUNT, seed: int = PINNED_SEED
                           ) -> list[tuple[str, int]]:
    """How the shipped list was drawn (kept so a test can redraw it against the installed simulator).

    Stratified by task, so every task is tested (a plain random draw over the 1,819 test variations leaves four
    tasks out and gives one task 34 of the 200): ``n`` is shared equally over the tasks, a task with fewer test
    variations than its share gives all of them and the rest is shared again among the others; the remainder
    goes one each to the tasks with the most test variations (ties by name). Within a task the variations are a
    ``default_rng(seed + i)`` draw over its variation list sorted by number (i: the task's index in name
    order). Returned sorted by game id. With ScienceWorld 1.2.3: 4-5 for the four smallest tasks, 6 or 7 for
    the others."""
    by_task: dict[str, list[Any]] = {}
    for g in test_games:
        by_task.setdefault(g.task_name, []).append(g)
    tasks = sorted(by_task)
    if sum(len(v) for v in by_task.values()) < n:
        raise TwinrunError(f"pinned variations: the split has fewer than {n} variations (fix: a larger split)")
    quota: dict[str, int] = {}
    remaining, open_tasks = n, list(tasks)
    while True:
        share = remaining // len(open_tasks)
        small = [t for t in open_tasks if len(by_task[t]) <= share]
        if not small:
            break
        for t in small:
            quota[t] = len(by_task[t])
            remaining -= quota[t]
            open_tasks.remove(t)
    base, extra = divmod(remaining, len(open_tasks))
    richest = set(sorted(open_tasks, key=lambda t: (-len(by_task[t]), t))[:extra])
    quota.update({t: base + (t in richest) for t in open_tasks})
    picked = []
    for i, task in enumerate(tasks):
        pool = sorted(by_task[task], key=lambda g: int(g.variation))
        idx = np.random.default_rng(seed + i).choice(len(pool), size=quota[task], replace=False)
        picked.extend(pool[j] for j in idx)
    return [(g.task_name, int(g.variation)) for g in sorted(picked, key=lambda g: g.game_id)]


def load_pinned_variations(path: str | Path = PINNED_VARIATIONS_FILE) -> list[tuple[str, int]]:
    """The pinned (task, variation) pairs, in the file's order."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return [(str(v["task"]), int(v["variation"])) for v in data["variations"]]


def pinned_games(catalog: Any, settings: AgentEvalSettings, *, path: str | Path = PINNED_VARIATIONS_FILE
                 ) -> tuple[list[Any], str]:
    """The games ``settings`` selects from the pinned list, each checked to exist in the installed simulator
    (``catalog``: a test-split :class:`~twinrun.core.envs.scienceworld.ScienceWorldCatalog`), and a sentence
    saying which variations these are. Refuses a non-test split and a pair the simulator does not have."""
    if settings.split != "test":
        raise TwinrunError(f"--split: {settings.split!r} with the pinned test list (fix: --split test, or "
                           "--no-pinned to draw from another split)")
    pairs = load_pinned_variations(path)
    if settings.tasks:
        pairs = [p for p in pairs if p[0] in settings.tasks]
        if not pairs:
            raise TwinrunError(f"--task: {settings.tasks} has no variation in the pinned list (fix: another task, "
                               "or --no-pinned)")
    by_task: dict[str, dict[int, Any]] = {}
    games = []
    for task, variation in pairs:
        if task not in by_task:
            by_task[task] = {g.variation: g for g in catalog.games(task)}
        game = by_task[task].get(variation)
        if game is None:
            raise TwinrunError(
                f"pinned variations: {task}/{variation} is not a test variation of the installed scienceworld "
                f"(fix: install the scienceworld version the list names in {Path(path).name})"
            )
        games.append(game)
    what = f"{len(games)} pinned test variations ({Path(path).name})"
    if settings.variations < len(games):
        games = sample_games(games, settings.variations, settings.seed)
        what = f"{len(games)} of the {len(pairs)} pinned test variations ({Path(path).name}), drawn with seed " \
               f"{settings.seed}"
    return games, what
