"""The skill-sensitivity rule of the scripted stand-in executor (``executor.skill_effect``): how relevant the
retrieved skills are to an ALFWorld game, as one deterministic number in [0, 1]. **A stand-in, not a model of an
LLM**: it exists so the smoke arm's curator checkpoints can differ from the baseline; numbers from it say nothing
about SkillOS.

The rule (stated in experiments/smoke-cpu.yaml, DIVERGENCES.md A7 and the report):

* A skill's **types** are the ALFWorld task-type names (``pick look clean heat cool pick2``) that occur as words in
  its name and description. Its **type credit** for a game is ``1 / len(types)`` when the game's type is among
  them, else 0: a skill that names every type gets a sixth.
* A skill's **terms** are the concepts of :data:`CONCEPTS` whose words occur in its body (``put``/``place`` ->
  move, ``sink`` -> sinkbasin, ...). Navigation words (go, look, open, close, examine, inventory) are neutral:
  every game uses them, so they neither help nor cost.
* A game's **key terms** are fixed per type (:data:`KEY_TERMS`: the verbs and tool receptacles the expert plans of
  that type use, checked against real plans in tests). The skill's **content score** is the F1 of its terms
  against the key terms: listing every verb and receptacle of every type keeps the recall and loses the
  precision (a pick skill with all ten concepts scores 0.33, one with ``take`` and ``put`` scores 1).
* ``relevance(skill, game) = type credit x (BASE + (1 - BASE) x content score)`` with BASE = 0.25: a type-named skill
  with an unhelpful body is worth a quarter; a skill with no type name is worth nothing.
* The executor's relevance for an episode is the **largest** over the retrieved skills; its per-turn chance to play
  the expert action is ``expert_prob + skill_effect x relevance``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TASK_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")
BASE = 0.25

# concept -> the words (lower-case, whole words) that express it in a skill body
CONCEPTS: dict[str, frozenset[str]] = {
    "take": frozenset({"take", "pick", "grab"}),
    "move": frozenset({"move", "put", "place"}),
    "use": frozenset({"use", "toggle", "turn", "switch"}),
    "clean": frozenset({"clean", "wash", "rinse"}),
    "heat": frozenset({"heat", "warm"}),
    "cool": frozenset({"cool", "chill"}),
    "slice": frozenset({"slice", "cut"}),
    "lamp": frozenset({"lamp", "desklamp", "floorlamp"}),
    "sinkbasin": frozenset({"sink", "sinkbasin"}),
    "microwave": frozenset({"microwave"}),
    "fridge": frozenset({"fridge", "refrigerator"}),
}
NEUTRAL = frozenset({"go", "look", "open", "close", "examine", "inventory"})

# per task type: the concepts its expert plans use besides navigation ('move X to Y' is ALFWorld 2.1.1's put)
KEY_TERMS: dict[str, frozenset[str]] = {
    "pick": frozenset({"take", "move"}),
    "pick2": frozenset({"take", "move"}),
    "look": frozenset({"take", "use", "lamp"}),
    "clean": frozenset({"take", "clean", "move", "sinkbasin"}),
    "heat": frozenset({"take", "heat", "move", "microwave"}),
    "cool": frozenset({"take", "cool", "move", "fridge"}),
}

_WORD = re.compile(r"[a-z0-9]+")
_WORD_TO_CONCEPT = {w: c for c, words in CONCEPTS.items() for w in words}
_FRONTMATTER = re.compile(r"\A---\n(.*?)\n---\n?(.*)\Z", re.DOTALL)
_SPLIT = re.compile(r"\n\n(?=---\n)")


@dataclass(frozen=True)
class SkillText:
    """What the rule reads of one retrieved skill: the frontmatter's name + description, and the body."""

    header: str
    body: str


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def skill_types(header: str) -> frozenset[str]:
    """Task-type names occurring as whole words in a skill's name + description (``pick-tips`` names pick)."""
    return frozenset(w for w in words(header) if w in TASK_TYPES)


