"""The deterministic content judge, for tests and CPU runs (its checks are documented on the class)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from twinrun.core.skills.skill_md import SkillFormatError, parse_skill_md
from twinrun.core.rewards.verdicts import JudgeRequest, JudgeSettings, Verdict, VerdictCache, _sha256

_STEP_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
_WORD_RE = re.compile(r"\w+")


class RulesJudge:
    """Deterministic content checks. A skill is VALID when all pass:

    1. **frontmatter**: the SKILL.md re-parses to the same record, and the description is at least
       ``min_description_words`` words and not just the name.
    2. **actionable steps**: the body has at least ``min_steps`` list items (``- ``, ``* ``, ``+ ``, ``1. ``,
       ``1) ``): a skill is a procedure, not a note. With ``min_body_words``, the body also has at least that many
       words (``judge.min_body_words``; the smoke arm's check, whose warm-started curator writes one-sentence bodies).
    3. **not a copy of the trajectory**: at most ``max_copied_share`` of the body's word ``ngram``-grams occur
       in the trajectory (when one is given): a skill generalises an episode, it does not paste it.
    """

    name = "rules"

    def __init__(
        self,
        *,
        min_steps: int = 2,
        min_description_words: int = 3,
        ngram: int = 8,
        max_copied_share: float = 0.5,
        min_body_words: int = 0,
        cache: VerdictCache | None = None,
    ):
        self.min_steps = min_steps
        self.min_description_words = min_description_words
        self.ngram = ngram
        self.max_copied_share = max_copied_share
        self.min_body_words = min_body_words
        self.cache = cache if cache is not None else VerdictCache()
        # min_body_words joins the key only when set, so the judge's settings hash (and every cached verdict) of a
        # spec that does not use it is what it was before the check existed
        params: list = [min_steps, min_description_words, ngram, max_copied_share]
        self._params = json.dumps(params + [min_body_words] if min_body_words else params)

    def cache_key(self, request: JudgeRequest) -> str:
        return _sha256("rules-v1", self._params, request.skill.to_markdown(), request.trajectory)

    def settings(self) -> JudgeSettings:
        return JudgeSettings(kind="rules", model=None, sent={}, settings_hash=_sha256("rules-v1", self._params)[:16])

    def _shingles(self, text: str) -> set[tuple[str, ...]]:
        words = _WORD_RE.findall(text.lower())
        n = self.ngram
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}

    def evaluate(self, request: JudgeRequest) -> Verdict:
        skill = request.skill
        failures: list[str] = []
        try:
            roundtrip_ok = parse_skill_md(skill.to_markdown()) == replace(skill, resources=())
        except SkillFormatError:
            roundtrip_ok = False
        words = _WORD_RE.findall(skill.description)
        if not roundtrip_ok:
            failures.append("frontmatter does not round-trip")
        elif len(words) < self.min_description_words or skill.description.strip().lower() in (
            skill.name,
            skill.name.replace("-", " "),
        ):
            failures.append(f"description says too little (< {self.min_description_words} words or just the name)")
        steps = len(_STEP_RE.findall(skill.body))
        if steps < self.min_steps:
            failures.append(f"body has {steps} list-item steps, fewer than {self.min_steps}")
        body_words = len(_WORD_RE.findall(skill.body))
        if body_words < self.min_body_words:
            failures.append(f"body says too little ({body_words} words, fewer than {self.min_body_words})")
        if request.trajectory:
            body = self._shingles(skill.body)
            if body:
                share = len(body & self._shingles(request.trajectory)) / len(body)
                if share > self.max_copied_share:
                    failures.append(f"{share:.0%} of the body's {self.ngram}-word runs are copied from the trajectory")
        if failures:
            return Verdict(False, "; ".join(failures))
        return Verdict(True, "frontmatter valid, actionable steps, not a copy of the trajectory")

    def judge(self, request: JudgeRequest) -> Verdict:
        key = self.cache_key(request)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        verdict = self.evaluate(request)
        self.cache.put(key, verdict)
        return verdict

    async def ajudge(self, request: JudgeRequest) -> Verdict:
        return self.judge(request)

