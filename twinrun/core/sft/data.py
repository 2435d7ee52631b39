"""Trajectory SFT data: the ReAct conversation format, the gold-path dataset builder and the loss-masked tokens.

Three pieces, all framework-free (a tokenizer is passed in; nothing here imports torch or transformers):

1. **The AgentGym ReAct format** for ScienceWorld: the instruction with the action list as a user turn, a canned
   assistant acknowledgement that is never trained on (``loss: false``), then the task and first observation as a
   user turn and one user turn per later observation; every reply is ``Thought:\\n...\\n\\nAction:\\n<one
   command>`` (the published ScienceWorld SFT study's format).
   The instruction keeps the action list's literal templates (``open/close OBJ``, ``de/activate OBJ``): they are
   what the template-copy metric (:mod:`twinrun.core.sft.agent_eval`) looks for.
2. **The gold-path builder**: plays each training variation with the environment's expert plan and records the
   conversation. A gold path has no reasoning, so its thought is a short template; the record says so with
   ``teacher: "gold-path"``.
3. **Tokens and the loss mask**, the one place both SFT backends get their training sequences from, so TRL and
   verl train on identical token ids and masks. Loss is on each trained assistant reply and its end-of-turn
   token, nothing else: not the role header, not the empty ``<think>`` block that thinking-off inference puts
   in the prompt, not the newline after the end-of-turn token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.records import SCHEMA_VERSION, Provenance
from twinrun.core.sft.trajectories import TrajectoryRecord, Turn, load_trajectories

# ------------------------------------------------------------------------------------------------------------
# 1. The ReAct conversation format

# ScienceWorld's action grammar as AgentGym's prompt lists it. The slash and OBJ/LOC forms are templates, not
# commands: the simulator rejects "open/close OBJ" literally, which is why copying them is measured.
SCIWORLD_ACTIONS: tuple[tuple[str, str], ...] = (
    ("open/close OBJ", "open/close a container"),
    ("de/activate OBJ", "activate/deactivate a device"),
    ("connect OBJ to OBJ", "connect electrical components"),
    ("disconnect OBJ", "disconnect electrical components"),
    ("use OBJ [on OBJ]", "use a device/item"),
    ("look around", "describe the current room"),
    ("look at OBJ", "describe an object in detail"),
    ("look in OBJ", "describe a container's contents"),
    ("read OBJ", "read a note or book"),
    ("move OBJ to OBJ", "move an object to a container"),
    ("pick up OBJ", "move an object to the inventory"),
    ("put down OBJ", "drop an inventory item"),
    ("pour OBJ into OBJ", "pour a liquid into a container"),
    ("dunk OBJ into OBJ", "dunk a container into a liquid"),
    ("mix OBJ", "chemically mix a container"),
    ("go to LOC", "move to a new location"),
    ("eat OBJ", "eat a food"),
    ("flush OBJ", "flush a toilet"),
    ("focus on OBJ", "signal intent on a task object"),
    ("wait", "take no action for 10 iterations"),
    ("wait1", "take no action for 1 iteration"),
    ("task", "describe current task"),
    ("inventory", "list your inventory"),
)


def sciworld_instruction(actions: Sequence[tuple[str, str]] = SCIWORLD_ACTIONS) -> str:
    """The first user turn: role, the action list (as a JSON list, like AgentGym's), the reply format."""
    listing = json.dumps([{"action": a, "description": d} for a, d in actions])
    return (
        "You are an agent in ScienceWorld, a text-based science world. Every round I give you an observation and "
        "you reply with one action that moves you toward finishing the task. Here are the actions you may take: "
        f"{listing}\n"
        f"Reply in this format:\n{render_reply('your reasoning', 'your next action (one command)')}"
    )


REACT_ACK = "OK. I'll follow your instructions and try my best to solve the task."
GOLD_PATH_TEACHER = "gold-path"
GOLD_PATH_THOUGHT = "Following the plan, the next step is to {action}."


def render_reply(thought: str, action: str) -> str:
    """The study's reply format: ``Thought:``, the reasoning on the next line, a blank line, ``Action:``, the one
    command on the next line."""
    return f"Thought:\n{thought}\n\nAction:\n{action}"


_ACTION_RE = re.compile(r"Action\s*:", re.IGNORECASE)


def parse_action(reply: str) -> str | None:
    """The action of a ``Thought:\\n...\\n\\nAction:\\n...`` reply: the first non-empty line after the last
    ``Action:``. A reply without ``Action:`` is taken whole (first line), as AgentGym's client does; an empty
    reply gives None."""
    parts = _ACTION_RE.split(reply)
    tail = parts[-1] if len(parts) > 1 else reply
    for line in tail.strip().splitlines():
        line = line.strip()
        if line:
            return line
    return None


def first_observation_text(task: str, text: str) -> str:
    """AgentGym's first observation turn: the task description, a newline, the opening observation."""
    if not task or text.startswith(task):
        return text
    return f"{task}\n{text}"


def react_turns(
    instruction: str,
    first_observation: str,
    replies: Sequence[str],
    observations: Sequence[str],
    *,
    trained: bool = True,
) -> list[Turn]:
    """Assemble an episode: instruction (user), acknowledgement (assistant, loss false), first observation (user),
    then reply_i (assistant) and observation_i (user) for each step. ``observations[i]`` answers ``replies[i]``;
    a trailing observation after the last reply is dropped (nothing is trained on it)."""
    if len(observations) < len(replies) - 1:
        raise TwinrunError(
            f"react_turns: {len(replies)} replies need at least {len(replies) - 1} observations, got "
            f"{len(observations)} (fix: one observation per step)"
        )
    turns = [
        Turn(role="user", content=instruction),
        Turn(role="assistant", content=REACT_ACK, loss=False),
        Turn(role="user", content=first_observation),
    ]
    for i, reply in enumerate(replies):
        turns.append(Turn(role="assistant", content=reply, loss=None if trained else False))
        if i < len(replies) - 1:
            turns.append(Turn(role="user", content=observations[i]))
    return turns


# ------------------------------------------------------------------------------------------------------------
# 2. The gold-path builder


def gold_path_record(
    env: Any,
    game: Any,
    *,
    instruction: str | None = None,
    thought: str = GOLD_PATH_THOUGHT,
    max_steps: int | None = None,
) -> TrajectoryRecord:
    """Play ``game`` (a ``GameRef``) with the expert plan of ``env`` (a ``TextEnv``) and record it in the ReAct
    format. The expert plan is read once after reset (ScienceWorld's gold sequence); the final score is the
    environment's, as is. Simulator failures raise :class:`InfrastructureError` (the caller skips the game)."""
    instruction = instruction if instruction is not None else sciworld_instruction()
    try:
        obs = env.reset(game)
        plan = list(env.expert_plan())
    except TwinrunError:
        raise
    except Exception as e:  # the JVM / engine failed: not a property of the game
        raise InfrastructureError(f"{getattr(game, 'game_id', game)}: reset failed ({type(e).__name__}: {e})") from e
    if not plan:
        raise TwinrunError(
            f"{getattr(game, 'game_id', game)}: the environment has no expert plan (fix: load games with gold paths)"
        )
    cut = max_steps is not None and len(plan) > max_steps
    if cut:
        plan = plan[:max_steps]
    replies, observations = [], []
    score, won, done = 0.0, False, False
    for action in plan:
        replies.append(render_reply(thought.format(action=action), action))
        try:
            step = env.step(action)
        except Exception as e:
            raise InfrastructureError(
                f"{getattr(game, 'game_id', game)}: step {action!r} failed ({type(e).__name__}: {e})"
            ) from e
        observations.append(step.observation.text)
        score, done, won = float(step.score), step.done, step.won
        if done:
            break
    return TrajectoryRecord(
        id=f"{game.env}/{game.game_id}/{GOLD_PATH_TEACHER}",
        env=game.env,
        task=game.task_name or game.task_type,
        variation=game.variation,
        split=game.split,
        final_score=score,
        success=score >= 100.0 or bool(won),
        teacher=GOLD_PATH_TEACHER,
        turns=react_turns(instruction, first_observation_text(obs.task, obs.text), replies, observations),
        meta={"steps": len(replies), "thought_template": thought, "done": done, "cut_at_max_steps": cut},
    )


@dataclass
class BuildReport:
    written: int = 0
    skipped_existing: int = 0
    dropped_unsuccessful: int = 0
    unmeasured: list[str] = field(default_factory=list)


def build_gold_path_dataset(
    env: Any,
    games: Iterable[Any],
    out_path: str | Path,
    *,
    instruction: str | None = None,
    only_successful: bool = True,
    max_steps: int | None = None,
) -> BuildReport:
    """Write one gold-path record per game to ``out_path`` (JSON lines). Resumes: games whose record is already
    in the file are skipped. A gold path that does not reach score 100 is dropped when ``only_successful``
    (some ScienceWorld gold paths end below 100), unless ``max_steps`` cut it short (then its end is unknown and
    it is kept, marked ``cut_at_max_steps``); a simulator failure is listed as unmeasured, never written."""
    from twinrun.core.records import JsonlWriter

    out = Path(out_path)
    done_ids = {r.id for r in load_trajectories(out)} if out.exists() else set()
    report = BuildReport()
    with JsonlWriter(out) as w:
        for game in games:
            rid = f"{game.env}/{game.game_id}/{GOLD_PATH_TEACHER}"
            if rid in done_ids:
                report.skipped_existing += 1
                continue
            try:
                rec = gold_path_record(env, game, instruction=instruction, max_steps=max_steps)
            except InfrastructureError as e:
                report.unmeasured.append(str(e))
                continue
            if only_successful and not rec.success and not rec.meta.get("cut_at_max_steps"):
                report.dropped_unsuccessful += 1
                continue
            w.write(rec)
            report.written += 1
    return report


# ------------------------------------------------------------------------------------------------------------
# 3. Tokens and the loss mask

_PROBE_USER = {"role": "user", "content": "probe"}


class ChatTurnRenderer:
    """Renders a conversation turn by turn with the tokenizer's own chat template, marking trained text.

    Every assistant reply is placed exactly where thinking-off inference generates it: after the generation
    prompt (the role header and, for Qwen3, the empty ``<think>\\n\\n</think>\\n\\n`` block). The header and
    the think block are prompt (untrained); the reply text and its end-of-turn token are trained when the turn
    is. This is prefix-consistent (each reply's left context is the same kind of prompt the model sees when it
    generates that reply), which rendering the whole conversation at once is not for Qwen3 (its template drops
    the think block of every reply but the last). TRL's own Qwen3 *training* template makes the same choice.
    """

    def __init__(self, tokenizer: Any, *, end_of_turn: str | None = None):
        self.tokenizer = tokenizer
        eot = end_of_turn or getattr(tokenizer, "eos_token", None)
        if not eot:
            raise TwinrunError("tokenizer: no eos_token to end a turn (fix: pass end_of_turn, e.g. '<|im_end|>')")
        self.end_of_turn = eot
        if not getattr(tokenizer, "chat_template", None):
            raise TwinrunError("tokenizer: no chat_template (fix: use a chat model's tokenizer)")
        prompt_only = self._render([_PROBE_USER])
        self.generation_prompt = self._render([_PROBE_USER], add_generation_prompt=True)
        if not self.generation_prompt.startswith(prompt_only):
            raise TwinrunError("tokenizer: chat template's generation prompt does not extend the conversation "
                               "(fix: use a template whose add_generation_prompt appends the assistant header)")
        self.assistant_header = self.generation_prompt[len(prompt_only):]

    def _render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, enable_thinking=False
        )

    def segments(self, turns: Sequence[Turn]) -> list[tuple[str, bool]]:
        """The conversation as ``(text, trained)`` pieces whose concatenation is the training text."""
        out: list[tuple[str, bool]] = []
        run: list[dict[str, Any]] = []
        for i, turn in enumerate(turns):
            if turn.role != "assistant":
                run.append(turn.chat_message())
                continue
            if run:
                out.append((self._render(run), False))
                run = []
            full = self._render([_PROBE_USER, turn.chat_message()])
            if not full.startswith(self.generation_prompt):
                raise TwinrunError(
                    f"turns[{i}]: the chat template renders this reply without the thinking-off generation prompt "
                    f"{self.generation_prompt[-30:]!r} (fix: a ChatML-style template such as Qwen3's)"
                )
            body = full[len(self.generation_prompt):]
            k = body.find(self.end_of_turn)
            if k < 0:
                raise TwinrunError(
                    f"turns[{i}]: the rendered reply has no end-of-turn token {self.end_of_turn!r} "
                    "(fix: pass the template's end-of-turn token as end_of_turn)"
                )
            k += len(self.end_of_turn)
            out.append((self.assistant_header, False))
            out.append((body[:k], turn.trained))
            if body[k:]:
                out.append((body[k:], False))
        if run:
            out.append((self._render(run), False))
        return out

    def text(self, turns: Sequence[Turn]) -> str:
        return "".join(t for t, _ in self.segments(turns))


