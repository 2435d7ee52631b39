"""Algorithm 1: one curation rollout over a task group, driven by core, turn by turn by a backend.

A **task group** is |G| games of one task type (sampled with a seeded RNG that gives the same groups in every
process; task types in round-robin). A **curation rollout** plays the group in order with its own skill repo::

    for i in 1..|G|:
        S~_i = BM25(x_i, S, k)          # retrieved from this rollout's repo
        xi_i = executor(S~_i, x_i)      # a ReAct episode (unmeasured if the infrastructure failed)
        chi_i = curator input (task, S~_i, trajectory, result)        <- the session returns this
        c_i  = the curator's turn                                     <- the backend submits this
        S    = ApplyOps(S, c_i)
    r = composite_reward(...)

The **session** is the backend-facing object (one per rollout). Core drives the position loop: ``submit`` always
plays the next position, a turn without tool calls applies no ops, and ``finish`` plays every remaining
position with no ops, so a curator (or a backend that stops generating: length cap, tool-call limit) can never
shorten the loop or shrink r_task's denominator. Sync methods (TRL's tool methods) and ``a``-prefixed async
twins (verl's agent loop) run the same coroutines on the runtime's :class:`BackgroundLoop`.

``share_first_position``: all N rollouts of a group (in one runtime) reuse one position-1 episode (position 1
runs on the same initial repo in every rollout; common random numbers save N-1 episodes per group). The record
says whether a rollout played or reused it, and only the rollout that played it reports the episode row.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from twinrun.core.anchors import anchor_key, estimator_anchor
from twinrun.core.envs import EnvPool, GameCatalog, GameRef, make_catalog, make_pool
from twinrun.core.errors import TwinrunError
from twinrun.core.executors import BackgroundLoop, Executor, make_executor
from twinrun.core.context_shape import input_digest
from twinrun.core.react import Episode, PromptTemplate
from twinrun.core.records import SCHEMA_VERSION, EpisodeRecord, JsonlWriter, JudgeRecord, Provenance, SequenceTokens
from twinrun.core.rewards import PositionResult, RewardBreakdown, TokenCounter, composite_reward, whitespace_tokens
from twinrun.core.skills import OpResult, SkillRepo, render_for_prompt
from twinrun.core.toolcalls import CURATE_TOOL, CuratorTurn, parse_curator_turn


class CurationError(TwinrunError, ValueError):
    """A session used out of order, or a task group that cannot be drawn."""


def stable_int(*parts: Any) -> int:
    """A 63-bit integer from the parts' text: the same in every process (unlike hash())."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# ------------------------------------------------------------------------------------------------------------
# Task groups


@dataclass(frozen=True)
class TaskGroup:
    """|G| games of one task type. `to_row()` is JSON-able (a dataset row for TRL/verl); `from_row` inverts it."""

    group_id: str
    task_type: str
    games: tuple[GameRef, ...]
    step: int = 0
    index: int = 0

    def to_row(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "task_type": self.task_type, "step": self.step, "index": self.index,
                "games": [g.to_dict() for g in self.games]}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TaskGroup:
        try:
            return cls(str(row["group_id"]), str(row["task_type"]), tuple(GameRef.from_dict(g) for g in row["games"]),
                       int(row.get("step", 0)), int(row.get("index", 0)))
        except (KeyError, TypeError) as e:
            raise CurationError(f"task group row: missing or bad field {e} (fix: build rows with TaskGroup.to_row())") from None


