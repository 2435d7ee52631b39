"""The ``openai`` executor policy: any OpenAI-compatible chat endpoint (a vLLM server in real runs).

Async; one slot queue bounds the in-flight calls of *every* episode sharing the policy (all episodes of a
training step); per-call timeout; retries by the one policy of :mod:`twinrun.core.executors.endpoints` (timeouts, connection
errors, 408/409/425/429, 5xx and unreadable answers; exponential backoff with jitter). A call that still fails
raises InfrastructureError -> the episode is ``unmeasured`` with the reason. No action is ever substituted.

Before its first chat request the policy asks the server what it applies to the decoding fields a request leaves
out (:mod:`twinrun.core.executors.sampling`), records it with every episode, and prints one warning line when it
differs from the spec.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from twinrun.core.executors.endpoints import (
    AiohttpTransport,
    EndpointFailed,
    Fatal,
    HttpxTransport,
    Retry,
    RetryPolicy,
    retryable_status,
)
from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.executors.sampling import (
    ServerDefaults, decoding_warning, sampling_record, vllm_assumed_defaults, vllm_server_defaults,
)
from twinrun.core.records import SamplingRecord
from twinrun.core.executors.react import TurnView


def print_warning(line: str) -> None:
    """The default sink of a policy's one-line warnings: stderr, where the console shows it."""
    print(line, file=sys.stderr, flush=True)


