"""The scripted policy: a stand-in executor, no LLM. It plays the environment's expert action with a per-turn
chance, else a random admissible action, from a seeded RNG; it reads the expert plan, which a real executor never
sees, so its success rates mean nothing about SkillOS.

With ``skill_effect = 0`` (the default) the chance is ``expert_prob`` and the skills are ignored: plumbing only.
With ``skill_effect > 0`` (ALFWorld only) the chance is ``expert_prob + skill_effect x relevance`` of the retrieved
skills to the game, by the deterministic rule of :mod:`.skill_effect`, so what a curator writes changes outcomes.
"""

from __future__ import annotations

from twinrun.core.errors import TwinrunError
from twinrun.core.executors.skill_effect import expert_chance, relevance
from twinrun.core.executors.react import TurnView


class ScriptedPolicy:
    """Expert action with probability ``expert_prob + skill_effect x relevance``, else a uniformly random
    admissible action (seeded per episode). See the module docstring."""

    name = "scripted"
    needs_expert = True

    def __init__(self, expert_prob: float = 1.0, skill_effect: float = 0.0):
        if not 0.0 <= expert_prob <= 1.0:
            raise TwinrunError(f"executor.expert_prob: {expert_prob} must be in [0, 1] (fix: e.g. 1.0)")
        if not 0.0 <= skill_effect <= 1.0 - expert_prob + 1e-12:
            raise TwinrunError(f"executor.skill_effect: {skill_effect} must be in [0, 1 - expert_prob = "
                               f"{1 - expert_prob:g}] (fix: e.g. 0, or lower it)")
        self.expert_prob = expert_prob
        self.skill_effect = skill_effect
        self.attempts = 0

    def skill_relevance(self, skills_text: str, task_type: str | None) -> float | None:
        """The relevance the expert chance reads (recorded per episode); None when skills cannot matter."""
        if not self.skill_effect or task_type is None:
            return None
        return round(relevance(skills_text, task_type), 6)

    def chance(self, view: TurnView) -> float:
        """This turn's chance to play the expert action."""
        if not self.skill_effect or view.task_type is None:
            return self.expert_prob
        return expert_chance(self.expert_prob, self.skill_effect, view.skills_text, view.task_type)

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str:
        self.attempts += 1
        draw = view.rng.random()  # drawn every turn so the stream does not depend on the branch taken
        admissible = list(view.observation.admissible_actions)
        plan = view.expert_plan or []
        if plan and draw < self.chance(view):
            action, why = plan[0], "expert"
        elif admissible:
            action, why = view.rng.choice(admissible), "random admissible"
        else:
            action, why = (plan[0] if plan else "look"), "fallback"
        rel = self.skill_relevance(view.skills_text, view.task_type)
        note = "" if rel is None else f", skill relevance {rel:.2f}"
        return f"<think>scripted policy: {why} action{note}</think>\n<action>{action}</action>"

    def sampling_record(self) -> None:
        return None  # no decoding: nothing to record
