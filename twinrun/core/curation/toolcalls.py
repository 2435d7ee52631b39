"""The curator's tool surface and tool-call parsing, shared by both backends.

The curator has ONE tool, ``curate``: its ``operations`` argument is a list of the paper's three operations,
``{"function": "new_skill_insert" | "skill_update" | "skill_delete", "arguments": {...}}``. One ``curate`` call
is one position's curator turn (DIVERGENCES.md records this choice: the paper lists the three functions as
tools; a single wrapper lets the environment, not the curator, advance the position loop).

Parsing (Qwen3 / Hermes format, as the Qwen3 chat template asks the model to write it)::

    <tool_call>
    {"name": "curate", "arguments": {"operations": [{"function": "skill_delete", "arguments": {...}}]}}
    </tool_call>

Counting for r_fc: every operation is one function call. A ``<tool_call>`` whose JSON does not parse, a call to
an unknown tool, a ``curate`` call without an ``operations`` list and an operation that is not an object with a
string ``function`` each count as ONE invalid call. A direct call of one of the three functions (without the
``curate`` wrapper) is accepted as one operation. ``<tool_call>`` text inside ``<think>...</think>`` is ignored.
An unclosed ``<tool_call>`` at the very end (generation cut by the length limit) is parsed if its JSON is whole.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from twinrun.core.skills.repository import CURATOR_FUNCTIONS

CURATE = "curate"
OPERATION_NAMES = tuple(f["function"]["name"] for f in CURATOR_FUNCTIONS)


def curate_tool_schema() -> dict[str, Any]:
    """The OpenAI-style function schema of the ``curate`` tool (what the chat template lists in <tools>)."""
    variants = []
    for f in CURATOR_FUNCTIONS:
        fn = f["function"]
        variants.append(
            {
                "type": "object",
                "description": fn["description"],
                "properties": {
                    "function": {"type": "string", "enum": [fn["name"]]},
                    "arguments": copy.deepcopy(fn["parameters"]),
                },
                "required": ["function", "arguments"],
            }
        )
    return {
        "type": "function",
        "function": {
            "name": CURATE,
            "description": (
                "Update the skill repository after the task you just saw, then move on to the next task. "
                "`operations` lists zero or more of new_skill_insert, skill_update, skill_delete, applied in "
                "order; an empty list keeps the repository as it is."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "operations": {
                        "type": "array",
                        "description": "Skill operations, each {\"function\": name, \"arguments\": {...}}.",
                        "items": {"anyOf": variants},
                    }
                },
                "required": ["operations"],
            },
        },
    }


CURATE_TOOL: dict[str, Any] = curate_tool_schema()


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call. `error` is set when the call could not be read (then name/arguments may be None)."""

    name: str | None
    arguments: Any
    error: str | None = None


@dataclass(frozen=True)
class Operation:
    """One curator function call. `error` set = invalid before it reached the repo (counts as an invalid call)."""

    function: str
    arguments: Any
    error: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {"function": self.function, "arguments": self.arguments, "error": self.error}


@dataclass(frozen=True)
class CuratorTurn:
    """A curator turn: its text (if any), the tool calls and the operations they carry."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)

    @property
    def has_tool_call(self) -> bool:
        return bool(self.calls)


_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>{json}</tool_call>`` block outside the reasoning, in order."""
    visible = _THINK.sub("", text or "")
    calls: list[ToolCall] = []
    for m in _CALL.finditer(visible):
        raw = m.group(1).strip()
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            calls.append(ToolCall(None, None, f"tool call is not JSON ({e.msg} at char {e.pos})"))
            continue
        calls.append(_as_call(obj))
    return calls


def _as_call(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        return ToolCall(None, None, f"tool call is a JSON {type(obj).__name__}, not an object")
    fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj  # OpenAI {"function": {...}} shape
    name = fn.get("name")
    args = fn.get("arguments", {})
    if isinstance(args, str):  # OpenAI API style: arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(name if isinstance(name, str) else None, None, f"arguments are not JSON ({e.msg})")
    if not isinstance(name, str):
        return ToolCall(None, args, "tool call has no string 'name'")
    return ToolCall(name, args)


def operations_from_calls(calls: Sequence[ToolCall]) -> list[Operation]:
    """Flatten tool calls into curator operations (see the module docstring for what counts as one call)."""
    ops: list[Operation] = []
    for call in calls:
        if call.error:
            ops.append(Operation(call.name or "?", call.arguments, call.error))
        elif call.name == CURATE:
            items = call.arguments.get("operations") if isinstance(call.arguments, dict) else None
            if not isinstance(items, list):
                ops.append(Operation(CURATE, call.arguments, "curate needs an 'operations' list"))
                continue
            for item in items:
                ops.append(_as_operation(item))
        elif call.name in OPERATION_NAMES:
            ops.append(Operation(call.name, call.arguments))
        else:
            ops.append(Operation(call.name or "?", call.arguments, f"unknown tool {call.name!r} (fix: call {CURATE})"))
    return ops


def _as_operation(item: Any) -> Operation:
    if not isinstance(item, dict):
        return Operation("?", item, f"operation is a {type(item).__name__}, not an object")
    name = item.get("function", item.get("name"))
    if not isinstance(name, str):
        return Operation("?", item, "operation has no string 'function'")
    return Operation(name, item.get("arguments", {}))


def parse_curator_turn(turn: str | Sequence[Any] | CuratorTurn) -> CuratorTurn:
    """A curator turn from raw assistant text, or from tool calls a backend already parsed (a list of
    ``{"name", "arguments"}`` dicts, OpenAI ``{"function": {...}}`` dicts, or :class:`ToolCall`)."""
    if isinstance(turn, CuratorTurn):
        return turn
    if isinstance(turn, str):
        calls = parse_tool_calls(turn)
        return CuratorTurn(turn, calls, operations_from_calls(calls))
    calls = [c if isinstance(c, ToolCall) else _as_call(c) for c in turn]
    return CuratorTurn("", calls, operations_from_calls(calls))


def format_curate_call(operations: list[dict[str, Any]]) -> str:
    """The Hermes text of one curate call (for SFT data, tests and scripted curators)."""
    return "<tool_call>\n" + json.dumps({"name": CURATE, "arguments": {"operations": operations}}) + "\n</tool_call>"