class TaskGroupSampler:
    """Deterministic task groups: group k = step * groups_per_step + index has type ``types[k % len(types)]``
    (uniform round-robin) and |G| distinct games of that type drawn with ``Random(stable_int(seed, k))``.
    The same (seed, step, index) gives the same group in every process and on every backend."""

    def __init__(self, catalog: GameCatalog, group_size: int, *, groups_per_step: int = 1,
                 task_types: Sequence[str] | None = None, seed: int = 0):
        self.catalog = catalog
        self.group_size = group_size
        self.groups_per_step = groups_per_step
        self.seed = seed
        self.task_types = list(task_types) if task_types else catalog.task_types()
        if not self.task_types:
            raise CurationError("environment.task_types: no task types in the catalogue (fix: check the split)")
        self._games: dict[str, list[GameRef]] = {}

    def games_of(self, task_type: str) -> list[GameRef]:
        if task_type not in self._games:
            games = sorted(self.catalog.games(task_type), key=lambda g: g.game_id)
            if len(games) < self.group_size:
                raise CurationError(
                    f"environment.group_size: {self.group_size} exceeds the {len(games)} {task_type!r} games of the "
                    "split (fix: a smaller group_size or a larger split)"
                )
            self._games[task_type] = games
        return self._games[task_type]

    def group(self, step: int, index: int) -> TaskGroup:
        if not 0 <= index < self.groups_per_step:
            raise CurationError(f"group index: {index} is outside 0..{self.groups_per_step - 1} (fix: batch.groups_per_step)")
        k = step * self.groups_per_step + index
        task_type = self.task_types[k % len(self.task_types)]
        rng = random.Random(stable_int("twinrun-task-group", self.seed, k))
        games = tuple(rng.sample(self.games_of(task_type), self.group_size))
        return TaskGroup(f"s{step}-g{index}-{task_type}", task_type, games, step, index)

    def step_groups(self, step: int) -> list[TaskGroup]:
        return [self.group(step, i) for i in range(self.groups_per_step)]


# ------------------------------------------------------------------------------------------------------------
# Records


class OpRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    function: str
    skill_name: str | None = None
    ok: bool
    error: str | None = None


class PositionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    game_id: str
    outcome: Literal["success", "failure", "unmeasured"]
    unmeasured_reason: str | None = None
    retrieved_skills: list[str] = Field(default_factory=list)
    anchor: str  # GiGPO's step-group key under algorithm.gigpo.anchor (core.anchors); the text under similarity
    correctness: str | None = None  # the correctness signal the curator read here (part of position_outcome)
    curator_input: str | None = None  # chi_i itself, kept only under anchor_match: similarity
    # sha256[:16] of chi_i (context_shape.input_digest): the exact_input anchor, re-keyed offline by advdiff, and
    # the link from a trained prompt back to core's input
    input_digest: str | None = None
    curator_input_tokens: int | None = None
    repo_tokens: int | None = None
    repo_size: int = 0  # skills after this turn's ops
    ops: list[OpRecord] = Field(default_factory=list)
    tool_calls: int = 0
    turn_missing: bool = False  # the backend never submitted a turn here (finish() played on)
    no_valid_call: bool = False  # the turn applied no valid operation (for algorithm.invalid_penalty)
    judged: list[bool | None] = Field(default_factory=list)
    episode_shared: bool = False  # this position's episode was reused from another rollout of the group
    episode_started_at: float | None = None  # unix seconds; with episode_wall_s: the episode's interval
    episode_wall_s: float | None = None