class OpenAIPolicy:
    """Chat completions against an OpenAI-compatible endpoint, with a concurrency bound shared by all episodes
    that use this object. Counters: `calls` (logical calls), `attempts` (HTTP requests), `retries_done`,
    `failed_calls` (calls that exhausted their retries), `max_in_flight`, `prompt_tokens` and `completion_tokens`
    (the answers' ``usage``, summed).

    The client speaks the endpoint's JSON directly (POST /chat/completions): the openai SDK's request/response
    models cost ~3 ms of CPU per call, which at 128 calls in flight is most of a core. `http_client`:
    "aiohttp" (~0.5 ms/call), "httpx" (~1.4 ms/call; a base dependency) or "auto" (aiohttp when installed).
    A request takes a slot token from a queue of `concurrency` tokens (held for one attempt, not during
    backoff: retry n waits `backoff_s` * 2^(n-1) +-25%, at most `max_backoff_s`); httpx clients are sharded by slot (`connections_per_client` each) because httpcore's pool scans
    every connection on every request event (bench/executor_throughput.py).

    Decoding: temperature, top_p and max_tokens are sent unless set to None (reasoning models reject them: the
    teacher of issue 15 sends only what ``sft.teacher.send`` lists); top_k, min_p, presence_penalty and
    repetition_penalty only when not None (None leaves them to the server); `extra_body` is merged into every
    request. `sampling_record()` is what each episode records; `server_defaults` what the server reported
    (`probe_server=False` skips asking)."""

    name = "openai"
    needs_expert = False

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        temperature: float | None = 0.4,
        top_p: float | None = 1.0,
        max_tokens: int | None = 512,
        top_k: int | None = None,
        min_p: float | None = None,
        presence_penalty: float | None = None,
        repetition_penalty: float | None = None,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        extra_body: dict[str, Any] | None = None,
        http_client: str = "auto",
        connections_per_client: int = 4,
        probe_server: bool = True,
        warn: Callable[[str], None] | None = print_warning,
    ):
        if http_client not in ("auto", "aiohttp", "httpx"):
            raise TwinrunError(f"openai executor: http_client {http_client!r} is unknown (fix: auto, aiohttp or httpx)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.min_p = min_p
        self.presence_penalty = presence_penalty
        self.repetition_penalty = repetition_penalty
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.extra_body = dict(extra_body or {})
        self.http_client = http_client
        self.per_client = max(1, connections_per_client)
        self.probe_server = probe_server
        self.warn = warn
        self.server_defaults: ServerDefaults | None = None
        self.server_report = "not asked yet (no request made)"
        self._probe: asyncio.Task[None] | None = None
        self._record: SamplingRecord | None = None
        self._transport: Any = None
        self._slots: asyncio.Queue[int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls = self.attempts = self.retries_done = self.failed_calls = 0
        self.in_flight = self.max_in_flight = 0
        self.prompt_tokens = self.completion_tokens = 0  # the answers' usage, summed (0 when a server sends none)

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._slots = asyncio.Queue()
            for t in range(self.concurrency):
                self._slots.put_nowait(t)
            kind = self.http_client
            if kind == "auto":
                try:
                    import aiohttp  # noqa: F401
                    kind = "aiohttp"
                except ImportError:
                    kind = "httpx"
            url = f"{self.base_url}/chat/completions"
            headers = {"Authorization": f"Bearer {self.api_key}"}
            self._probe = None
            if kind == "aiohttp":
                self._transport = AiohttpTransport(url, headers, self.timeout_s, self.concurrency)
            else:
                self._transport = HttpxTransport(url, headers, self.timeout_s, self.concurrency, self.per_client)
        elif loop is not self._loop:
            raise TwinrunError(
                "openai executor: used from two event loops (fix: run every episode on the runtime's BackgroundLoop)"
            )

    @property
    def transport(self) -> str | None:
        """"aiohttp" or "httpx" once the first call bound the client."""
        return None if self._transport is None else self._transport.name

    def sampling_params(self) -> dict[str, Any]:
        """The fields every request carries besides model and messages (the spec's decoding and extra_body)."""
        params: dict[str, Any] = {}
        for name in ("temperature", "top_p", "max_tokens", "top_k", "min_p", "presence_penalty",
                     "repetition_penalty"):
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        return {**params, **self.extra_body}

    def sampling_record(self) -> SamplingRecord:
        """What each episode records: the request's sampling fields and what the server applied to them."""
        if self._record is None:
            record = sampling_record(self.sampling_params(), self.server_defaults, not_reported=self.server_report)
            if self.probe_server and (self._probe is None or not self._probe.done()):
                return record  # not final before the server was asked
            self._record = record
        return self._record

    def _root_url(self) -> str:
        """The server root: base_url without its OpenAI prefix (/v1), where vLLM serves /server_info."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    async def _ask_server(self) -> None:
        """What the server applies to the decoding fields a request leaves out (vLLM: /server_info, else
        ``owned_by`` on /v1/models); one warning line when that differs from what the spec states. Never fails
        a run: an endpoint that reports nothing is recorded as such."""
        try:
            status, text = await self._transport.get(f"{self._root_url()}/server_info?config_format=json")
            defaults = vllm_server_defaults(json.loads(text) if status == 200 else None)
            if defaults is None:
                self.server_report = f"not reported (/server_info: {status or 'unreachable'})"
                models_status, text = await self._transport.get(f"{self.base_url}/models")
                models = json.loads(text).get("data", []) if models_status == 200 else []
                if any(isinstance(m, dict) and m.get("owned_by") == "vllm" for m in models):
                    defaults = vllm_assumed_defaults()
        except (ValueError, AttributeError, TypeError) as e:
            defaults, self.server_report = None, f"not reported (unreadable answer: {type(e).__name__})"
        self.server_defaults = defaults
        line = decoding_warning(f"executor endpoint {self.base_url}", self.sampling_params(), defaults)
        if line and self.warn is not None:
            self.warn(line)

    async def _asked_server(self) -> None:
        if not self.probe_server:
            self.server_report = "not asked (probe_server=False)"
            return
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._ask_server())
        await asyncio.shield(self._probe)

    async def _post(self, slot: int, body: dict[str, Any]) -> str:
        """One HTTP attempt. Returns the text; raises Retry / Fatal with the reason."""
        status, text = await self._transport.post(slot, body)
        if status != 200:
            reason = f"HTTP {status}: {text[:200]}"
            if retryable_status(status):
                raise Retry(reason)
            raise Fatal(reason)  # a malformed request does not get better by retrying
        try:
            answer = json.loads(text)
            content = answer["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise Retry(f"malformed response ({type(e).__name__}: {text[:120]!r})") from e
        usage = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(usage, dict):  # what the server counted (its chat template's tokens, not twinrun's guess)
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)
        return content or ""

    async def complete(self, messages: list[dict[str, str]], **overrides: Any) -> str:
        """One logical call with retries. Raises InfrastructureError when every attempt failed."""
        self._bind()
        assert self._slots is not None
        await self._asked_server()
        self.calls += 1
        body = {"model": self.model, "messages": messages, **self.sampling_params(), **overrides}
        slots = self._slots

        async def attempt() -> str:
            slot = await slots.get()  # held for the attempt only, not during backoff
            self.attempts += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await self._post(slot, body)
            finally:
                self.in_flight -= 1
                slots.put_nowait(slot)

        try:
            return await self.retry_policy().arun(attempt, on_retry=self._count_retry)
        except EndpointFailed as e:
            self.failed_calls += 1
            raise InfrastructureError(f"{self.base_url} failed after {e.attempts} attempt(s): {e.reason}") from None

    def retry_policy(self) -> RetryPolicy:
        """The retries and backoff of the next call (read per call: they may be changed between calls)."""
        return RetryPolicy(self.retries, self.backoff_s, self.max_backoff_s)

    def _count_retry(self) -> None:
        self.retries_done += 1

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str:
        return await self.complete(messages)

    async def aclose(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()
        self._loop = None
