"""The curator's prompts: its system prompt and input template (read from the spec's prompt files), the fields the
input may name, and the correctness line it reads after each game. Below both the session and the runtime, which
each import it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from twinrun.core.executors.react import Episode, PromptTemplate

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