def skill_terms(body: str) -> frozenset[str]:
    """Concepts whose words occur in a skill body (neutral navigation words are left out)."""
    return frozenset(_WORD_TO_CONCEPT[w] for w in words(body) if w in _WORD_TO_CONCEPT)


def content_score(terms: Iterable[str], task_type: str) -> float:
    """F1 of a skill's terms against the type's key terms (0 when either is empty)."""
    have, key = frozenset(terms), KEY_TERMS.get(task_type, frozenset())
    hit = len(have & key)
    return 0.0 if not hit else 2 * hit / (len(have) + len(key))


def relevance_of(skill: SkillText, task_type: str) -> float:
    """``type credit x (BASE + (1 - BASE) x content score)`` of one skill for a game of ``task_type``."""
    types = skill_types(skill.header)
    if task_type not in types:
        return 0.0
    return (1.0 / len(types)) * (BASE + (1.0 - BASE) * content_score(skill_terms(skill.body), task_type))


def split_skills(skills_text: str) -> list[SkillText]:
    """The retrieved skills of an executor prompt (:func:`twinrun.core.skills.repository.render_for_prompt`: SKILL.md texts
    joined by a blank line) as (header, body) pairs. A chunk without frontmatter has an empty header."""
    text = (skills_text or "").strip()
    if not text or text == "(none)":
        return []
    out = []
    for chunk in _SPLIT.split(text):
        m = _FRONTMATTER.match(chunk.strip() + "\n")
        if m is None:
            out.append(SkillText("", chunk))
            continue
        header = " ".join(line.split(":", 1)[1] for line in m.group(1).splitlines()
                          if line.split(":", 1)[0].strip() in ("name", "description") and ":" in line)
        out.append(SkillText(header, m.group(2)))
    return out


def relevance(skills_text: str, task_type: str) -> float:
    """The episode's relevance: the largest over the retrieved skills (0 with none)."""
    return max((relevance_of(s, task_type) for s in split_skills(skills_text)), default=0.0)


def expert_chance(expert_prob: float, skill_effect: float, skills: str | Sequence[SkillText], task_type: str) -> float:
    """Per-turn chance to play the expert action: ``expert_prob + skill_effect x relevance`` (capped at 1)."""
    if not skill_effect:
        return expert_prob
    r = (relevance(skills, task_type) if isinstance(skills, str)
         else max((relevance_of(s, task_type) for s in skills), default=0.0))
    return min(1.0, expert_prob + skill_effect * r)


def stand_in_note(expert_prob: float, skill_effect: float) -> str:
    """The report's statement of what a scripted executor's numbers mean (and the rule, when skills matter)."""
    if not skill_effect:
        return (f"**Executor: scripted stand-in, skill-blind** (expert action with chance {expert_prob:g} per turn, "
                "else a random admissible action; it ignores the skills). Every arm should equal the baseline; the "
                "numbers say nothing about SkillOS.")
    return (f"**Executor: scripted stand-in, skill-sensitive** (no LLM). Each turn it plays ALFWorld's expert "
            f"action with chance {expert_prob:g} + {skill_effect:g} x relevance, else a random admissible action. "
            "Relevance is the best retrieved skill's: 1 / (task types named in its name and description) when the "
            "game's type is among them (else 0), times 0.25 + 0.75 x F1 of the concepts in its body against the "
            "type's key terms (pick: take, put; look: take, use, lamp; clean, heat, cool: take, put and the verb and "
            "its tool; navigation words neutral). A lift here shows the harness sees a curator whose skills help "
            "this rule; it says nothing about SkillOS or an LLM executor.")


STAND_IN_HEADING = "Executor: the scripted stand-in"


def stand_in_line(skill_effect: float) -> str:
    """The first screen's one line on a scripted executor, linking the rule (:func:`stand_in_note`, placed under
    the report's heading STAND_IN_HEADING)."""
    kind = "skill-sensitive by a stated rule" if skill_effect else "skill-blind"
    return (f"**Executor: a scripted stand-in (no LLM), {kind}** ([the rule](#executor-the-scripted-stand-in)): "
            "these numbers test the harness, not SkillOS.")
