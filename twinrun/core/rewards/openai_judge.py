"""The content judge behind any OpenAI-compatible chat endpoint (e.g. vLLM serving Qwen3-32B, as in the paper)."""

from __future__ import annotations

import json
import threading
from typing import Any

from twinrun.core.executors.endpoints import EndpointFailed, HttpxTransport, Retry, RetryPolicy, post_json, retryable_status
from twinrun.core.rewards.verdicts import (
    JudgeError,
    JudgeRequest,
    JudgeSettings,
    Verdict,
    VerdictCache,
    _sha256,
    parse_verdict,
)

_PLACEHOLDERS = ("{{skill}}", "{{task}}", "{{trajectory}}", "{{outcome}}")

class OpenAIJudge:
    """Ask an OpenAI-compatible chat endpoint for a JSON verdict.

    The prompt file is a template: if it contains ``{{skill}}`` it is rendered (``{{skill}}``, ``{{task}}``,
    ``{{trajectory}}``, ``{{outcome}}``) into one user message; otherwise it is the system message and the
    skill (and any context) is the user message. Every request carries ``temperature`` and ``max_tokens``, and
    ``chat_template_kwargs: {enable_thinking: thinking}`` when ``thinking`` is not None (None: the chat template
    decides; Qwen3 thinks). Transport errors, timeouts and HTTP 408/409/425/429/5xx are retried ``retries`` times
    by the one policy of :mod:`twinrun.core.executors.endpoints` (retry n waits ``backoff_s``·2^(n-1), ±25% jitter, at most
    ``backoff_max_s`` when set); any failure that remains, and any answer without a verdict, is unmeasured (None).
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

    def _read(self, status: int, text: str) -> Verdict:
        if retryable_status(status):
            raise Retry(f"HTTP {status}")
        if status != 200:
            return Verdict(None, f"{self._NO_VERDICT}: HTTP {status} from the {self._ENDPOINT}")
        try:
            content = json.loads(text)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return Verdict(None, f"{self._NO_VERDICT}: the endpoint's answer is not a chat completion")
        valid, reason = self._parse(content)
        if valid is None:
            return Verdict(None, f"{self._NO_VERDICT}: {reason}")
        return Verdict(valid, reason)

    def _count_call(self) -> None:
        with self._client_lock:
            self.calls += 1

    def retry_policy(self) -> RetryPolicy:
        """The retries and backoff of the next request (read per call: they may be changed between calls)."""
        return RetryPolicy(self.retries, self.backoff_s, self.backoff_max_s)

    def _failed(self, e: EndpointFailed) -> Verdict:
        return Verdict(None, f"unmeasured: judge endpoint failed {e.attempts} times ({e.reason})")

    # -- sync
    def _sync_client(self) -> Any:
        import httpx

        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout_s)
            return self._client

    def _ask(self, request: JudgeRequest) -> Verdict:
        body = self._body(request)
        client = self._sync_client()

        def attempt() -> Verdict:
            self._count_call()
            return self._read(*post_json(client, f"{self.base_url}/chat/completions", body,
                                         headers=self._headers(), timeout_s=self.timeout_s))

        try:
            return self.retry_policy().run(attempt)
        except EndpointFailed as e:
            return self._failed(e)

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
        body = self._body(request)
        # a client per call: verl's agent loop calls from several event loops, and a client is bound to one
        transport = HttpxTransport(f"{self.base_url}/chat/completions", self._headers(), self.timeout_s)

        async def attempt() -> Verdict:
            self._count_call()
            return self._read(*await transport.post(0, body))

        try:
            return await self.retry_policy().arun(attempt)
        except EndpointFailed as e:
            return self._failed(e)
        finally:
            await transport.aclose()

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

