"""Content judges for r_cnt: is a skill the curator inserted or updated VALID?

A verdict is True, False or None. None means *unmeasured* (the endpoint failed after its retries, or its answer
had no parsable verdict): r_cnt leaves it out of numerator and denominator and counts it. It is never False.

* :class:`RulesJudge`: deterministic checks, for tests and CPU runs (documented on the class).
* :class:`OpenAIJudge`: any OpenAI-compatible chat endpoint (e.g. vLLM serving Qwen3-32B, as in the paper),
  prompt from a file named by the spec, JSON verdict ``{"VALID": true|false, "reason": "..."}``.

Both cache measured verdicts by the sha256 of exactly what is judged (the rendered request), optionally
persisted to a JSONL file so a resumed run does not pay twice. Unmeasured verdicts are not cached.

The types, cache and answer parser are :mod:`twinrun.core.rewards.verdicts`; the judges are
:mod:`twinrun.core.rewards.rules_judge` and :mod:`twinrun.core.rewards.openai_judge`. Every old name is re-exported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from twinrun.core.rewards.openai_judge import _PLACEHOLDERS, OpenAIJudge  # noqa: F401 (re-exported)
from twinrun.core.rewards.rules_judge import _STEP_RE, _WORD_RE, RulesJudge  # noqa: F401 (re-exported)
from twinrun.core.skills.skill_md import Skill, SkillFormatError, parse_skill_md  # noqa: F401 (re-exported)
from twinrun.core.rewards.verdicts import (  # noqa: F401 (re-exported: callers import them from here)
    _FALSE,
    _THINK_RE,
    _TRUE,
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeSettings,
    Verdict,
    VerdictCache,
    _as_bool,
    _sha256,
    parse_judge_answer,
    parse_verdict,
)

if TYPE_CHECKING:
    from twinrun.core.spec import ExperimentSpec, JudgeSpec

# ------------------------------------------------------------------------------------------------------------
# From the spec


def make_judge(
    spec: JudgeSpec,
    *,
    prompt: str | None = None,
    api_key: str | None = None,
    cache_path: str | Path | None = None,
) -> Judge | None:
    """The judge a JudgeSpec names (None for kind=disabled). For kind=openai, `prompt` is the prompt text
    and the key is `api_key` or else the environment variable the spec names (``judge.api_key_env``)."""
    cache = VerdictCache(cache_path) if cache_path is not None else None
    if spec.kind == "disabled":
        return None
    if spec.kind == "rules":
        return RulesJudge(min_steps=spec.min_steps, min_body_words=spec.min_body_words, cache=cache)
    if prompt is None:
        raise JudgeError("prompts.judge: null but judge.kind=openai (fix: name the content-judge prompt file)")
    return OpenAIJudge(
        base_url=spec.base_url or "",
        model=spec.model or "",
        prompt=prompt,
        api_key=api_key if api_key is not None else os.environ.get(spec.api_key_env),
        timeout_s=spec.timeout_s,
        retries=spec.retries,
        backoff_s=spec.backoff_s,
        backoff_max_s=spec.backoff_max_s,
        temperature=spec.temperature,
        max_tokens=spec.max_tokens,
        thinking=spec.thinking,
        cache=cache,
    )


def judge_for_experiment(spec: ExperimentSpec, *, cache_path: str | Path | None = None) -> Judge | None:
    """make_judge with the prompt file the experiment spec names (read only for kind=openai)."""
    prompt = spec.read_prompt("judge") if spec.judge.kind == "openai" else None
    return make_judge(spec.judge, prompt=prompt, cache_path=cache_path)