class CurationRecord(BaseModel):
    """One curation rollout (a rollouts.jsonl row). ``sequences``: the token ids the backend trained on
    (records.SequenceTokens; None in files written before `twinrun parity` existed)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["curation_rollout"] = "curation_rollout"
    group_id: str
    task_type: str
    step: int
    group_index: int
    rollout_index: int
    games: list[str]
    positions: list[PositionRecord]
    positions_measured: int  # scored positions (2..|G|) with a success/failure outcome
    ops_applied: int
    ops_invalid: int
    turns_missing: int
    extra_turns_ignored: int  # turns submitted after the last position (not applied)
    share_first_position: bool
    correctness_source: Literal["judged", "ground_truth"] = "ground_truth"  # what positions[].correctness holds
    first_position_source: Literal["played", "shared"]
    executor_episodes: int  # episodes this rollout played (a reused position-1 episode is not counted)
    executor_calls: int
    unmeasured_episodes: int
    reward: RewardBreakdown
    anchors: list[str]
    step_rewards: list[float]
    wall_s: float
    judge: JudgeRecord | None = None  # what the r_cnt verdicts were asked with; None: no judge (or one without settings)
    provenance: Provenance | None = None
    sequences: list[SequenceTokens] | None = None


@dataclass
class PositionState:
    index: int
    game: GameRef
    episode: Episode | None = None
    episode_shared: bool = False
    retrieved: list[str] = field(default_factory=list)
    curator_input: str = ""
    anchor: str = ""
    correctness: str = ""
    input_digest: str = ""
    input_tokens: int | None = None
    turn: CuratorTurn | None = None
    turn_missing: bool = False
    op_results: list[OpResult] = field(default_factory=list)
    repo_tokens: int | None = None
    repo_size: int = 0
    verdict_tasks: list[Any] = field(default_factory=list)
    verdicts: list[bool | None] = field(default_factory=list)


@dataclass
class CurationResult:
    """What ``finish()`` returns. `episodes`: rows this rollout owns (write them to episodes.jsonl)."""

    reward: RewardBreakdown
    anchors: list[str]
    step_rewards: list[float]
    record: CurationRecord
    episodes: list[EpisodeRecord]
    positions: list[PositionState]
    repo: SkillRepo

    @property
    def total(self) -> float | None:
        return self.reward.total

    def reward_under(self, reward: Any) -> RewardBreakdown:
        """This rollout's reward under other reward settings (a RewardSpec), e.g. the other call pooling."""
        return composite_reward(position_results(self.positions), reward)

    def write(self, episodes: JsonlWriter | None = None, rollouts: JsonlWriter | None = None) -> None:
        if episodes is not None:
            episodes.write_many(self.episodes)
        if rollouts is not None:
            rollouts.write(self.record)


# ------------------------------------------------------------------------------------------------------------
# Prompts

CURATOR_INPUT_FIELDS = ("task", "skills", "trajectory", "result", "task_type", "position", "group_size", "repo_skills")


@dataclass(frozen=True)
class CuratorPrompts:
    system: str
    input: PromptTemplate

    @classmethod
    def from_files(cls, system: str | Path, input: str | Path) -> CuratorPrompts:  # noqa: A002
        sys_t = PromptTemplate.from_file(system, "curator_system")
        return cls(sys_t.text.strip(), PromptTemplate.from_file(input, "curator_input",
                                                                required=("task", "trajectory", "result")))


def result_text(episode: Episode, correctness: str | None = None) -> str:
    """The correctness signal the curator reads: ``correctness`` (core.correctness: the judged "success",
    "failure" or "unknown"), or the environment's outcome when None (curation.correctness: ground_truth)."""
    rec = episode.record
    if rec.outcome == "unmeasured":
        return f"Unmeasured: the executor could not be run ({rec.unmeasured_reason}). Judge nothing from this trajectory."
    shown = correctness or rec.outcome
    if shown == "unknown":
        return f"Unknown: the correctness judge gave no verdict ({rec.steps} steps)"
    word = "Success" if shown == "success" else "Failure"
    if episode.game.env == "sciworld" and rec.score is not None:
        return f"{word} (score {rec.score:g} of 100, {rec.steps} steps)"
    return f"{word} ({rec.steps} steps)"


# ------------------------------------------------------------------------------------------------------------
# Runtime: one per training job (per process); shared by every session


