"""Data-level statistics of an SFT trajectory file (`twinrun sft-data stats FILE`).

The published Qwen3-1.7B ScienceWorld study describes its teacher set as 2,059 episodes, teacher success
41.96%, 46,035 supervised turns, and 29.89% of turns the literal ``open/close OBJ`` (:data:`STUDY_DATA_LINE`);
:func:`trajectory_stats` computes the same four numbers from a file, so the line can be checked on real data:

- **episodes**: records in the file; **teacher success**: successes over the records whose outcome is known;
- **supervised turns**: turns that carry loss (assistant replies, minus ``loss: false`` ones such as the
  canned acknowledgement and, in ROSE data, the student's prefix);
- **literal template-copy share**: supervised turns whose action is literally one of the configured list
  (default ``open/close OBJ``), over supervised turns; beside it the **any-template share** (any templated
  entry of the record's own action list) and the share of replies the simulator rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twinrun.core.sft.data import SCIWORLD_ACTIONS, parse_action
from twinrun.core.sft.template_copy import (
    STUDY_LITERAL_COPIES,
    copied_template,
    is_literal_copy,
    prompt_action_list,
)
from twinrun.core.sft.trajectories import TrajectoryRecord

STUDY_DATA_LINE = {"episodes": 2059, "teacher_success": 0.4196, "supervised_turns": 46035, "literal_share": 0.2989}
_REJECTED = "no known action matches"


def trajectory_stats(records: Sequence[TrajectoryRecord], literal: Sequence[str] = STUDY_LITERAL_COPIES
                     ) -> dict[str, Any]:
    """The file's numbers (see the module docstring). Pure: reads the records, nothing else."""
    default_templates = [a for a, _ in SCIWORLD_ACTIONS]
    episodes = len(records)
    known = [r for r in records if r.success is not None]
    successes = sum(bool(r.success) for r in known)
    supervised = literal_n = template_n = rejected = answered = 0
    teachers: dict[str, int] = {}
    for r in records:
        teachers[r.teacher or "?"] = teachers.get(r.teacher or "?", 0) + 1
        listed = prompt_action_list(r.turns[0].content) if r.turns else []
        templates = listed or default_templates
        for i, turn in enumerate(r.turns):
            if turn.role != "assistant" or not turn.trained:
                continue
            supervised += 1
            action = parse_action(turn.content)
            literal_n += is_literal_copy(action, literal)
            template_n += copied_template(action, templates) is not None
            nxt = r.turns[i + 1] if i + 1 < len(r.turns) else None
            if nxt is not None and nxt.role == "user":  # the last reply's observation is not in the record
                answered += 1
                rejected += nxt.content.strip().lower().startswith(_REJECTED)

    def share(a: int, b: int) -> float | None:
        return a / b if b else None

    return {
        "episodes": episodes,
        "outcome_known": len(known),
        "successes": successes,
        "teacher_success": share(successes, len(known)),
        "supervised_turns": supervised,
        "turns_per_episode": share(supervised, episodes),
        "literal_copies": literal_n,
        "literal_share": share(literal_n, supervised),
        "literal_list": list(literal),
        "template_copies": template_n,
        "template_share": share(template_n, supervised),
        "rejected_share": share(rejected, answered),
        "teachers": teachers,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def render_stats(stats: dict[str, Any], *, path: str | None = None) -> str:
    """The stats line in the study's terms, with the study's own line beneath it for comparison."""
    s = stats
    head = f"{path}: " if path else ""
    lit = ", ".join(s["literal_list"])
    lines = [
        f"{head}{s['episodes']:,} episodes, teacher success {_pct(s['teacher_success'])} "
        f"({s['successes']:,}/{s['outcome_known']:,}), {s['supervised_turns']:,} supervised turns, "
        f"literal template copies ({lit}) {_pct(s['literal_share'])}",
        f"  any-template copies {_pct(s['template_share'])}, rejected by the simulator {_pct(s['rejected_share'])} "
        f"of answered replies, {s['turns_per_episode'] or 0:.1f} supervised turns per episode; teachers: "
        + ", ".join(f"{k} ({v})" for k, v in sorted(s["teachers"].items())),
        f"  study (Qwen3-1.7B ScienceWorld SFT): {STUDY_DATA_LINE['episodes']:,} episodes, teacher success "
        f"{_pct(STUDY_DATA_LINE['teacher_success'])}, {STUDY_DATA_LINE['supervised_turns']:,} supervised turns, "
        f"literal template copies (open/close OBJ) {_pct(STUDY_DATA_LINE['literal_share'])}",
    ]
    return "\n".join(lines)
