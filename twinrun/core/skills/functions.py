"""The curator's three functions (the paper's tools) as OpenAI tool schemas, and the result of one call.

:class:`~twinrun.core.skills.repository.SkillRepo` applies them; the schemas are also what a chat template renders as tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twinrun.core.skills.skill_md import Skill

# ------------------------------------------------------------------------------------------------------------
# Curator functions (the paper's three tools)

CURATOR_FUNCTIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "new_skill_insert",
            "description": "Add a new skill to the skill repository.",
            "parameters": {
                "type": "object",
                "properties": {
                    "skill_name": {
                        "type": "string",
                        "description": "Name of the new skill: lowercase letters, digits and hyphens, at most 64.",
                    },
                    "content": {
                        "type": "string",
                        "description": "The full SKILL.md text: YAML frontmatter with name (equal to skill_name) "
                        "and description (when to use the skill), then a markdown body.",
                    },
                },
                "required": ["skill_name", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "skill_update",
            "description": "Rename an existing skill and/or replace its content.",
            "parameters": {
                "type": "object",
                "properties": {
                    "skill_name": {"type": "string", "description": "Name of an existing skill."},
                    "new_name": {"type": "string", "description": "New name for the skill (optional)."},
                    "new_content": {
                        "type": "string",
                        "description": "New full SKILL.md text (optional); its frontmatter name must equal the "
                        "skill's (new) name.",
                    },
                },
                "required": ["skill_name"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "skill_delete",
            "description": "Delete an existing skill from the skill repository.",
            "parameters": {
                "type": "object",
                "properties": {"skill_name": {"type": "string", "description": "Name of an existing skill."}},
                "required": ["skill_name"],
            },
        },
    },
]

_SCHEMAS = {f["function"]["name"]: f["function"]["parameters"] for f in CURATOR_FUNCTIONS}


@dataclass(frozen=True)
class OpResult:
    """The outcome of one curator function call. ``skill`` is the inserted/updated skill when ok."""

    ok: bool
    function: str
    skill_name: str | None
    error: str | None = None
    skill: Skill | None = None

    @property
    def writes_content(self) -> bool:
        """A successful insert or update: the content a judge scores for r_cnt."""
        return self.ok and self.function in ("new_skill_insert", "skill_update") and self.skill is not None

    def to_record(self) -> dict[str, Any]:
        return {"ok": self.ok, "function": self.function, "skill_name": self.skill_name, "error": self.error}

