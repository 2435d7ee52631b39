"""Content judges for r_cnt: is a skill the curator inserted or updated VALID?

A verdict is True, False or None. None means *unmeasured* (the endpoint failed after its retries, or its answer
had no parsable verdict): r_cnt leaves it out of numerator and denominator and counts it. It is never False.

* :class:`RulesJudge`: deterministic checks, for tests and CPU runs (documented on the class).
* :class:`OpenAIJudge`: any OpenAI-compatible chat endpoint (e.g. vLLM serving Qwen3-32B, as in the paper),
  prompt from a file named by the spec, JSON verdict ``{"VALID": true|false, "reason": "..."}``.

Both cache measured verdicts by the sha256 of exactly what is judged (the rendered request), optionally
persisted to a JSONL file so a resumed run does not pay twice. Unmeasured verdicts are not cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from twinrun.core.errors import TwinrunError
from twinrun.core.records import JsonlWriter, read_jsonl
from twinrun.core.skills import Skill, SkillFormatError, parse_skill_md

if TYPE_CHECKING:
    from twinrun.core.spec import ExperimentSpec, JudgeSpec


class JudgeError(TwinrunError, ValueError):
    """A judge that cannot be built from its configuration."""


@dataclass(frozen=True)
class JudgeRequest:
    """What the judge sees: the skill as written, and the curation context it was written in."""

    skill: Skill
    task: str = ""
    trajectory: str = ""
    outcome: str = ""  # the correctness signal the curator saw ("success" / "failure")


@dataclass(frozen=True)
class Verdict:
    valid: bool | None  # None = unmeasured
    reason: str
    cached: bool = False

    @property
    def measured(self) -> bool:
        return self.valid is not None


@dataclass(frozen=True)
class JudgeSettings:
    """What decides a judge's verdicts, for the records: `sent` holds the request fields besides model and
    messages (empty for the rules judge); `settings_hash` is sha256[:16] of the kind, model, those fields and the
    prompt text (the rules judge: its thresholds). Timeout, retries and backoff are left out: they change when a
    verdict arrives, not what it says."""

    kind: str
    model: str | None
    sent: dict[str, Any]
    settings_hash: str


@runtime_checkable
class Judge(Protocol):
    name: str

    def judge(self, request: JudgeRequest) -> Verdict: ...

    async def ajudge(self, request: JudgeRequest) -> Verdict: ...


class VerdictCache:
    """content-hash -> measured verdict; thread-safe; optionally appended to a JSONL file and read back."""

    def __init__(self, path: str | Path | None = None):
        self._lock = threading.Lock()
        self._verdicts: dict[str, Verdict] = {}
        self._writer: JsonlWriter | None = None
        if path is not None:
            for row in read_jsonl(path):
                if isinstance(row.get("key"), str) and isinstance(row.get("valid"), bool):
                    self._verdicts[row["key"]] = Verdict(row["valid"], str(row.get("reason", "")))
            self._writer = JsonlWriter(path)

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            v = self._verdicts.get(key)
        return replace(v, cached=True) if v is not None else None

    def put(self, key: str, verdict: Verdict) -> None:
        if verdict.valid is None:
            return  # an unmeasured verdict is retried next time, never remembered
        with self._lock:
            if key in self._verdicts:
                return
            self._verdicts[key] = replace(verdict, cached=False)
            if self._writer is not None:
                self._writer.write({"key": key, "valid": verdict.valid, "reason": verdict.reason})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _sha256(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------------------
# Rules judge

_STEP_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
_WORD_RE = re.compile(r"\w+")


class RulesJudge:
    """Deterministic content checks. A skill is VALID when all pass:

    1. **frontmatter**: the SKILL.md re-parses to the same record, and the description is at least
       ``min_description_words`` words and not just the name.
    2. **actionable steps**: the body has at least ``min_steps`` list items (``- ``, ``* ``, ``+ ``, ``1. ``,
       ``1) ``): a skill is a procedure, not a note.
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
        cache: VerdictCache | None = None,
    ):
        self.min_steps = min_steps
        self.min_description_words = min_description_words
        self.ngram = ngram
        self.max_copied_share = max_copied_share
        self.cache = cache if cache is not None else VerdictCache()
        self._params = json.dumps([min_steps, min_description_words, ngram, max_copied_share])

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


