"""The content judge behind any OpenAI-compatible chat endpoint (e.g. vLLM serving Qwen3-32B, as in the paper)."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from typing import Any

from twinrun.core.verdicts import (
    JudgeError,
    JudgeRequest,
    JudgeSettings,
    Verdict,
    VerdictCache,
    _sha256,
    parse_verdict,
)

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