class CurationRuntime:
    """Everything sessions share: the event loop, the env pool, the executor (its concurrency bound covers all
    episodes of a step), the reward settings, the judge, the token counter and the first-position cache.

    count_tokens: text -> token count for r_comp; default :func:`whitespace_tokens` (tests and CPU smoke runs);
    pass the curator's tokenizer (``rewards.token_counter(tok)``) in real runs."""

    def __init__(
        self,
        *,
        env_name: str,
        pool: EnvPool,
        executor: Executor,
        curator_prompts: CuratorPrompts,
        reward: Any,
        new_repo: Callable[[], SkillRepo],
        top_k: int = 5,
        group_size: int = 10,
        judge: Any = None,
        count_tokens: TokenCounter | None = None,
        share_first_position: bool = False,
        seed: int = 0,
        catalog: GameCatalog | None = None,
        groups_per_step: int = 1,
        task_types: Sequence[str] | None = None,
        provenance: Provenance | None = None,
        loop: BackgroundLoop | None = None,
        owns_pool: bool = True,
        include_thoughts: bool = False,
        first_position_cache_size: int = 4096,
        anchor: str = "position_outcome",
        anchor_match: str = "exact",
        correctness_judge: Any = None,
    ):
        self.env_name = env_name
        self.pool = pool
        self.executor = executor
        self.curator_prompts = curator_prompts
        self.reward_spec = reward
        self.new_repo = new_repo
        self.top_k = top_k
        self.group_size = group_size
        self.judge = judge
        self.count_tokens: TokenCounter = count_tokens or whitespace_tokens
        self.share_first_position = share_first_position
        self.seed = seed
        self.catalog = catalog
        self.provenance = provenance
        self.include_thoughts = include_thoughts
        anchor_key(anchor, position=1, game_id="", correctness="", input_digest="")  # an unknown kind fails here
        self.anchor = anchor
        self.anchor_match = anchor_match
        self.correctness_judge = correctness_judge  # None: the curator reads the environment's outcome
        self.loop = loop or BackgroundLoop()
        self._owns_loop = loop is None
        self._owns_pool = owns_pool
        self._first: OrderedDict[str, asyncio.Future] = OrderedDict()
        self._first_cap = first_position_cache_size
        self.sampler = (
            TaskGroupSampler(catalog, group_size, groups_per_step=groups_per_step, task_types=task_types, seed=seed)
            if catalog is not None else None
        )

    # -- construction from a spec
    @classmethod
    def from_spec(
        cls,
        spec: Any,
        *,
        data_root: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        judge: Any = "spec",
        count_tokens: TokenCounter | None = None,
        split: str | None = None,
        workers: int | None = None,
        provenance: Provenance | None = None,
        executor: Executor | None = None,
        api_key: str | None = None,
    ) -> CurationRuntime:
        """Runtime for an ExperimentSpec. data_root: the ALFWorld data folder (else ``environ['ALFWORLD_DATA']``
        when the caller passes its environment). judge: "spec" builds the spec's judge; pass an object or None to
        override. split: defaults to environment.split (training groups). workers: override environment.workers
        (0 = engines in this process, for tests)."""
        env = spec.environment
        root = None
        if env.name == "alfworld":
            from twinrun.core.envs.alfworld import resolve_alfworld_data

            root = resolve_alfworld_data(data_root, environ)
        catalog = make_catalog(env.name, split or env.split, data_root=root, task_types=env.task_types)
        executor = executor or make_executor(spec, api_key=api_key, environ=environ)
        pool = make_pool(env.name, env.workers if workers is None else workers, expert=bool(executor.policy.needs_expert))
        if judge == "spec":
            from twinrun.core.judges import judge_for_experiment

            judge = judge_for_experiment(spec)
        prompts = CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input"))
        from twinrun.core.correctness import correctness_judge_for

        return cls(
            env_name=env.name, pool=pool, executor=executor, curator_prompts=prompts, reward=spec.reward,
            new_repo=lambda: SkillRepo.for_experiment(spec), top_k=spec.retrieval.top_k, group_size=env.group_size,
            judge=judge, count_tokens=count_tokens, share_first_position=env.share_first_position, seed=spec.seed,
            catalog=catalog, groups_per_step=spec.batch.groups_per_step, task_types=env.task_types,
            provenance=provenance, anchor=spec.algorithm.gigpo.anchor, anchor_match=spec.algorithm.gigpo.anchor_match,
            correctness_judge=correctness_judge_for(spec, spec.curation.correctness, api_key=api_key,
                                                    environ=environ),
        )

    # -- what a backend needs besides sessions
    @property
    def curator_system_prompt(self) -> str:
        return self.curator_prompts.system

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The curator's tool list: exactly one tool, ``curate``."""
        return [CURATE_TOOL]

    def task_group(self, step: int, index: int) -> TaskGroup:
        if self.sampler is None:
            raise CurationError("task_group: this runtime has no catalogue (fix: pass catalog= or use from_spec)")
        return self.sampler.group(step, index)

    def session(self, group: TaskGroup | Mapping[str, Any], rollout_index: int) -> CurationSession:
        g = group if isinstance(group, TaskGroup) else TaskGroup.from_row(group)
        if len(g.games) != self.group_size:
            raise CurationError(
                f"task group {g.group_id}: {len(g.games)} games but environment.group_size={self.group_size} "
                "(fix: draw groups with this runtime's sampler)"
            )
        return CurationSession(self, g, rollout_index)

    def close(self) -> None:
        try:
            self.loop.run(self.executor.aclose())
        except Exception:  # noqa: BLE001
            pass
        if self._owns_pool:
            self.pool.close()
        if self._owns_loop:
            self.loop.close()
        close_judge = getattr(self.judge, "close", None)
        if close_judge is not None:
            close_judge()

    def __enter__(self) -> CurationRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- episode play (runs on self.loop)
    async def _play(self, game: GameRef, repo: SkillRepo, *, seed: int, position: int) -> tuple[Episode, list[str]]:
        return await play_with_repo(self.executor, self.pool, game, repo, top_k=self.top_k, seed=seed, position=position)

    async def _shared_first(self, group: TaskGroup, repo: SkillRepo) -> tuple[Episode, list[str], bool]:
        """Position 1 of `group`, played once per runtime; returns (episode, retrieved, played_here)."""
        key = f"{group.group_id}|{group.games[0].game_id}|{self.executor.settings_hash}"
        fut = self._first.get(key)
        if fut is not None:
            episode, retrieved = await asyncio.shield(fut)
            return episode, retrieved, False
        fut = asyncio.get_running_loop().create_future()
        self._first[key] = fut
        while len(self._first) > self._first_cap:
            self._first.popitem(last=False)
        try:
            result = await self._play(group.games[0], repo, seed=stable_int("episode", self.seed, group.group_id, "shared", 1),
                                      position=1)
        except asyncio.CancelledError:
            self._first.pop(key, None)
            fut.cancel()
            raise
        except Exception as e:
            self._first.pop(key, None)
            fut.set_exception(e)
            fut.exception()  # mark retrieved (no 'never retrieved' warning); waiters re-raise it
            raise
        fut.set_result(result)
        return result[0], result[1], True


