"""Trajectory records: one row per episode, the unit of trajectory SFT and of agent evaluation.

A row holds the episode's conversation as ``turns: [{role, content, loss}]`` plus the episode fields (env, task,
variation, split, final score, success, teacher, skill condition). ``loss`` says whether a turn is trained on:
``true`` / ``false`` explicitly, ``null`` = the role's default (assistant turns are trained, nothing else is).
That three-state flag is what the common chat datasets carry (AgentGym's ``conversations`` rows mark the canned
acknowledgement ``loss: false`` and the human turns ``loss: null``), so loading one never loses the intent.

Loaders accept the two common chat formats besides the native one:
- ``messages``: ``[{role, content, tool_calls?, loss?}]`` (OpenAI / TRL conversational);
- ``conversations``: ``[{from, value, loss?}]`` (ShareGPT / AgentGym; ``human``/``gpt``/``system``/...).
A file is JSON lines (one row each) or one JSON list; each row's format is detected by its key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from twinrun.core.errors import TwinrunError
from twinrun.core.records import SCHEMA_VERSION, JsonlWriter, read_jsonl

Role = Literal["system", "user", "assistant", "tool"]
SkillCondition = Literal["with", "without"]

# ShareGPT / AgentGym speaker names -> chat roles.
_FROM_TO_ROLE: dict[str, Role] = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}

# Row keys that are episode fields (anything else goes to `meta`), with their accepted aliases.
_EPISODE_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "item_id", "episode_id"),
    "env": ("env", "environment"),
    "task": ("task", "task_name", "taskName"),
    "variation": ("variation", "variation_idx", "variationIdx"),
    "split": ("split",),
    "final_score": ("final_score", "score", "reward"),
    "success": ("success",),
    "teacher": ("teacher",),
    "skill_condition": ("skill_condition",),
}


class TrajectoryError(TwinrunError, ValueError):
    """A trajectory row or file that cannot be used (one line: where, what, fix)."""


class Turn(BaseModel):
    """One chat turn. ``loss=None`` means the role's default (see :meth:`trained`)."""

    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str
    loss: bool | None = None
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def trained(self) -> bool:
        """Whether SFT puts loss on this turn: the explicit flag, else only assistant turns."""
        return self.loss if self.loss is not None else self.role == "assistant"

    def chat_message(self) -> dict[str, Any]:
        """The turn as a chat-template message (no `loss`: templates do not know it)."""
        msg: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg

    @model_validator(mode="after")
    def _trained_needs_assistant(self) -> Turn:
        if self.loss and self.role != "assistant":
            # Training on a user/tool turn would teach the model to write the environment's text.
            raise ValueError(f"loss: true on a {self.role} turn (fix: only assistant turns can carry loss: true)")
        return self