@dataclass(frozen=True)
class TokenizedExample:
    """One training sequence. ``loss_mask[t] == 1``: token t is a label (trained); same length as input_ids."""

    id: str
    input_ids: list[int]
    loss_mask: list[int]
    truncated: bool

    @property
    def tokens(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def tokenize_record(record: TrajectoryRecord, renderer: ChatTurnRenderer, max_length: int) -> TokenizedExample:
    """Tokenize piece by piece (so a mask boundary never falls inside a token) and keep the first ``max_length``
    tokens (later turns of a long episode are cut, as TRL's ``keep_start`` and verl's right truncation do)."""
    ids: list[int] = []
    mask: list[int] = []
    for text, trained in renderer.segments(record.turns):
        piece = renderer.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        mask.extend([1 if trained else 0] * len(piece))
    truncated = len(ids) > max_length
    return TokenizedExample(record.id, ids[:max_length], mask[:max_length], truncated)


@dataclass
class SFTDataset:
    """Tokenized examples in training order (the spec seed's permutation), plus what was dropped and why."""

    examples: list[TokenizedExample]
    truncated: int
    dropped_no_loss: list[str]
    seed: int

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.examples]


def build_sft_dataset(
    records: Sequence[TrajectoryRecord], tokenizer: Any, *, max_length: int, seed: int
) -> SFTDataset:
    """Tokenize every record, drop those left without a trained token (e.g. truncation cut every reply), and
    permute with ``seed``. Both backends then read the examples in this order (see twinrun.backends.sft_plan)."""
    import numpy as np

    if not records:
        raise TwinrunError("sft.data: no trajectories (fix: build or point at a non-empty trajectory file)")
    renderer = ChatTurnRenderer(tokenizer)
    kept, dropped, truncated = [], [], 0
    for r in records:
        ex = tokenize_record(r, renderer, max_length)
        if ex.trained_tokens == 0:
            dropped.append(r.id)
            continue
        truncated += ex.truncated
        kept.append(ex)
    if not kept:
        raise TwinrunError(
            f"sft.max_length: {max_length} leaves no trained token in any of {len(records)} episodes "
            "(fix: raise sft.max_length)"
        )
    order = np.random.default_rng(seed).permutation(len(kept))
    return SFTDataset([kept[i] for i in order], truncated, dropped, seed)


def decode_trained(tokenizer: Any, example: TokenizedExample) -> list[str]:
    """The trained spans of an example, decoded: one string per run of consecutive trained tokens. Tests and
    ``sft --plan`` use it to show exactly what the loss sees."""
    spans, cur = [], []
    for tok, m in zip(example.input_ids, example.loss_mask, strict=True):
        if m:
            cur.append(tok)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    return [tokenizer.decode(s, skip_special_tokens=False) for s in spans]



# ------------------------------------------------------------------------------------------------------------
# The neutral per-step record both SFT backends write (metrics.jsonl)


class SFTStepMetrics(BaseModel):
    """One SFT optimizer step, the same schema for every backend. ``lr`` is the rate after the step's
    scheduler update (what both TRL and verl log); ``tokens``/``trained_tokens`` are what the backend realised."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["sft_step"] = "sft_step"
    step: int
    epoch: int
    backend: str
    loss: float | None
    lr: float | None
    grad_norm: float | None = None
    sequences: int | None = None
    tokens: int | None = None
    trained_tokens: int | None = None
    example_ids: list[str] | None = None
    wall_s: float | None = None
    provenance: Provenance
