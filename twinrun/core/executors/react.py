"""The executor's ReAct loop (the paper's ALFWorld setting, after GiGPO / verl-agent):

- every turn the executor gets ONE fresh prompt: task, retrieved skills, the last `history` (observation, action)
  pairs, the current observation and the admissible actions (nothing else of the past);
- it answers ``<think>...</think><action>...</action>``; the action is the text inside the last
  ``<action>...</action>`` (lower-cased, stripped);
- an answer without an action tag is a *format-invalid* turn: like verl-agent, the environment still receives
  the tail of the text (its last 30 characters) and the turn counts; an action the engine does not list as
  admissible is an *invalid action*; both are counted in ``invalid_actions``;
- at most `max_turns` turns; the episode is a success iff the engine reports a win.

A policy failure (endpoint down after retries, timeout) or an engine crash raises
:class:`~twinrun.core.errors.InfrastructureError`; the episode is then ``unmeasured`` with the reason and no
action is substituted. Prompt text comes from files (:class:`PromptTemplate`), so the paper's exact prompts can
be dropped in.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from twinrun.core.envs.base import GameRef, Observation, Step
from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.records import EpisodeRecord, SamplingRecord

# ------------------------------------------------------------------------------------------------------------
# Prompt templates

_DOC_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*\n?", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class PromptError(TwinrunError, ValueError):
    """A prompt template that cannot be used."""


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt file with ``{placeholder}`` fields.

    A leading HTML comment (``<!-- ... -->``) documents the placeholders and is stripped. Only *known*
    placeholders (the keyword arguments of :meth:`render`) are replaced, so literal braces (JSON examples) need no
    escaping. `required` placeholders must appear in the text, or the template is refused at load time."""

    text: str
    name: str = "prompt"

    @classmethod
    def from_text(cls, text: str, name: str = "prompt", required: tuple[str, ...] = ()) -> PromptTemplate:
        body = _DOC_COMMENT.sub("", text, count=1)
        t = cls(body, name)
        missing = [r for r in required if r not in t.placeholders]
        if missing:
            raise PromptError(
                f"prompts.{name}: placeholder {{{missing[0]}}} is missing (fix: add it; the file's header lists them)"
            )
        return t

    @classmethod
    def from_file(cls, path: str | Path, name: str = "prompt", required: tuple[str, ...] = ()) -> PromptTemplate:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise PromptError(f"prompts.{name}: {str(path)!r} cannot be read ({e.strerror}; fix: name a prompt file)") from None
        return cls.from_text(text, name, required)

    @property
    def placeholders(self) -> set[str]:
        return set(_PLACEHOLDER.findall(self.text))

    def render(self, **values: Any) -> str:
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), self.text)


EXECUTOR_INPUT_FIELDS = (
    "environment", "task", "skills", "step_count", "history_length", "history", "current_step", "observation",
    "admissible_actions",
)


@dataclass(frozen=True)
class ExecutorPrompts:
    """The executor's system prompt (may be empty: no system message) and per-turn input template."""

    system: PromptTemplate
    input: PromptTemplate

    @classmethod
    def from_files(cls, system: str | Path, input: str | Path) -> ExecutorPrompts:  # noqa: A002
        return cls(
            PromptTemplate.from_file(system, "executor_system"),
            PromptTemplate.from_file(input, "executor_input", required=("observation",)),
        )

    def fingerprint(self) -> str:
        return self.system.text + "\x00" + self.input.text


ENVIRONMENT_TITLES = {"alfworld": "ALFRED Embodied Environment", "sciworld": "ScienceWorld", "null_env": "Null Environment"}


# ------------------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class ParsedAction:
    action: str  # what the environment receives
    valid_format: bool  # an <action>...</action> was found
    thought: str = ""


_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)