class TrajectoryRecord(BaseModel):
    """One episode: its conversation and where it came from."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["trajectory"] = "trajectory"
    id: str
    env: str
    task: str
    variation: int | None = None
    split: str | None = None
    final_score: float | None = Field(None, description="the environment's final score, as is (negative allowed)")
    success: bool | None = None
    teacher: str | None = Field(None, description="who wrote the assistant turns, e.g. 'gold-path' or a model id")
    skill_condition: SkillCondition | None = None
    turns: list[Turn]
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def trained_turns(self) -> int:
        return sum(t.trained for t in self.turns)

    def chat_messages(self) -> list[dict[str, Any]]:
        return [t.chat_message() for t in self.turns]


# ------------------------------------------------------------------------------------------------------------
# Loaders


def _episode_fields(row: Mapping[str, Any], skip: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    fields: dict[str, Any] = {}
    used: set[str] = set(skip)
    for name, aliases in _EPISODE_ALIASES.items():
        for alias in aliases:
            if alias in row and row[alias] is not None:
                fields[name] = row[alias]
                used.add(alias)
                break
    meta = {k: v for k, v in row.items() if k not in used and k not in _all_aliases()}
    if isinstance(row.get("meta"), dict):
        meta.pop("meta", None)
        meta = {**row["meta"], **meta}
    return fields, meta


def _all_aliases() -> set[str]:
    return {a for aliases in _EPISODE_ALIASES.values() for a in aliases}


def _turns_from_messages(messages: Any, where: str) -> list[Turn]:
    if not isinstance(messages, list):
        raise TrajectoryError(f"{where}.messages: a {type(messages).__name__}, not a list (fix: a list of turns)")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise TrajectoryError(f"{where}.messages[{i}]: {m!r:.60} has no 'role' (fix: {{role, content}} objects)")
        content = m.get("content")
        if content is None:
            content = ""  # an assistant turn with only tool_calls
        if not isinstance(content, str):
            raise TrajectoryError(
                f"{where}.messages[{i}].content: a {type(content).__name__} (fix: plain text; multimodal parts are "
                "not supported)"
            )
        turns.append(_turn(where, f"messages[{i}]", role=m["role"], content=content, loss=m.get("loss"),
                           tool_calls=m.get("tool_calls")))
    return turns


def _turns_from_conversations(conversations: Any, where: str) -> list[Turn]:
    if not isinstance(conversations, list):
        raise TrajectoryError(
            f"{where}.conversations: a {type(conversations).__name__}, not a list (fix: a list of turns)"
        )
    turns = []
    for i, c in enumerate(conversations):
        if not isinstance(c, Mapping) or "from" not in c or "value" not in c:
            raise TrajectoryError(
                f"{where}.conversations[{i}]: {c!r:.60} lacks 'from'/'value' (fix: {{from, value, loss}} objects)"
            )
        speaker = str(c["from"])
        role = _FROM_TO_ROLE.get(speaker)
        if role is None:
            raise TrajectoryError(
                f"{where}.conversations[{i}].from: {speaker!r} is not a known speaker "
                f"(fix: one of {', '.join(sorted(_FROM_TO_ROLE))})"
            )
        turns.append(_turn(where, f"conversations[{i}]", role=role, content=str(c["value"]), loss=c.get("loss")))
    return turns


def _turn(where: str, field: str, **kw: Any) -> Turn:
    try:
        return Turn(**kw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        raise TrajectoryError(f"{where}.{field}{'.' + loc if loc else ''}: {msg}") from None


def record_from_row(row: Mapping[str, Any], *, where: str = "row", defaults: Mapping[str, Any] | None = None
                    ) -> TrajectoryRecord:
    """Build a record from a native (``turns``), ``messages`` or ``conversations`` row.

    ``defaults`` fill episode fields the row lacks (e.g. ``env``/``task`` for a dataset that has none);
    a row without an id gets ``where`` as its id.
    """
    if not isinstance(row, Mapping):
        raise TrajectoryError(f"{where}: a {type(row).__name__}, not an object (fix: one JSON object per episode)")
    if "turns" in row:
        fields, meta = _episode_fields(row, {"turns", "schema_version", "kind"})
        turns = [_turn(where, f"turns[{i}]", **t) if isinstance(t, Mapping) else t for i, t in enumerate(row["turns"])]
    elif "messages" in row:
        fields, meta = _episode_fields(row, {"messages"})
        turns = _turns_from_messages(row["messages"], where)
    elif "conversations" in row:
        fields, meta = _episode_fields(row, {"conversations"})
        turns = _turns_from_conversations(row["conversations"], where)
    else:
        keys = ", ".join(sorted(map(str, row))[:6])
        raise TrajectoryError(
            f"{where}: no 'turns', 'messages' or 'conversations' key (has: {keys}; fix: use one of the three formats)"
        )
    merged = {**(defaults or {}), **fields}
    merged.setdefault("id", where)
    for required in ("env", "task"):
        if required not in merged:
            raise TrajectoryError(
                f"{where}.{required}: missing (fix: add '{required}' to the row or pass it as a loader default)"
            )
    try:
        return TrajectoryRecord(**{k: v for k, v in merged.items()}, turns=turns, meta=meta)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise TrajectoryError(f"{where}.{loc}: {err.get('input')!r:.60} {err['msg']}") from None


def load_trajectories(path: str | Path, *, defaults: Mapping[str, Any] | None = None) -> list[TrajectoryRecord]:
    """Read a ``.jsonl`` (one row per line) or ``.json`` (a list of rows) file of episodes in any of the formats."""
    p = Path(path)
    if not p.is_file():
        raise TrajectoryError(f"trajectories: {str(p)!r} is not a file (fix: point at a .jsonl or .json file)")
    if p.suffix == ".json":
        try:
            rows = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise TrajectoryError(f"{p}: not JSON ({e.msg} at line {e.lineno}; fix: repair the file)") from None
        if not isinstance(rows, list):
            raise TrajectoryError(f"{p}: a JSON {type(rows).__name__}, not a list (fix: a list of episode objects)")
        return [record_from_row(r, where=f"{p.name}[{i}]", defaults=defaults) for i, r in enumerate(rows)]
    return [
        record_from_row(r, where=f"{p.name}:{i}", defaults=defaults)
        for i, r in enumerate(read_jsonl(p, strict=True), 1)
    ]


def write_trajectories(path: str | Path, records: Iterable[TrajectoryRecord]) -> int:
    """Append records to a JSON-lines file (crash-safe; see records.JsonlWriter). Returns how many were written."""
    n = 0
    with JsonlWriter(path) as w:
        for r in records:
            w.write(r)
            n += 1
    return n