# ------------------------------------------------------------------------------------------------------------
# Verdict parsing

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TRUE = {"true", "valid", "yes", "1"}
_FALSE = {"false", "invalid", "no", "0"}


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return None


def parse_judge_answer(text: str, key: str, yes: str, no: str) -> tuple[bool | None, str]:
    """(verdict, reason) from a judge model's answer; verdict None when nothing parses.

    Reads the last JSON object with a ``key`` key (any case; value true/false or yes/no words), after dropping
    ``<think>`` blocks; failing that, a last line that is exactly ``yes`` or ``no`` (e.g. VALID / INVALID).
    """
    if not isinstance(text, str):
        return None, "judge answer is not text"
    if "</think>" in text.lower():
        text = _THINK_RE.sub("", text)
        low = text.lower()
        if "</think>" in low:  # the opening tag was in the prompt (Qwen3 chat template): keep what follows
            text = text[low.rfind("</think>") + len("</think>") :]
    decoder = json.JSONDecoder()
    found: tuple[bool | None, str] | None = None
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            keys = {k.lower(): k for k in obj if isinstance(k, str)}
            if key.lower() in keys:
                verdict = _as_bool(obj[keys[key.lower()]])
                reason = obj.get(keys.get("reason", "reason"), "")
                found = (verdict, reason if isinstance(reason, str) else json.dumps(reason))
    if found is not None:
        if found[0] is None:
            return None, f"{key.upper()} is neither true nor false"
        return found
    lines = [ln.strip().strip("*`#.:").strip() for ln in text.strip().splitlines() if ln.strip()]
    if lines and lines[-1].upper() in (yes, no):
        return lines[-1].upper() == yes, "bare verdict"
    return None, f"no JSON verdict with a {key.upper()} key in the answer"


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """The count judge's answer: a ``VALID`` key, or a bare VALID / INVALID last line."""
    return parse_judge_answer(text, "valid", "VALID", "INVALID")


# ------------------------------------------------------------------------------------------------------------
# OpenAI-compatible judge

_PLACEHOLDERS = ("{{skill}}", "{{task}}", "{{trajectory}}", "{{outcome}}")
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class _Retryable(Exception):
    pass


