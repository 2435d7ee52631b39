"""The one retry policy and HTTP client of core.endpoints, as every caller meets it: the executor policy (both
transports), the content judge (sync and async) and the correctness self-judge, against a real HTTP server on
loopback (twinrun.testing.local_openai). Only the backoff's sleep is shortened where a test counts attempts."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from twinrun.core.executors import endpoints
from twinrun.core.rewards.correctness import OpenAICorrectnessJudge
from twinrun.core.executors.endpoints import EndpointFailed, Fatal, Retry, RetryPolicy, retryable_status
from twinrun.core.errors import InfrastructureError
from twinrun.core.executors import BackgroundLoop, OpenAIPolicy
from twinrun.core.rewards.judges import JudgeRequest, OpenAIJudge
from twinrun.core.skills.skill_md import Skill
from twinrun.testing.local_openai import LocalOpenAIServer

SKILL = Skill("heat-food", "Use when an object must be heated.", "- take it\n- heat it in the microwave\n")
ANSWER = '{"VALID": true, "SUCCESS": true}'  # what the content judge and the self-judge each read
TRANSPORTS = ["httpx", pytest.param("aiohttp", marks=pytest.mark.skipif(
    importlib.util.find_spec("aiohttp") is None, reason="aiohttp not installed"))]
# statuses an endpoint answers, and whether another attempt could change them
STATUSES = {400: False, 401: False, 404: False, 408: True, 409: True, 425: True, 429: True, 500: True, 501: True,
            503: True, 504: True}


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float]]:
    """Every wait the one policy computes, as (retry, seconds); the sleep itself is shortened to 1 ms."""
    seen: list[tuple[int, float]] = []
    delay = RetryPolicy.delay

    def recorded(self: RetryPolicy, retry: int) -> float:
        seen.append((retry, delay(self, retry)))
        return 0.001

    monkeypatch.setattr(RetryPolicy, "delay", recorded)
    return seen


@pytest.fixture(scope="module")
def loop():
    bg = BackgroundLoop()
    yield bg
    bg.close()


def test_retryable_statuses() -> None:
    assert {s for s in range(100, 600) if retryable_status(s)} == {408, 409, 425, 429} | set(range(500, 600))


def test_backoff_rates_over_many_draws() -> None:
    """retry n waits backoff_s * 2^(n-1) * U(0.75, 1.25), capped: checked as a distribution (mean, both ends,
    the capped share) over 4000 draws per retry, for the executor's defaults (0.5 s, cap 8 s)."""
    policy = OpenAIPolicy(base_url="http://127.0.0.1:9/v1", model="m").retry_policy()
    assert (policy.backoff_s, policy.backoff_max_s) == (0.5, 8.0)
    for retry in range(1, 7):
        centre = 0.5 * 2 ** (retry - 1)
        draws = [policy.delay(retry) for _ in range(4000)]
        if centre * 0.75 >= 8.0:
            assert set(draws) == {8.0}
            continue
        assert min(draws) >= centre * 0.75 and max(draws) <= min(centre * 1.25, 8.0)
        uncapped = [d for d in draws if d < 8.0]
        if centre * 1.25 <= 8.0:  # no draw capped: the mean is the centre (sd of the mean ~ 0.0023 * centre)
            assert abs(sum(draws) / len(draws) - centre) < 0.015 * centre
        else:  # retry 5: 8 * U(0.75, 1.25) is over 8 with probability 1/2
            assert 0.45 < 1 - len(uncapped) / len(draws) < 0.55


def test_policy_loop_counts_attempts_and_stops_on_fatal() -> None:
    calls: list[int] = []

    def failing(kind: type[Exception]):
        def attempt() -> str:
            calls.append(1)
            raise kind("nope")
        return attempt

    fast = RetryPolicy(retries=3, backoff_s=0.0)
    with pytest.raises(EndpointFailed) as e:
        fast.run(failing(Retry))
    assert (e.value.attempts, e.value.reason, len(calls)) == (4, "nope", 4)
    calls.clear()
    with pytest.raises(EndpointFailed) as e:
        asyncio.run(fast.arun(lambda: asyncio.sleep(0, result=failing(Fatal)())))
    assert (e.value.attempts, len(calls)) == (1, 1)
    retried: list[int] = []
    out = fast.run(lambda: "ok" if len(retried) == 2 else (_ for _ in ()).throw(Retry("later")),
                   on_retry=lambda: retried.append(1))
    assert out == "ok" and len(retried) == 2