async def play_with_repo(executor: Executor, pool: EnvPool, game: GameRef, repo: SkillRepo | None, *, top_k: int = 5,
                         seed: int = 0, position: int | None = None) -> tuple[Episode, list[str]]:
    """Play one game on a pool lease with the top-k skills BM25-retrieved from `repo` for the game's task (None
    or an empty repo: no skills). Returns the episode and the retrieved skill names. Also what sweeps use."""
    retrieved: list[str] = []

    def retrieve(task: str) -> tuple[str, list[str]]:
        skills = repo.retrieve(task, top_k) if repo is not None and top_k > 0 and len(repo) else []
        retrieved[:] = [s.name for s in skills]
        return (render_for_prompt(skills) if skills else ""), list(retrieved)

    lease = pool.lease()
    try:
        episode = await executor.play(lease, game, retrieve=retrieve, seed=seed, position=position)
    finally:
        lease.close()
    return episode, retrieved


# ------------------------------------------------------------------------------------------------------------
# The session


class CurationSession:
    """One curation rollout, driven turn by turn by a backend.

    Sync:  ``start() -> str``, ``submit(turn) -> str | None``, ``finish() -> CurationResult``
    Async: ``astart``, ``asubmit``, ``afinish`` (awaitable from any event loop).

    ``turn``: the curator's raw assistant text (tool calls parsed by :mod:`twinrun.core.toolcalls`), or tool calls a
    backend already parsed (list of ``{"name", "arguments"}``). ``submit`` returns the next curator input chi_{i+1},
    or None after the last position. ``finish`` may be called at any time: it plays what is left with no ops."""

    def __init__(self, runtime: CurationRuntime, group: TaskGroup, rollout_index: int):
        self.runtime = runtime
        self.group = group
        self.rollout_index = rollout_index
        self.repo = runtime.new_repo()
        self.positions = [PositionState(i + 1, g) for i, g in enumerate(group.games)]
        self._cur = 0  # 1..|G|: position whose curator input awaits a turn; |G|+1: all done; 0: not started
        self._busy = False
        self._extra_turns = 0
        self._first_source: Literal["played", "shared"] = "played"
        self._result: CurationResult | None = None
        self._t0 = time.perf_counter()
        self.last_op_results: list[OpResult] = []

    @property
    def size(self) -> int:
        return len(self.positions)

    @property
    def done(self) -> bool:
        return self._cur > self.size

    @property
    def position(self) -> int:
        """The position whose curator turn is awaited (0 before start, |G|+1 when done)."""
        return self._cur

    # -- sync API
    def start(self) -> str:
        return self.runtime.loop.run(self._guard(self._start()))

    def submit(self, turn: str | Sequence[Any] | CuratorTurn) -> str | None:
        return self.runtime.loop.run(self._guard(self._submit(turn)))

    def finish(self) -> CurationResult:
        return self.runtime.loop.run(self._guard(self._finish()))

    # -- async API
    async def astart(self) -> str:
        return await self.runtime.loop.arun(self._guard(self._start()))

    async def asubmit(self, turn: str | Sequence[Any] | CuratorTurn) -> str | None:
        return await self.runtime.loop.arun(self._guard(self._submit(turn)))

    async def afinish(self) -> CurationResult:
        return await self.runtime.loop.arun(self._guard(self._finish()))

    # -- for a backend whose framework already parsed the `curate` call (TRL tool methods, verl tool parsers)
    def submit_operations(self, operations: Any) -> str | None:
        """``submit`` of one ``curate(operations=...)`` call."""
        return self.submit([{"name": "curate", "arguments": {"operations": operations}}])

    async def asubmit_operations(self, operations: Any) -> str | None:
        return await self.asubmit([{"name": "curate", "arguments": {"operations": operations}}])

    # -- internals (run on the runtime loop)
    async def _guard(self, coro: Any) -> Any:
        if self._busy:
            coro.close()
            raise CurationError("session: a call is already in progress (fix: await each call before the next)")
        self._busy = True
        try:
            return await coro
        finally:
            self._busy = False

    def _seed(self, position: int) -> int:
        return stable_int("episode", self.runtime.seed, self.group.group_id, self.rollout_index, position)

    async def _start(self) -> str:
        if self._cur != 0:
            raise CurationError("session.start: already started (fix: call start() once, then submit())")
        p = self.positions[0]
        if self.runtime.share_first_position:
            p.episode, p.retrieved, played = await self.runtime._shared_first(self.group, self.repo)
            p.episode_shared = not played
            self._first_source = "played" if played else "shared"
        else:
            p.episode, p.retrieved = await self.runtime._play(p.game, self.repo, seed=self._seed(1), position=1)
        self._cur = 1
        await self._judge_correctness(p)
        return self._curator_input(p)

    async def _judge_correctness(self, p: PositionState) -> None:
        """The correctness signal the curator reads at p (before it acts there; part of its anchor)."""
        ep = p.episode
        assert ep is not None
        judge = self.runtime.correctness_judge
        if ep.outcome == "unmeasured" or judge is None:
            p.correctness = ep.outcome
        else:
            p.correctness = await judge.acorrect(ep.task or ep.initial_observation, ep.trajectory_text(), ep)

    def _curator_input(self, p: PositionState) -> str:
        ep = p.episode
        assert ep is not None
        skills = [s for s in (self.repo.get(n) for n in p.retrieved) if s is not None]
        repo_list = "\n".join(f"- {s.name}: {s.description}" for s in self.repo) or "(empty)"
        text = self.runtime.curator_prompts.input.render(
            task=ep.task or ep.initial_observation,
            skills=render_for_prompt(skills) if skills else "(none)",
            trajectory=ep.trajectory_text(include_thoughts=self.runtime.include_thoughts),
            result=result_text(ep, p.correctness if self.runtime.correctness_judge is not None else None),
            task_type=self.group.task_type,
            position=p.index,
            group_size=self.size,
            repo_skills=repo_list,
        ).strip()
        p.curator_input = text
        # the anchor is fixed here, before the curator acts at this position (core.anchors)
        p.input_digest = input_digest(text)
        rt = self.runtime
        key = anchor_key(rt.anchor, position=p.index, game_id=p.game.game_id, correctness=p.correctness,
                         input_digest=p.input_digest)
        p.anchor = estimator_anchor(key, text, rt.anchor_match)
        p.input_tokens = self.runtime.count_tokens(text)
        return text

    async def _submit(self, turn: Any) -> str | None:
        if self._cur == 0:
            raise CurationError("session.submit: not started (fix: call start() first)")
        if self._cur > self.size:
            self._extra_turns += 1  # the loop is over: nothing more is applied
            return None
        return await self._advance(parse_curator_turn(turn))

    async def _advance(self, turn: CuratorTurn | None) -> str | None:
        """Apply the turn to the current position, then play the next one (or end)."""
        p = self.positions[self._cur - 1]
        self._apply(p, turn)
        if self._cur == self.size:
            self._cur += 1
            return None
        nxt = self.positions[self._cur]
        nxt.episode, nxt.retrieved = await self.runtime._play(nxt.game, self.repo, seed=self._seed(nxt.index),
                                                              position=nxt.index)
        self._cur += 1
        await self._judge_correctness(nxt)
        return self._curator_input(nxt)

    def _apply(self, p: PositionState, turn: CuratorTurn | None) -> None:
        p.turn = turn
        p.turn_missing = turn is None
        results: list[OpResult] = []
        for op in (turn.operations if turn else []):
            if op.error:
                results.append(OpResult(False, op.function, _skill_name(op.arguments), op.error))
            else:
                results.append(self.repo.apply(op.function, op.arguments))
        p.op_results = results
        self.last_op_results = results
        p.repo_tokens = self.runtime.count_tokens(self.repo.text())
        p.repo_size = len(self.repo)
        judge = self.runtime.judge
        if judge is not None and p.episode is not None:
            from twinrun.core.judges import JudgeRequest

            for r in results:
                if r.writes_content:
                    req = JudgeRequest(skill=r.skill, task=p.episode.task,  # type: ignore[arg-type]
                                       trajectory=p.episode.trajectory_text(), outcome=p.episode.outcome)
                    p.verdict_tasks.append(asyncio.ensure_future(_ajudge(judge, req)))

    async def _finish(self) -> CurationResult:
        if self._result is not None:
            return self._result
        if self._cur == 0:
            await self._start()
        while self._cur <= self.size:
            await self._advance(None)  # the backend stopped early: the loop still runs to |G|
        for p in self.positions:
            verdicts = await asyncio.gather(*p.verdict_tasks, return_exceptions=True) if p.verdict_tasks else []
            p.verdicts = [v.valid if hasattr(v, "valid") else None for v in verdicts]
        self._result = self._build_result()
        return self._result

    def _build_result(self) -> CurationResult:
        results = position_results(self.positions)
        breakdown = composite_reward(results, self.runtime.reward_spec)
        own_episodes = [p.episode.record for p in self.positions if p.episode is not None and not p.episode_shared]
        prec = [
            PositionRecord(
                index=p.index, game_id=p.game.game_id, outcome=p.episode.outcome,  # type: ignore[union-attr]
                unmeasured_reason=p.episode.record.unmeasured_reason,  # type: ignore[union-attr]
                retrieved_skills=p.retrieved, anchor=p.anchor, correctness=p.correctness or None,
                curator_input=p.curator_input if self.runtime.anchor_match == "similarity" else None,
                curator_input_tokens=p.input_tokens,
                input_digest=p.input_digest or None,
                repo_tokens=p.repo_tokens, repo_size=p.repo_size,
                ops=[OpRecord(function=r.function, skill_name=r.skill_name if isinstance(r.skill_name, str) else None,
                              ok=r.ok, error=r.error) for r in p.op_results],
                tool_calls=len(p.turn.calls) if p.turn else 0, turn_missing=p.turn_missing,
                no_valid_call=not any(r.ok for r in p.op_results), judged=p.verdicts, episode_shared=p.episode_shared,
                episode_started_at=p.episode.record.started_at,  # type: ignore[union-attr]
                episode_wall_s=p.episode.record.wall_s,  # type: ignore[union-attr]
            )
            for p in self.positions
        ]
        scored = self.positions[1:]
        record = CurationRecord(
            group_id=self.group.group_id, task_type=self.group.task_type, step=self.group.step,
            group_index=self.group.index, rollout_index=self.rollout_index,
            games=[g.game_id for g in self.group.games], positions=prec,
            positions_measured=sum(1 for p in scored if p.episode and p.episode.outcome != "unmeasured"),
            ops_applied=sum(1 for p in self.positions for r in p.op_results if r.ok),
            ops_invalid=sum(1 for p in self.positions for r in p.op_results if not r.ok),
            turns_missing=sum(1 for p in self.positions if p.turn_missing), extra_turns_ignored=self._extra_turns,
            share_first_position=self.runtime.share_first_position, first_position_source=self._first_source,
            correctness_source="judged" if self.runtime.correctness_judge is not None else "ground_truth",
            executor_episodes=len(own_episodes), executor_calls=sum(e.executor_calls for e in own_episodes),
            unmeasured_episodes=sum(1 for e in own_episodes if e.outcome == "unmeasured"),
            reward=breakdown, anchors=[p.anchor for p in self.positions], step_rewards=list(breakdown.step_rewards),
            wall_s=round(time.perf_counter() - self._t0, 6), judge=judge_record(self.runtime.judge),
            provenance=self.runtime.provenance,
        )
        return CurationResult(breakdown, record.anchors, record.step_rewards, record, own_episodes, self.positions, self.repo)