def parse_action(text: str) -> ParsedAction:
    """The action inside the last ``<action>...</action>`` after any ``</think>`` (so an action quoted in the
    reasoning is not taken). Without one: format-invalid, and the env gets the last 30 characters (verl-agent)."""
    text = text or ""
    think = _THINK.search(text)
    thought = think.group(1).strip() if think else ""
    tail = text[text.lower().rfind("</think>") + len("</think>"):] if "</think>" in text.lower() else text
    found = _ACTION.findall(tail)
    if found:
        return ParsedAction(found[-1].strip().lower(), True, thought)
    return ParsedAction(text.strip().lower()[-30:], False, thought)


# ------------------------------------------------------------------------------------------------------------
# Episode state


@dataclass
class Turn:
    observation: str  # what the executor saw before acting
    response: str  # the policy's raw text
    action: str  # what the env received
    valid_format: bool
    admissible: bool
    thought: str = ""


@dataclass
class Episode:
    """One played game: the neutral record plus what the curator input needs."""

    record: EpisodeRecord
    game: GameRef
    task: str
    initial_observation: str
    turns: list[Turn] = field(default_factory=list)
    final_observation: str = ""
    seed: int | None = None

    @property
    def outcome(self) -> str:
        return self.record.outcome

    def trajectory_text(self, *, include_thoughts: bool = False) -> str:
        """The trajectory as the curator reads it: observations and actions, in order."""
        lines = [f"Observation 0: {self.initial_observation}"]
        for i, t in enumerate(self.turns, 1):
            if include_thoughts and t.thought:
                lines.append(f"Thought {i}: {t.thought}")
            flag = "" if (t.valid_format and t.admissible) else " (invalid)"
            lines.append(f"Action {i}: {t.action}{flag}")
            nxt = self.turns[i].observation if i < len(self.turns) else self.final_observation
            lines.append(f"Observation {i}: {nxt}")
        return "\n".join(lines)


@dataclass(frozen=True)
class TurnView:
    """What a policy may look at besides the prompt (the scripted policy uses admissible/expert/rng)."""

    step: int  # 0-based turn index
    observation: Observation
    expert_plan: list[str] | None
    rng: random.Random
    seed: int
    task_type: str | None = None  # the game's type (the scripted policy's skill_effect rule reads it)
    skills_text: str = ""  # the retrieved skills as the prompt shows them


class Policy(Protocol):
    """Maps a turn's chat messages to the executor's text. Raises InfrastructureError when it cannot answer."""

    name: str
    needs_expert: bool

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str: ...


class AsyncEnv(Protocol):
    async def areset(self, game: GameRef, seed: int | None = None) -> Observation: ...

    async def astep(self, action: str) -> Step: ...

    async def aexpert_plan(self) -> list[str]: ...


def _skill_relevance_of(policy: Policy, skills_text: str, task_type: str | None) -> float | None:
    """What a skill-sensitive stand-in read from the retrieved skills (``skill_relevance``), else None."""
    fn = getattr(policy, "skill_relevance", None)
    return None if fn is None else fn(skills_text, task_type)


def _sampling_of(policy: Policy) -> SamplingRecord | None:
    """The decoding every call of the episode carried, and what the server applied (policies that decode)."""
    record = getattr(policy, "sampling_record", None)
    return record() if record is not None else None


def format_history(pairs: list[tuple[str, str]], start_index: int) -> str:
    """``[Observation k: '...', Action k: '...']`` lines for the kept (observation, action) pairs."""
    return "\n".join(
        f"[Observation {start_index + j}: '{obs}', Action {start_index + j}: '{act}']" for j, (obs, act) in enumerate(pairs)
    )


def build_messages(
    prompts: ExecutorPrompts,
    *,
    environment: str,
    task: str,
    skills_text: str,
    history_pairs: list[tuple[str, str]],
    history_window: int,
    step: int,
    observation: Observation,
) -> list[dict[str, str]]:
    kept = history_pairs[-history_window:] if history_window > 0 else []
    values = dict(
        environment=ENVIRONMENT_TITLES.get(environment, environment),
        task=task,
        skills=skills_text or "(none)",
        step_count=step,
        history_length=len(kept),
        history=format_history(kept, step - len(kept) + 1) if kept else "(none)",
        current_step=step + 1,
        observation=observation.text,
        admissible_actions=", ".join(f"'{a}'" for a in observation.admissible_actions),
    )
    messages = []
    system = prompts.system.render(**values).strip()
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompts.input.render(**values).strip()})
    return messages


