"""One ScienceWorld episode in the AgentGym conversation format, played by one model or stitched from several.

The conversation: the instruction (user), the canned acknowledgement (assistant), the task and first
observation (user), then one reply (assistant) and one observation (user) per round; the whole conversation is
the context of every reply. The action after ``Action:`` goes to the simulator as is (an unparsable reply sends
its first line).

A *stitched* episode hands the same running episode from one model to the next (ROSE: the student plays a
prefix, the teacher continues from the student's own state): :func:`play_stitched_episode` takes segments
``(author, generate, rounds)`` and records who wrote each reply.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinrun.core.errors import InfrastructureError
from twinrun.core.records import Outcome
from twinrun.core.sft.data import REACT_ACK, first_observation_text, parse_action
from twinrun.core.sft.trajectories import SkillCondition, TrajectoryRecord, Turn

SUCCESS_SCORE = 100.0

GenerateFn = Callable[[list[dict[str, Any]], int], str]


class ContextFull(Exception):
    """The conversation no longer fits the model's context: the model's turn ends there (measured, as AgentGym
    does), it is not an infrastructure failure."""


@dataclass
class EpisodeResult:
    outcome: Outcome
    final_score: float | None
    rounds: int
    replies: list[str]
    actions: list[str | None]
    observations: list[str]
    first_observation: str
    instruction: str = ""
    unmeasured_reason: str | None = None
    wall_s: float = 0.0
    stopped: str = "done"  # "done" (the simulator ended it), "rounds" (max_rounds) or "context" (ContextFull)
    authors: list[str] = field(default_factory=list)  # who wrote each reply (one name per reply)


@dataclass(frozen=True)
class Segment:
    """``rounds`` replies by ``author`` (a name recorded per reply) generated with ``generate``."""

    author: str
    generate: GenerateFn
    rounds: int


def play_react_episode(env: Any, game: Any, generate: GenerateFn, *, instruction: str | Callable[[Any], str],
                       max_rounds: int, seed: int) -> EpisodeResult:
    """Play one game with one model. ``generate(messages, seed) -> reply``.

    ``instruction`` is the first user turn, or a function of the reset observation that returns it (the
    with-skill condition retrieves skills by the task description, known only after reset). Ends when the
    simulator says done, after ``max_rounds`` replies, or when the model's context is full."""
    return play_stitched_episode(env, game, [Segment("model", generate, max_rounds)], instruction=instruction,
                                 seed=seed)


def play_stitched_episode(env: Any, game: Any, segments: Sequence[Segment], *,
                          instruction: str | Callable[[Any], str], seed: int) -> EpisodeResult:
    """Play one game, segment after segment, in one running episode: each segment's model replies to the whole
    conversation so far (including the earlier segments' replies). The sampling seed of round r is
    ``seed + r`` whoever writes it. A model whose context is full ends its own segment (the next continues);
    the simulator ending the episode ends everything. An infrastructure failure makes the episode unmeasured."""
    t0 = time.monotonic()
    replies: list[str] = []
    actions: list[str | None] = []
    observations: list[str] = []
    authors: list[str] = []
    first = ""
    score: float | None = None
    stopped = "rounds"
    try:
        obs = env.reset(game)
        if callable(instruction):
            instruction = instruction(obs)
        first = first_observation_text(obs.task, obs.text)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": instruction},
            {"role": "assistant", "content": REACT_ACK},
            {"role": "user", "content": first},
        ]
        score = 0.0
        done = False
        for seg in segments:
            if done:
                break
            stopped = "rounds"
            for _ in range(seg.rounds):
                try:
                    reply = seg.generate(messages, seed + len(replies))
                except ContextFull:
                    stopped = "context"
                    break
                action = parse_action(reply)
                replies.append(reply)
                actions.append(action)
                authors.append(seg.author)
                step = env.step(action if action is not None else (reply.strip().splitlines() or [""])[0])
                observations.append(step.observation.text)
                score = float(step.score)
                messages.append({"role": "assistant", "content": reply})
                if step.done:
                    stopped, done = "done", True
                    break
                messages.append({"role": "user", "content": step.observation.text})
    except InfrastructureError as e:
        return EpisodeResult("unmeasured", None, len(replies), replies, actions, observations, first,
                             instruction if isinstance(instruction, str) else "",
                             unmeasured_reason=str(e)[:500], wall_s=time.monotonic() - t0, authors=authors)
    outcome: Outcome = "success" if score is not None and score >= SUCCESS_SCORE else "failure"
    return EpisodeResult(outcome, score, len(replies), replies, actions, observations, first, instruction,
                         wall_s=time.monotonic() - t0, stopped=stopped, authors=authors)


def episode_trajectory(result: EpisodeResult, *, record_id: str, game: Any, instruction: str, teacher: str,
                       skill_condition: SkillCondition | None, trained_authors: Sequence[str] | None = None,
                       meta: dict[str, Any] | None = None) -> TrajectoryRecord:
    """The played episode as a trajectory record (reusable as SFT data). ``trained_authors``: only replies by
    these authors carry loss (None: every reply); the others stay in the context with ``loss: false``."""
    turns = [Turn(role="user", content=instruction), Turn(role="assistant", content=REACT_ACK, loss=False),
             Turn(role="user", content=result.first_observation)]
    for i, reply in enumerate(result.replies):
        author = result.authors[i] if i < len(result.authors) else None
        trained = trained_authors is None or author in trained_authors
        turns.append(Turn(role="assistant", content=reply, loss=None if trained else False))
        if i < len(result.replies) - 1 and i < len(result.observations):
            turns.append(Turn(role="user", content=result.observations[i]))
    return TrajectoryRecord(
        id=record_id, env=game.env, task=game.task_name or game.task_type, variation=game.variation,
        split=game.split, final_score=result.final_score,
        success=None if result.outcome == "unmeasured" else result.outcome == "success",
        teacher=teacher, skill_condition=skill_condition, turns=turns,
        meta={"outcome": result.outcome, "unmeasured_reason": result.unmeasured_reason, "stopped": result.stopped,
              **({"authors": result.authors} if trained_authors is not None else {}), **(meta or {})},
    )


def skills_instruction(base: str, skills_text: str) -> str:
    """The instruction turn with retrieved skills appended (the with-skill condition)."""
    return f"{base}\n\nSkills that may help with this task:\n{skills_text}"