def position_results(positions: Sequence[PositionState]) -> list[PositionResult]:
    """What each played position contributes to the reward (the input of ``composite_reward``)."""
    out = []
    for p in positions:
        assert p.episode is not None
        out.append(PositionResult(
            index=p.index, outcome=p.episode.outcome, calls_total=len(p.op_results),
            calls_valid=sum(1 for r in p.op_results if r.ok), judged=tuple(p.verdicts),
            content_ops=sum(1 for r in p.op_results if r.writes_content),
            repo_tokens=p.repo_tokens if p.input_tokens else None, curator_input_tokens=p.input_tokens or None,
        ))
    return out


def _skill_name(arguments: Any) -> str | None:
    name = arguments.get("skill_name") if isinstance(arguments, dict) else None
    return name if isinstance(name, str) else None


def judge_record(judge: Any) -> JudgeRecord | None:
    """The rollout record's account of its judge (None without one, or for a judge object without settings())."""
    settings = getattr(judge, "settings", None)
    return JudgeRecord(**asdict(settings())) if callable(settings) else None


async def _ajudge(judge: Any, request: Any) -> Any:
    if hasattr(judge, "ajudge"):
        return await judge.ajudge(request)
    return await asyncio.to_thread(judge.judge, request)


__all__ = [
    "CurationError",
    "CurationRecord",
    "CurationResult",
    "CurationRuntime",
    "CurationSession",
    "CuratorPrompts",
    "PositionRecord",
    "TaskGroup",
    "TaskGroupSampler",
    "play_with_repo",
    "stable_int",
]