class OpenAIJudge:
    """Ask an OpenAI-compatible chat endpoint for a JSON verdict.

    The prompt file is a template: if it contains ``{{skill}}`` it is rendered (``{{skill}}``, ``{{task}}``,
    ``{{trajectory}}``, ``{{outcome}}``) into one user message; otherwise it is the system message and the
    skill (and any context) is the user message. Every request carries ``temperature`` and ``max_tokens``, and
    ``chat_template_kwargs: {enable_thinking: thinking}`` when ``thinking`` is not None (None: the chat template
    decides; Qwen3 thinks). Transport errors, timeouts and HTTP 408/409/425/429/5xx are retried ``retries`` times
    with exponential backoff (``backoff_s``·2^attempt, ±25% jitter, at most ``backoff_max_s`` when set); any
    failure that remains, and any answer without a verdict, is unmeasured (None).
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        prompt: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 1.0,
        backoff_max_s: float | None = None,
        temperature: float = 0.0,
        max_tokens: int = 2048,
        thinking: bool | None = None,
        cache: VerdictCache | None = None,
    ):
        if not base_url or not model:
            raise JudgeError(f"judge: base_url={base_url!r} model={model!r} (fix: both are required for kind=openai)")
        if not prompt.strip():
            raise JudgeError("judge prompt: the file is empty (fix: write the content-judge prompt)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.prompt = prompt
        self.api_key = api_key or "EMPTY"
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.thinking = thinking
        self.cache = cache if cache is not None else VerdictCache()
        self.calls = 0  # HTTP requests sent (cache hits send none)
        self._client: Any = None
        self._client_lock = threading.Lock()

    # -- request
    def messages(self, request: JudgeRequest) -> list[dict[str, str]]:
        skill_text = request.skill.to_markdown()
        if "{{skill}}" in self.prompt:
            text = self.prompt
            for ph, val in zip(_PLACEHOLDERS, (skill_text, request.task, request.trajectory, request.outcome)):
                text = text.replace(ph, val)
            return [{"role": "user", "content": text}]
        parts = []
        if request.task:
            parts.append(f"## Task Description\n{request.task}")
        if request.trajectory:
            parts.append(f"## Agent Trajectory\n{request.trajectory}")
        if request.outcome:
            parts.append(f"## Result\n{request.outcome}")
        parts.append(f"## Skill\n{skill_text}")
        return [{"role": "system", "content": self.prompt}, {"role": "user", "content": "\n\n".join(parts)}]

    def sampling_params(self) -> dict[str, Any]:
        """The request's fields besides model and messages (thinking only when stated: the body, and so the
        verdict cache key, of a judge that leaves it to the template is what it was before the field existed)."""
        params: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.thinking is not None:
            params["chat_template_kwargs"] = {"enable_thinking": self.thinking}
        return params

    def _body(self, request: JudgeRequest) -> dict[str, Any]:
        return {"model": self.model, "messages": self.messages(request), **self.sampling_params()}

    def settings(self) -> JudgeSettings:
        sent = self.sampling_params()
        blob = json.dumps({"model": self.model, "sent": sent, "prompt": self.prompt}, sort_keys=True)
        return JudgeSettings(kind="openai", model=self.model, sent=sent, settings_hash=_sha256("openai-v1", blob)[:16])

    def cache_key(self, request: JudgeRequest) -> str:
        return _sha256("openai-v1", json.dumps(self._body(request), sort_keys=True))

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    # how a verdict without a value is labelled, which endpoint it names, and how the answer's text is parsed
    # (the self-judge of core.correctness reads the same HTTP answers with its own labels and parser)
    _NO_VERDICT = "unmeasured"
    _ENDPOINT = "judge endpoint"
    _parse = staticmethod(parse_verdict)

    def _read(self, resp: Any) -> Verdict:
        if resp.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {resp.status_code}")
        if resp.status_code != 200:
            return Verdict(None, f"{self._NO_VERDICT}: HTTP {resp.status_code} from the {self._ENDPOINT}")
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return Verdict(None, f"{self._NO_VERDICT}: the endpoint's answer is not a chat completion")
        valid, reason = self._parse(content)
        if valid is None:
            return Verdict(None, f"{self._NO_VERDICT}: {reason}")
        return Verdict(valid, reason)

    def _count_call(self) -> None:
        with self._client_lock:
            self.calls += 1

    def _delay(self, attempt: int) -> float:
        delay = self.backoff_s * (2**attempt) * random.uniform(0.75, 1.25)
        return delay if self.backoff_max_s is None else min(delay, self.backoff_max_s)

    # -- sync
    def _sync_client(self) -> Any:
        import httpx

        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout_s)
            return self._client

    def _ask(self, request: JudgeRequest) -> Verdict:
        import httpx

        body = self._body(request)
        client = self._sync_client()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt - 1))
            try:
                self._count_call()
                resp = client.post(f"{self.base_url}/chat/completions", json=body, headers=self._headers())
                return self._read(resp)
            except (httpx.HTTPError, _Retryable) as e:
                last = f"{type(e).__name__}: {e}"
        return Verdict(None, f"unmeasured: judge endpoint failed {self.retries + 1} times ({last})")

    def judge(self, request: JudgeRequest) -> Verdict:
        key = self.cache_key(request)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        verdict = self._ask(request)
        self.cache.put(key, verdict)
        return verdict

    # -- async (verl's agent loop)
    async def _aask(self, request: JudgeRequest) -> Verdict:
        import httpx

        body = self._body(request)
        last = ""
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for attempt in range(self.retries + 1):
                if attempt:
                    await asyncio.sleep(self._delay(attempt - 1))
                try:
                    self._count_call()
                    resp = await client.post(f"{self.base_url}/chat/completions", json=body, headers=self._headers())
                    return self._read(resp)
                except (httpx.HTTPError, _Retryable) as e:
                    last = f"{type(e).__name__}: {e}"
        return Verdict(None, f"unmeasured: judge endpoint failed {self.retries + 1} times ({last})")

    async def ajudge(self, request: JudgeRequest) -> Verdict:
        key = self.cache_key(request)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        verdict = await self._aask(request)
        self.cache.put(key, verdict)
        return verdict

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None


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
        return RulesJudge(cache=cache)
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
