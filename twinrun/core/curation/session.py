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
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from twinrun.core.advantages.anchors import anchor_key, estimator_anchor
from twinrun.core.curation.context_shape import input_digest
from twinrun.core.curation.prompts import result_text
from twinrun.core.envs import GameRef
from twinrun.core.executors.react import Episode
from twinrun.core.records import SCHEMA_VERSION, EpisodeRecord, JsonlWriter, JudgeRecord, Provenance, SequenceTokens
from twinrun.core.rewards.composite import PositionResult, RewardBreakdown, composite_reward, reverted_calls
from twinrun.core.skills.repository import OpResult, SkillRepo, render_for_prompt
from twinrun.core.envs.task_groups import (  # noqa: F401  (re-exported)
    CurationError,
    TaskGroup,
    TaskGroupSampler,
    rollout_episode_seed,
    stable_int,
)
from twinrun.core.curation.toolcalls import CuratorTurn, parse_curator_turn

if TYPE_CHECKING:  # for the annotation only: the runtime imports this module, not the other way round
    from twinrun.core.curation.runtime import CurationRuntime

# ------------------------------------------------------------------------------------------------------------
# Records


class OpRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    function: str
    skill_name: str | None = None
    ok: bool
    error: str | None = None
    reverted: bool = False  # a valid call the same turn undid (core.rewards.reverted_calls; reward.churn_guard)


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
    skill_relevance: float | None = None  # the episode's (EpisodeRecord.skill_relevance): scripted stand-in only


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
# The session


class CurationSession:
    """One curation rollout, driven turn by turn by a backend.

    Sync:  ``start() -> str``, ``submit(turn) -> str | None``, ``finish() -> CurationResult``
    Async: ``astart``, ``asubmit``, ``afinish`` (awaitable from any event loop).

    ``turn``: the curator's raw assistant text (tool calls parsed by :mod:`twinrun.core.curation.toolcalls`), or tool calls a
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
        return rollout_episode_seed(self.runtime.seed, self.group.group_id, self.rollout_index, position)

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
            from twinrun.core.rewards.judges import JudgeRequest

            for r in results:
                if r.writes_content:
                    # the correctness the curator read here (the judged signal under curation.correctness:
                    # judged), never the environment's label the curator was not shown
                    req = JudgeRequest(skill=r.skill, task=p.episode.task,  # type: ignore[arg-type]
                                       trajectory=p.episode.trajectory_text(), outcome=p.correctness)
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
                              ok=r.ok, error=r.error, reverted=rev)
                     for r, rev in zip(p.op_results, reverted_calls(p.op_results), strict=True)],
                tool_calls=len(p.turn.calls) if p.turn else 0, turn_missing=p.turn_missing,
                no_valid_call=not any(r.ok for r in p.op_results), judged=p.verdicts, episode_shared=p.episode_shared,
                episode_started_at=p.episode.record.started_at,  # type: ignore[union-attr]
                episode_wall_s=p.episode.record.wall_s,  # type: ignore[union-attr]
                skill_relevance=p.episode.record.skill_relevance,  # type: ignore[union-attr]
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
        reverted = reverted_calls(p.op_results)  # counted only under reward.churn_guard
        # one verdict per successful write, in order (_apply), when a judge was asked
        written = [rev for r, rev in zip(p.op_results, reverted) if r.writes_content]
        out.append(PositionResult(
            index=p.index, outcome=p.episode.outcome, calls_total=len(p.op_results),
            calls_valid=sum(1 for r in p.op_results if r.ok), judged=tuple(p.verdicts),
            content_ops=len(written),
            repo_tokens=p.repo_tokens if p.input_tokens else None, curator_input_tokens=p.input_tokens or None,
            calls_reverted=sum(reverted),
            judged_reverted=tuple(written) if any(written) and len(written) == len(p.verdicts) else (),
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
    "CurationSession",
    "PositionRecord",
    "TaskGroup",
    "TaskGroupSampler",
    "stable_int",
]
