"""Paired skill lift of curation rollouts: each scored position's outcome against the same game replayed with no
skills under the same executor seed.

A step's r_task mixes what the curator wrote with which games the step drew: a step of short games scores high with
any repo. Replaying every scored position (2..|G|) of a rollout with an empty repo (same game, same executor seed,
:func:`~twinrun.core.envs.task_groups.rollout_episode_seed`) gives that position's outcome had the curator written
nothing; the difference is what the skills bought on those games. Over training steps the replay's success rate
does not depend on the curator, so a rise of the paired lift is a rise of r_task measured without the game-draw noise
(the learning check, bench/learning.py, reports both).

Self-check: a position whose executor retrieved no skill played exactly what the replay plays, so the two outcomes
must agree. :func:`seed_check` counts them; a disagreement means the seed or the executor's randomness changed between
the run and the replay, and the lift is then meaningless. With the skill-sensitive stand-in executor each position also
carries the relevance of its skills (``skill_relevance``, the quantity the curator controls); the replay has none. Exact for the scripted executor (seeded, no decoding); an
LLM executor's sampling is not reproducible by seed, so its replay is a fresh draw (the check says so by failing).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.core.envs.task_groups import rollout_episode_seed

ReplayKey = tuple[str, int, int, str]  # (group_id, rollout_index, position, game_id)


@dataclass(frozen=True)
class ScoredPosition:
    """One scored position (2..|G|) of a curation rollout with a measured outcome (a rollouts.jsonl row's)."""

    step: int
    group_id: str
    rollout_index: int
    position: int
    game_id: str
    success: bool
    retrieved: bool  # did the executor get any skill at this position
    relevance: float | None = None  # the scripted stand-in's relevance of those skills (None: another executor)

    @property
    def key(self) -> ReplayKey:
        return (self.group_id, self.rollout_index, self.position, self.game_id)


def scored_positions(rollouts: Iterable[Mapping[str, Any]]) -> list[ScoredPosition]:
    """The scored, measured positions of curation-rollout records (rows of another kind are skipped; a resumed
    step's rollout keeps its last row)."""
    last: dict[tuple[int, str, int], Mapping[str, Any]] = {}
    for r in rollouts:
        if r.get("kind") == "curation_rollout":
            last[(int(r["step"]), r["group_id"], int(r["rollout_index"]))] = r
    out = []
    for (step, gid, ri), r in sorted(last.items()):
        for p in r["positions"]:
            if p["index"] >= 2 and p["outcome"] in ("success", "failure"):
                out.append(ScoredPosition(step, gid, ri, int(p["index"]), p["game_id"], p["outcome"] == "success",
                                          bool(p.get("retrieved_skills")), p.get("skill_relevance")))
    return out


def replay_without_skills(spec: Any, keys: Iterable[ReplayKey], *, data_root: Any = None,
                          environ: Mapping[str, str] | None = None, cache: Path | None = None,
                          workers: int | None = None, say: Callable[[str], None] | None = None
                          ) -> dict[ReplayKey, bool]:
    """Success (True/False) of each key's game played with no skills under the rollout's executor seed. Keys
    already in ``cache`` (a JSON file this function writes atomically) are not replayed again; an unmeasured
    replay (infrastructure) is left out, never counted as a failure. ``workers``: environment processes (None = the
    spec's; 0 = engines in this process)."""
    from twinrun.core.curation import CurationRuntime, play_with_repo
    from twinrun.core.records import atomic_write_json

    done: dict[ReplayKey, bool] = {}
    if cache is not None and cache.is_file():
        for row in json.loads(cache.read_text(encoding="utf-8")):
            done[(row[0], int(row[1]), int(row[2]), row[3])] = bool(row[4])
    todo = sorted(set(keys) - set(done))
    if todo:
        runtime = CurationRuntime.from_spec(spec, data_root=data_root, environ=environ, judge=None, workers=workers)
        try:
            if runtime.catalog is None:
                raise TwinrunError("skill lift: the runtime has no game catalog (fix: an environment with games)")
            games = {g.game_id: g for g in runtime.catalog.games()}
            missing = sorted({k[3] for k in todo} - set(games))
            if missing:
                raise TwinrunError(f"skill lift: game {missing[0]!r} is not in environment.split "
                                   f"{spec.environment.split!r} (fix: replay with the spec the run trained on)")
            if say is not None:
                say(f"skill lift: replaying {len(todo)} scored positions without skills")

            async def one(k: ReplayKey) -> tuple[ReplayKey, str]:
                gid, ri, pos, game = k
                ep, _ = await play_with_repo(runtime.executor, runtime.pool, games[game], None, top_k=runtime.top_k,
                                             seed=rollout_episode_seed(runtime.seed, gid, ri, pos), position=pos)
                return k, ep.outcome

            async def all_() -> list[tuple[ReplayKey, str]]:
                return list(await asyncio.gather(*(one(k) for k in todo)))

            for k, outcome in runtime.loop.run(all_()):
                if outcome in ("success", "failure"):
                    done[k] = outcome == "success"
        finally:
            runtime.close()
        if cache is not None:
            atomic_write_json(cache, [[*k, v] for k, v in sorted(done.items())])
    return done


@dataclass(frozen=True)
class StepLift:
    """One training step's scored positions: r_task, the same games' no-skill replay, and their difference."""

    step: int
    n: int
    r_task: float
    no_skill: float
    relevance: float | None = None  # mean skill relevance the stand-in executor read (None: not recorded)

    @property
    def lift(self) -> float:
        return self.r_task - self.no_skill


def lift_by_step(positions: Iterable[ScoredPosition], replay: Mapping[ReplayKey, bool]) -> list[StepLift]:
    """Per step, over the positions that have a replay: success rate, the replay's, and the paired lift."""
    by: dict[int, list[tuple[bool, bool, float | None]]] = defaultdict(list)
    for p in positions:
        if p.key in replay:
            by[p.step].append((p.success, replay[p.key], p.relevance))
    out = []
    for s, v in sorted(by.items()):
        rel = [r for _, _, r in v if r is not None]
        out.append(StepLift(s, len(v), sum(a for a, _, _ in v) / len(v), sum(b for _, b, _ in v) / len(v),
                            sum(rel) / len(rel) if rel else None))
    return out


def seed_check(positions: Iterable[ScoredPosition], replay: Mapping[ReplayKey, bool]) -> tuple[int, int]:
    """(agreeing, compared) over the positions whose executor retrieved no skill: the replay must reproduce them."""
    pairs = [(p.success, replay[p.key]) for p in positions if not p.retrieved and p.key in replay]
    return sum(a == b for a, b in pairs), len(pairs)


__all__ = ["ReplayKey", "ScoredPosition", "StepLift", "lift_by_step", "replay_without_skills",
           "scored_positions", "seed_check"]
