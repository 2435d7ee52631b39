"""What the curator sees at a position (its *context shape*), rendered once here for both backends and the sweep.

Two shapes (spec ``curator.context``):

- **per_position** (the paper's Markov curator): position i's prompt is ::

      system
      user chi_j, assistant c_j      for the last k earlier positions j of the same rollout (k = curator.history)
      user chi_i

  and the training row's completion is the curator's turn c_i alone. One row per (rollout, position). History
  turns are prompt-only messages: they are rendered by the chat template before the current input, never
  trained, and never part of a GiGPO anchor. k = 0 (the paper) is ``[system, user chi_i]``.
- **accumulated**: one sequence per rollout, ``[system, user chi_1]`` followed by every turn and tool result
  (chi_{i+1}); the frameworks' tool loops extend it. Its first prompt is :func:`position_messages` with no history.

A history turn is the curator's raw text as the backend decoded it (special tokens skipped; the same text core
parsed for the position's operations). When a window does not fit ``curator.max_prompt_tokens``,
:func:`fit_history` drops the oldest pairs first (the current input is never cut): both backends and the sweep
call it with their tokenizer's length of the rendered prompt, so they keep the same window.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class HistoryTurn:
    """One earlier position of the same rollout (or sweep arm): its curator input and the curator's turn text."""

    curator_input: str
    turn: str


def position_messages(system: str, curator_input: str, history: Sequence[HistoryTurn] = ()) -> Messages:
    """The chat messages of one position (see the module docstring). ``history`` oldest first."""
    messages: Messages = [{"role": "system", "content": system}]
    for h in history:
        messages.append({"role": "user", "content": h.curator_input})
        messages.append({"role": "assistant", "content": h.turn})
    messages.append({"role": "user", "content": curator_input})
    return messages


def history_window(turns: Sequence[HistoryTurn], k: int) -> list[HistoryTurn]:
    """The last ``k`` turns (oldest first); k = 0 gives none."""
    if k < 0:
        raise ValueError(f"curator.history: {k} must be >= 0 (fix: 0 = the paper's Markov curator)")
    return list(turns[len(turns) - k:]) if k else []


def fit_history(system: str, curator_input: str, history: Sequence[HistoryTurn], *,
                measure: Callable[[Messages], int] | None, limit: int | None) -> tuple[Messages, int]:
    """``position_messages`` with the longest suffix of ``history`` whose rendered prompt fits ``limit``.

    measure(messages) -> prompt length in tokens (the backend's tokenizer and chat template). Returns the messages
    and the number of history pairs kept. Without a measure or limit, or with no history, nothing is dropped;
    an input that alone exceeds the limit is kept whole (the frameworks do not cut per_position prompts)."""
    history = list(history)
    if not history or measure is None or limit is None:
        return position_messages(system, curator_input, history), len(history)
    for start in range(len(history) + 1):
        kept = history[start:]
        messages = position_messages(system, curator_input, kept)
        if not kept or measure(messages) <= limit:
            return messages, len(kept)
    raise AssertionError("unreachable")  # pragma: no cover


def session_history(session: Any) -> list[HistoryTurn]:
    """The earlier positions of a curation session that had a turn (oldest first), for its current position.

    A position whose turn was never submitted (``finish()`` played it) has no turn text and is left out."""
    out = []
    for p in session.positions[: max(session.position - 1, 0)]:
        if p.turn is not None and p.curator_input:
            out.append(HistoryTurn(p.curator_input, p.turn.text))
    return out


def session_messages(session: Any, system: str, k: int, *, measure: Callable[[Messages], int] | None = None,
                     limit: int | None = None) -> Messages:
    """The per_position prompt of the session's current position (its input chi_i and a window of k)."""
    p = session.positions[session.position - 1]
    if not 1 <= session.position <= session.size or not p.curator_input:
        raise ValueError(f"session_messages: the session is at position {session.position} of {session.size} "
                         "(fix: start() first; none after the last position)")
    return fit_history(system, p.curator_input, history_window(session_history(session), k),
                       measure=measure, limit=limit)[0]


def prompt_token_ids(tokenizer: Any, messages: Messages, tools: Sequence[dict[str, Any]]) -> list[int]:
    """The prompt token ids of a per_position row: the tokenizer's own chat template (not TRL's training
    variant: a per_position prompt is rendered whole, never extended), the given tools, the generation prompt.
    Both backends and the sweep tokenise with this, so the same messages give the same ids everywhere.
    (Qwen3's own template drops the reasoning of earlier assistant turns, as an inference server would.)"""
    enc = tokenizer.apply_chat_template(messages, tools=list(tools) or None, add_generation_prompt=True,
                                        tokenize=True, return_dict=True)
    return [int(i) for i in enc["input_ids"]]


def input_digest(text: str) -> str:
    """sha256[:16] of a curator input: recorded per position so a trained prompt can be traced to core's input."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ids_digest(ids: Sequence[int]) -> str:
    """sha256[:16] of a token id sequence (training-row records)."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


__all__ = [
    "HistoryTurn",
    "Messages",
    "fit_history",
    "history_window",
    "ids_digest",
    "input_digest",
    "position_messages",
    "prompt_token_ids",
    "session_history",
    "session_messages",
]
