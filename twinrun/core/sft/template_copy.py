"""Template copying: replies whose action is a line of the prompt's action list, copied instead of filled in.

AgentGym's ScienceWorld instruction lists action *templates* (``open/close OBJ``, ``go to LOC``,
``use OBJ [on OBJ]``). A reply that sends one of them literally is rejected by the simulator every time. Two
shares are measured, on teacher data (``twinrun sft-data stats``) and in ``twinrun eval-agent``:

- the **literal share** (the published study's metric): replies whose action is literally one of a configured
  list, by default the study's ``open/close OBJ`` only (:data:`STUDY_LITERAL_COPIES`);
- the **any-template share**: replies whose action is literally *any* templated entry of the action list
  (a placeholder word such as ``OBJ``/``LOC``, an alternative ``a/b`` or an optional ``[...]`` part).

Matching ignores case, repeated spaces and a final period; nothing else (``open/close door`` is not a copy).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The published ScienceWorld SFT study counts "the share of turns that are the literal `open/close ...`".
STUDY_LITERAL_COPIES: tuple[str, ...] = ("open/close OBJ",)

_LISTED_ACTION = re.compile(r'"action"\s*:\s*"([^"]+)"')
_PLACEHOLDER_WORD = re.compile(r"\b[A-Z]{2,}\b")


def prompt_action_list(prompt: str) -> list[str]:
    """The actions a prompt lists as ``{"action": "..."}`` entries (AgentGym's format), in order."""
    return _LISTED_ACTION.findall(prompt)


def is_template(action: str) -> bool:
    """A listed action that is a pattern rather than a command: a placeholder word (OBJ, LOC), an alternative
    (``open/close``) or an optional part (``[on OBJ]``)."""
    return bool(_PLACEHOLDER_WORD.search(action)) or "/" in action or "[" in action


def normalize_action(action: str) -> str:
    return " ".join(action.strip().rstrip(".").lower().split())


def copied_template(action: str | None, templates: Sequence[str]) -> str | None:
    """The template ``action`` copies literally (case and spacing ignored), or None."""
    if action is None:
        return None
    a = normalize_action(action)
    for t in templates:
        if is_template(t) and normalize_action(t) == a:
            return t
    return None


def is_literal_copy(action: str | None, literal: Sequence[str] = STUDY_LITERAL_COPIES) -> bool:
    """Whether ``action`` is literally one of ``literal`` (the configured list; the study's by default)."""
    if action is None:
        return False
    a = normalize_action(action)
    return any(normalize_action(x) == a for x in literal)


def template_copy_counts(actions: Sequence[str | None], templates: Sequence[str]) -> tuple[int, int]:
    """(replies copying any template literally, replies). A reply without a parsable action counts as a reply."""
    return sum(copied_template(a, templates) is not None for a in actions), len(actions)


def literal_copy_counts(actions: Sequence[str | None], literal: Sequence[str] = STUDY_LITERAL_COPIES
                        ) -> tuple[int, int]:
    """(replies whose action is literally one of ``literal``, replies)."""
    return sum(is_literal_copy(a, literal) for a in actions), len(actions)