async def play_episode(
    env: AsyncEnv,
    game: GameRef,
    policy: Policy,
    prompts: ExecutorPrompts,
    *,
    max_turns: int,
    history: int,
    skills_text: str = "",
    skill_names: list[str] | None = None,
    retrieve: Any = None,
    seed: int = 0,
    position: int | None = None,
    settings_hash: str | None = None,
) -> Episode:
    """Play one game to a win or `max_turns`. Never raises for infrastructure: returns an `unmeasured` episode.

    retrieve: optional ``task text -> (skills_text, skill_names)``, called once after reset (the task sentence is
    known only then); it replaces `skills_text`/`skill_names`."""
    t0 = time.perf_counter()
    started_at = time.time()  # wall clock: intervals of episodes of other processes line up (episodes in flight)
    rng = random.Random(seed)
    turns: list[Turn] = []
    pairs: list[tuple[str, str]] = []
    state = {"calls": 0, "invalid": 0, "score": 0.0, "won": False, "task": "", "first": "", "last": ""}

    def finish(outcome: str, reason: str | None = None) -> Episode:
        record = EpisodeRecord(
            game_id=game.game_id,
            task_type=game.task_type,
            position=position,
            outcome=outcome,  # type: ignore[arg-type]
            unmeasured_reason=reason,
            score=None if outcome == "unmeasured" else float(state["score"]),
            steps=len(turns),
            executor_calls=int(state["calls"]),
            invalid_actions=int(state["invalid"]),
            retrieved_skills=list(skill_names or []),
            wall_s=round(time.perf_counter() - t0, 6),
            started_at=round(started_at, 6),
            executor_settings_hash=settings_hash,
            sampling=_sampling_of(policy) if state["calls"] else None,
            skill_relevance=_skill_relevance_of(policy, skills_text, game.task_type) if state["task"] else None,
        )
        return Episode(
            record=record, game=game, task=str(state["task"]), initial_observation=str(state["first"]), turns=turns,
            final_observation=str(state["last"]), seed=seed,
        )

    try:
        obs = await env.areset(game, seed)
    except InfrastructureError as e:
        return finish("unmeasured", f"env reset: {e}")
    state["task"], state["first"], state["last"] = obs.task, obs.text, obs.text
    if retrieve is not None:
        skills_text, skill_names = retrieve(obs.task)
    for step in range(max_turns):
        try:
            plan = await env.aexpert_plan() if policy.needs_expert else None
            messages = build_messages(
                prompts, environment=game.env, task=obs.task, skills_text=skills_text, history_pairs=pairs,
                history_window=history, step=step, observation=obs,
            )
            state["calls"] += 1
            text = await policy.act(messages, TurnView(step, obs, plan, rng, seed, game.task_type, skills_text))
        except InfrastructureError as e:
            return finish("unmeasured", f"executor call {state['calls']}: {e}")
        parsed = parse_action(text)
        admissible = (not obs.admissible_actions) or parsed.action in obs.admissible_actions
        if not (parsed.valid_format and admissible):
            state["invalid"] += 1
        turns.append(Turn(obs.text, text, parsed.action, parsed.valid_format, admissible, parsed.thought))
        pairs.append((obs.text, parsed.action))
        try:
            result = await env.astep(parsed.action)
        except InfrastructureError as e:
            return finish("unmeasured", f"env step {step + 1}: {e}")
        obs = result.observation
        state["last"], state["score"], state["won"] = obs.text, result.score, result.won
        if result.done or result.won:
            break
    return finish("success" if state["won"] else "failure")
