"""HTTP to OpenAI-compatible endpoints: the one retry policy and the one client every caller uses (the executor
policy, the content judge, the correctness self-judge).

**Retry policy** (:class:`RetryPolicy`): an attempt that fails transiently (timeout, connection error, HTTP 408,
409, 425, 429 or any 5xx, or an answer the caller cannot read) is tried again up to ``retries`` times; retry n waits
``backoff_s * 2^(n-1)``, times a uniform jitter in [0.75, 1.25], at most ``backoff_max_s`` (None: no cap). The
jitter spreads retries of many callers in time; it never decides an outcome. A request the endpoint refuses
(another 4xx) is not retried: it does not get better. A call whose attempts all fail raises
:class:`EndpointFailed` with the number of attempts and the last reason, which the caller turns into ``unmeasured``
(an infrastructure failure, never a task failure).

**Client**: httpx (a base dependency) for every request, synchronous (:func:`post_json`) and asynchronous
(:class:`HttpxTransport`); the executor may use aiohttp instead (:class:`AiohttpTransport`, about 3x less CPU per
call at 128 calls in flight, bench/executor_throughput.py). Both transports map a transport error to
:class:`Retry` with the same reason text.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 425, 429})


def retryable_status(status: int) -> bool:
    """A status worth another attempt: request timeout, conflict, too early, rate limit, or the server's failure."""
    return status in RETRY_STATUS or status >= 500


class Retry(Exception):
    """One attempt failed transiently; the message is the reason."""


class Fatal(Exception):
    """One attempt failed in a way another attempt would not change (e.g. HTTP 400); the message is the reason."""


class EndpointFailed(Exception):
    """Every attempt of a call failed (or one failed fatally): ``attempts`` made, ``reason`` of the last."""

    def __init__(self, attempts: int, reason: str):
        super().__init__(f"{attempts} attempt(s): {reason}")
        self.attempts = attempts
        self.reason = reason


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more attempts after the first; retry n (1-based) waits :meth:`delay` (n) seconds."""

    retries: int
    backoff_s: float
    backoff_max_s: float | None = None

    def delay(self, retry: int) -> float:
        """``backoff_s * 2^(retry-1) * U(0.75, 1.25)``, at most ``backoff_max_s``."""
        wait = self.backoff_s * 2 ** (retry - 1) * random.uniform(0.75, 1.25)
        return wait if self.backoff_max_s is None else min(wait, self.backoff_max_s)

    async def arun(self, attempt: Callable[[], Awaitable[T]], on_retry: Callable[[], None] | None = None) -> T:
        """``await attempt()`` until it returns, raises :class:`Fatal`, or the retries are spent (then
        :class:`EndpointFailed`). ``on_retry`` is called before each retry's wait (counters)."""
        last = "no attempt"
        for n in range(self.retries + 1):
            if n:
                if on_retry is not None:
                    on_retry()
                await asyncio.sleep(self.delay(n))
            try:
                return await attempt()
            except Retry as e:
                last = str(e)
            except Fatal as e:
                raise EndpointFailed(n + 1, str(e)) from None
        raise EndpointFailed(self.retries + 1, last)

    def run(self, attempt: Callable[[], T], on_retry: Callable[[], None] | None = None) -> T:
        """The synchronous :meth:`arun` (the waits are ``time.sleep``)."""
        last = "no attempt"
        for n in range(self.retries + 1):
            if n:
                if on_retry is not None:
                    on_retry()
                time.sleep(self.delay(n))
            try:
                return attempt()
            except Retry as e:
                last = str(e)
            except Fatal as e:
                raise EndpointFailed(n + 1, str(e)) from None
        raise EndpointFailed(self.retries + 1, last)


# ------------------------------------------------------------------------------------------------------------
# The client


def _httpx_reason(e: Exception, timeout_s: float) -> str:
    import httpx

    if isinstance(e, httpx.TimeoutException):
        return f"timeout after {timeout_s:g} s ({type(e).__name__})"
    return f"{type(e).__name__}: {str(e)[:200]}"


def post_json(client: Any, url: str, body: dict[str, Any], *, headers: dict[str, str] | None = None,
              timeout_s: float) -> tuple[int, str]:
    """One synchronous POST with an ``httpx.Client``: (status, text); a transport error raises :class:`Retry`."""
    import httpx

    try:
        resp = client.post(url, json=body, headers=headers)
    except httpx.HTTPError as e:
        raise Retry(_httpx_reason(e, timeout_s)) from e
    return resp.status_code, resp.text


class HttpxTransport:
    """Asynchronous POST/GET to one URL over httpx. ``concurrency`` connections in all, spread over clients of
    ``per_client`` connections each, chosen by the caller's slot: httpcore's pool scans every connection on every
    request event, so one pool of 128 costs more CPU than 32 pools of 4 (bench/executor_throughput.py)."""

    name = "httpx"

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, concurrency: int = 1,
                 per_client: int = 1):
        import httpx

        self._httpx = httpx
        self.url = url
        self.per_client = max(1, per_client)
        self.timeout_s = timeout_s
        tls = _tls_context()  # one CA bundle load for all shards
        self.clients = [
            httpx.AsyncClient(timeout=timeout_s, verify=tls, headers=headers,
                              limits=httpx.Limits(max_connections=self.per_client,
                                                  max_keepalive_connections=self.per_client))
            for _ in range(-(-max(1, concurrency) // self.per_client))
        ]

    async def post(self, slot: int, body: dict[str, Any]) -> tuple[int, str]:
        try:
            resp = await self.clients[slot // self.per_client].post(self.url, json=body)
            return resp.status_code, resp.text
        except self._httpx.HTTPError as e:
            raise Retry(_httpx_reason(e, self.timeout_s)) from e

    async def get(self, url: str) -> tuple[int, str]:
        """One GET for server metadata; (0, reason) when the server cannot be reached."""
        try:
            resp = await self.clients[0].get(url)
            return resp.status_code, resp.text
        except self._httpx.HTTPError as e:
            return 0, f"{type(e).__name__}: {e}"

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


class AiohttpTransport:
    """The same as :class:`HttpxTransport` over aiohttp (one session, ``concurrency`` connections)."""

    name = "aiohttp"

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, concurrency: int = 1):
        import aiohttp

        self._aiohttp = aiohttp
        self.url = url
        self.session = aiohttp.ClientSession(
            headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s),
            connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency),
        )
        self.timeout_s = timeout_s

    async def post(self, slot: int, body: dict[str, Any]) -> tuple[int, str]:
        try:
            async with self.session.post(self.url, json=body) as resp:
                return resp.status, await resp.text()
        except asyncio.TimeoutError as e:
            raise Retry(f"timeout after {self.timeout_s:g} s") from e
        except self._aiohttp.ClientError as e:
            raise Retry(f"{type(e).__name__}: {str(e)[:200]}") from e

    async def get(self, url: str) -> tuple[int, str]:
        """One GET for server metadata; (0, reason) when the server cannot be reached."""
        try:
            async with self.session.get(url) as resp:
                return resp.status, await resp.text()
        except (asyncio.TimeoutError, self._aiohttp.ClientError) as e:
            return 0, f"{type(e).__name__}: {e}"

    async def aclose(self) -> None:
        await self.session.close()


def _tls_context() -> Any:
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())