def _executor_call(loop: BackgroundLoop, url: str, transport: str, retries: int) -> str:
    policy = OpenAIPolicy(base_url=url, model="m", retries=retries, http_client=transport, probe_server=False)
    try:
        return loop.run(asyncio.wait_for(policy.complete([{"role": "user", "content": "go"}]), 30))
    finally:
        loop.run(policy.aclose())


def _judges(url: str, retries: int) -> dict[str, object]:
    """One fresh judge per path (a shared one would answer the second path from its verdict cache)."""
    kw = {"base_url": url, "model": "m", "prompt": "Judge. Answer JSON.", "retries": retries}
    request = JudgeRequest(skill=SKILL, task="heat an apple", trajectory="> go\nok")
    return {
        "judge (sync)": lambda: OpenAIJudge(**kw).judge(request),
        "judge (async)": lambda: asyncio.run(OpenAIJudge(**kw).ajudge(request)),
        "self-judge (async)": lambda: asyncio.run(OpenAICorrectnessJudge(**kw).ajudge(request)),
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_client_retries_the_same_statuses_then_is_unmeasured(loop, waits, transport) -> None:
    """Per status: a retryable one is tried retries + 1 times, waiting the policy's backoff for retry 1..n, and
    ends unmeasured (the executor raises InfrastructureError; a judge's verdict is None); any other is tried
    once. The same for the executor and for every judge path."""
    retries = 2
    for status, again in STATUSES.items():
        attempts = retries + 1 if again else 1
        with LocalOpenAIServer(lambda r: ANSWER, fail=lambda i, r, s=status: s) as srv:
            waits.clear()
            with pytest.raises(InfrastructureError, match=rf"{attempts} attempt.*HTTP {status}"):
                _executor_call(loop, srv.base_url, transport, retries)
            assert srv.calls == attempts, (status, "executor")
            assert [r for r, _ in waits] == list(range(1, attempts)), status
            if transport != "httpx":
                continue  # the judges have one client; run them once
            for name, ask in _judges(srv.base_url, retries).items():
                before = srv.calls
                waits.clear()
                verdict = ask()
                assert verdict.valid is None and str(status) in verdict.reason, (status, name, verdict)
                assert srv.calls - before == attempts, (status, name)
                assert [r for r, _ in waits] == list(range(1, attempts)), (status, name)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_transient_failures_then_an_answer(loop, waits, transport) -> None:
    """Two 503s then an answer: every client answers on its third attempt after waits for retries 1 and 2."""
    def fail(i: int, r: dict) -> int | None:  # the server's request index i: attempts 1, 2 of every 3 fail
        return 503 if i % 3 < 2 else None

    with LocalOpenAIServer(lambda r: ANSWER, fail=fail) as srv:
        assert _executor_call(loop, srv.base_url, transport, retries=2) == ANSWER
        assert srv.calls == 3 and [r for r, _ in waits] == [1, 2]
        if transport == "httpx":
            for name, ask in _judges(srv.base_url, retries=2).items():
                before, waits[:] = srv.calls, []
                assert ask().valid is True, name
                assert srv.calls - before == 3 and [r for r, _ in waits] == [1, 2], name


def test_unreachable_and_slow_endpoints_are_unmeasured_with_the_transport_reason(loop, waits) -> None:
    srv = LocalOpenAIServer(lambda r: "x").start()
    dead = srv.base_url
    srv.stop()
    with pytest.raises(InfrastructureError, match="2 attempt.*ConnectError"):
        _executor_call(loop, dead, "httpx", retries=1)
    for name, ask in _judges(dead, retries=1).items():
        v = ask()
        assert v.valid is None and "failed 2 times" in v.reason and "ConnectError" in v.reason, name
    with LocalOpenAIServer(lambda r: ANSWER, latency_s=1.0) as slow:
        judge = OpenAIJudge(base_url=slow.base_url, model="m", prompt="p", retries=0, timeout_s=0.1)
        v = judge.judge(JudgeRequest(skill=SKILL))
        assert v.valid is None and "timeout after 0.1 s (ReadTimeout)" in v.reason


def test_the_module_is_the_one_retry_loop() -> None:
    """No client keeps a back-off of its own: the executor and judge modules neither sleep nor draw jitter."""
    import inspect

    from twinrun.core.rewards import openai_judge
    from twinrun.core.executors import openai_http

    for module in (openai_http, openai_judge):
        src = inspect.getsource(module)
        assert "random" not in src and "sleep(" not in src, module.__name__
    assert "sleep(" in inspect.getsource(endpoints)
