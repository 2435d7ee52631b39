"""The scripted policy: **plumbing only**. It plays the environment's expert action with probability
``expert_prob`` per turn, else a random admissible action, from a seeded RNG; it reads the expert plan, which a
real executor never sees, so its success rates mean nothing."""

from __future__ import annotations

from twinrun.core.errors import TwinrunError
from twinrun.core.react import TurnView


class ScriptedPolicy:
    """Expert action with probability `expert_prob`, else a uniformly random admissible action (seeded per
    episode). Plumbing only: see the module docstring."""

    name = "scripted"
    needs_expert = True

    def __init__(self, expert_prob: float = 1.0):
        if not 0.0 <= expert_prob <= 1.0:
            raise TwinrunError(f"executor.expert_prob: {expert_prob} must be in [0, 1] (fix: e.g. 1.0)")
        self.expert_prob = expert_prob
        self.attempts = 0

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str:
        self.attempts += 1
        draw = view.rng.random()  # drawn every turn so the stream does not depend on the branch taken
        admissible = list(view.observation.admissible_actions)
        plan = view.expert_plan or []
        if plan and draw < self.expert_prob:
            action, why = plan[0], "expert"
        elif admissible:
            action, why = view.rng.choice(admissible), "random admissible"
        else:
            action, why = (plan[0] if plan else "look"), "fallback"
        return f"<think>scripted policy: {why} action</think>\n<action>{action}</action>"

    def sampling_record(self) -> None:
        return None  # no decoding: nothing to record
