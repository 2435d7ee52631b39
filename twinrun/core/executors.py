"""Executors: the frozen agent that plays the games with retrieved skills. One loop (:mod:`twinrun.core.react`),
three policies, one episode record.

- ``openai``: any OpenAI-compatible chat endpoint (a vLLM server in real runs). Async; one semaphore bounds the
  in-flight calls of *every* episode sharing the policy (all episodes of a training step); per-call timeout;
  retries with exponential backoff on timeouts, connection errors, 408/409/429 and 5xx. A call that still fails
  raises InfrastructureError -> the episode is ``unmeasured`` with the reason. No action is ever substituted.
- ``hf``: local transformers generation (CPU in tests, a GPU for small models). transformers/torch are imported
  on first use. Generations are serialised on one thread (one model, no batching).
- ``scripted``: plays the environment's expert action with probability ``expert_prob`` per turn, else a random
  admissible action, from a seeded RNG. **Plumbing only**: it exists to test the harness on CPU at environment
  speed; it reads the expert plan, which a real executor never sees, so its success rates mean nothing.

All async work of a training job runs on one :class:`BackgroundLoop` (a dedicated event-loop thread), so the
semaphore and HTTP client always live on the same loop whether the caller is sync (TRL tool methods) or async on
another loop (verl's agent loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import random
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from twinrun.core.envs.base import GameRef
from twinrun.core.errors import DependencyMissing, InfrastructureError, TwinrunError
from twinrun.core.react import AsyncEnv, Episode, ExecutorPrompts, TurnView, play_episode

T = TypeVar("T")


# ------------------------------------------------------------------------------------------------------------
# The event loop every rollout coroutine runs on


class BackgroundLoop:
    """An asyncio loop on its own daemon thread.

    ``run(coro)`` from sync code, ``await arun(coro)`` from any other loop, ``submit(coro)`` for a
    concurrent.futures.Future. Calling ``run`` from the loop's own thread would deadlock and is refused."""

    def __init__(self, name: str = "twinrun-rollout"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.loop.is_closed():
            coro.close()
            raise TwinrunError("rollout loop: closed (fix: create a new runtime)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise TwinrunError("rollout loop: run() called from the loop itself (fix: await the coroutine instead)")
        return self.submit(coro).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(timeout=10)
        except Exception:  # noqa: BLE001
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


# ------------------------------------------------------------------------------------------------------------
# Policies


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


_RETRY_STATUS = {408, 409, 429}


class OpenAIPolicy:
    """Chat completions against an OpenAI-compatible endpoint, with a concurrency bound shared by all episodes
    that use this object. Counters: `calls` (logical calls), `attempts` (HTTP requests), `retries_done`,
    `failed_calls` (calls that exhausted their retries), `max_in_flight`.

    The client speaks the endpoint's JSON directly (POST /chat/completions): the openai SDK's request/response
    models cost ~3 ms of CPU per call, which at 128 calls in flight is most of a core. `http_client`:
    "aiohttp" (~0.5 ms/call), "httpx" (~1.4 ms/call; a base dependency) or "auto" (aiohttp when installed).
    A request takes a slot token from a queue of `concurrency` tokens (held for one attempt, not during
    backoff); httpx clients are sharded by slot (`connections_per_client` each) because httpcore's pool scans
    every connection on every request event (bench/executor_throughput.py)."""

    name = "openai"
    needs_expert = False

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        temperature: float = 0.4,
        top_p: float = 1.0,
        max_tokens: int = 512,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        extra_body: dict[str, Any] | None = None,
        http_client: str = "auto",
        connections_per_client: int = 4,
    ):
        if http_client not in ("auto", "aiohttp", "httpx"):
            raise TwinrunError(f"openai executor: http_client {http_client!r} is unknown (fix: auto, aiohttp or httpx)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.extra_body = dict(extra_body or {})
        self.http_client = http_client
        self.per_client = max(1, connections_per_client)
        self._transport: Any = None
        self._slots: asyncio.Queue[int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls = self.attempts = self.retries_done = self.failed_calls = 0
        self.in_flight = self.max_in_flight = 0

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
            if kind == "aiohttp":
                self._transport = _AiohttpTransport(url, headers, self.timeout_s, self.concurrency)
            else:
                self._transport = _HttpxTransport(url, headers, self.timeout_s, self.concurrency, self.per_client)
        elif loop is not self._loop:
            raise TwinrunError(
                "openai executor: used from two event loops (fix: run every episode on the runtime's BackgroundLoop)"
            )

    @property
    def transport(self) -> str | None:
        """"aiohttp" or "httpx" once the first call bound the client."""
        return None if self._transport is None else self._transport.name

    async def _post(self, slot: int, body: dict[str, Any]) -> str:
        """One HTTP attempt. Returns the text; raises _Retry / _Fatal with the reason."""
        status, text = await self._transport.post(slot, body)
        if status != 200:
            reason = f"HTTP {status}: {text[:200]}"
            if status >= 500 or status in _RETRY_STATUS:
                raise _Retry(reason)
            raise _Fatal(reason)  # a malformed request does not get better by retrying
        try:
            content = json.loads(text)["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise _Retry(f"malformed response ({type(e).__name__}: {text[:120]!r})") from e
        return content or ""

    async def complete(self, messages: list[dict[str, str]], **overrides: Any) -> str:
        """One logical call with retries. Raises InfrastructureError when every attempt failed."""
        self._bind()
        assert self._slots is not None
        self.calls += 1
        body = {"model": self.model, "messages": messages, "temperature": self.temperature, "top_p": self.top_p,
                "max_tokens": self.max_tokens, **self.extra_body, **overrides}
        last = "no attempt"
        attempt = 0
        for attempt in range(self.retries + 1):
            if attempt:
                self.retries_done += 1
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # jitter: timing only, never outcomes
            slot = await self._slots.get()  # held for the attempt only, not during backoff
            self.attempts += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await self._post(slot, body)
            except _Retry as e:
                last = str(e)
            except _Fatal as e:
                last = str(e)
                break
            finally:
                self.in_flight -= 1
                self._slots.put_nowait(slot)
        self.failed_calls += 1
        raise InfrastructureError(f"{self.base_url} failed after {attempt + 1} attempt(s): {last}")

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str:
        return await self.complete(messages)

    async def aclose(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.aclose()
        self._loop = None


class _Retry(Exception):
    pass


class _Fatal(Exception):
    pass


class _AiohttpTransport:
    name = "aiohttp"

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, concurrency: int):
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
            raise _Retry(f"timeout after {self.timeout_s:g} s") from e
        except self._aiohttp.ClientError as e:
            raise _Retry(f"{type(e).__name__}: {str(e)[:200]}") from e

    async def aclose(self) -> None:
        await self.session.close()


class _HttpxTransport:
    name = "httpx"

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float, concurrency: int, per_client: int):
        import httpx

        self._httpx = httpx
        self.url = url
        self.per_client = per_client
        self.timeout_s = timeout_s
        tls = _tls_context()  # one CA bundle load for all shards
        self.clients = [
            httpx.AsyncClient(timeout=timeout_s, verify=tls, headers=headers,
                              limits=httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client))
            for _ in range(-(-concurrency // per_client))
        ]

    async def post(self, slot: int, body: dict[str, Any]) -> tuple[int, str]:
        httpx = self._httpx
        try:
            resp = await self.clients[slot // self.per_client].post(self.url, json=body)
            return resp.status_code, resp.text
        except httpx.TimeoutException as e:
            raise _Retry(f"timeout after {self.timeout_s:g} s ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise _Retry(f"{type(e).__name__}: {str(e)[:200]}") from e

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()


def _tls_context() -> Any:
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


class HFPolicy:
    """Local transformers generation (imported on first use). One generation at a time on a dedicated thread."""

    name = "hf"
    needs_expert = False

    def __init__(self, model: str, *, temperature: float = 0.4, top_p: float = 1.0, max_tokens: int = 512,
                 device: str = "cpu", model_obj: Any = None, tokenizer: Any = None):
        self.model_name = model
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.device = device
        self._model = model_obj
        self._tok = tokenizer
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="twinrun-hf")
        self.attempts = 0

    def _load(self) -> None:
        if self._model is not None and self._tok is not None:
            return
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise DependencyMissing("executor.kind=hf: transformers is missing (fix: pip install 'twinrun[trl]')") from None
        try:
            self._tok = self._tok or AutoTokenizer.from_pretrained(self.model_name)
            self._model = self._model or AutoModelForCausalLM.from_pretrained(self.model_name).to(self.device)
        except OSError as e:
            raise TwinrunError(f"executor.model: {self.model_name!r} cannot be loaded ({e}; fix: a local model folder)") from None
        self._model.eval()

    def generate(self, messages: list[dict[str, str]], seed: int) -> str:
        import torch

        self._load()
        prompt = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self._tok(prompt, return_tensors="pt").to(self.device)
        torch.manual_seed(seed)
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id
        kw: dict[str, Any] = {"max_new_tokens": self.max_tokens, "pad_token_id": pad}
        if self.temperature > 0:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            kw.update(do_sample=False)
        with torch.no_grad():
            out = self._model.generate(**ids, **kw)
        return self._tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    async def act(self, messages: list[dict[str, str]], view: TurnView) -> str:
        self.attempts += 1
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, self.generate, messages, view.seed * 1009 + view.step)
        except TwinrunError:
            raise
        except Exception as e:  # noqa: BLE001 - a crashed generation is infrastructure
            raise InfrastructureError(f"hf generation failed: {type(e).__name__}: {e}") from e


# ------------------------------------------------------------------------------------------------------------
# The executor


@dataclass
class Executor:
    """A policy plus the ReAct settings. ``await executor.play(env, game, ...)`` -> :class:`Episode`."""

    policy: Any
    prompts: ExecutorPrompts
    max_turns: int = 30
    history: int = 3
    settings_hash: str | None = None
    include_thoughts: bool = False  # in the trajectory the curator reads

    async def play(self, env: AsyncEnv, game: GameRef, *, skills_text: str = "", skill_names: list[str] | None = None,
                   retrieve: Any = None, seed: int = 0, position: int | None = None) -> Episode:
        """Play `game` on a leased env. `retrieve(task) -> (skills_text, names)` is called after reset."""
        return await play_episode(
            env, game, self.policy, self.prompts, max_turns=self.max_turns, history=self.history,
            skills_text=skills_text, skill_names=skill_names, retrieve=retrieve, seed=seed, position=position,
            settings_hash=self.settings_hash,
        )

    async def aclose(self) -> None:
        close = getattr(self.policy, "aclose", None)
        if close is not None:
            await close()


def executor_settings_hash(executor_spec: Any, prompts: ExecutorPrompts) -> str:
    """sha256[:16] of everything that changes what the executor does (spec fields + prompt text)."""
    fields = executor_spec.model_dump(mode="json") if hasattr(executor_spec, "model_dump") else dict(executor_spec)
    blob = json.dumps({"executor": fields, "prompts": prompts.fingerprint()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_executor(spec: Any, *, prompts: ExecutorPrompts | None = None, api_key: str | None = None,
                  environ: Mapping[str, str] | None = None, hf_model: Any = None, hf_tokenizer: Any = None) -> Executor:
    """Build the executor of an ExperimentSpec. The endpoint key: `api_key`, else ``environ[spec.executor.api_key_env]``
    when the caller passes its environment (core does not read os.environ), else "EMPTY" (vLLM needs none)."""
    ex = spec.executor
    if prompts is None:
        prompts = ExecutorPrompts.from_files(spec.prompt_path("executor_system"), spec.prompt_path("executor_input"))
    policy: Any
    if ex.kind == "scripted":
        policy = ScriptedPolicy(ex.expert_prob)
    elif ex.kind == "openai":
        key = api_key or (environ or {}).get(ex.api_key_env) or "EMPTY"
        policy = OpenAIPolicy(
            base_url=ex.base_url, model=ex.model, api_key=key, temperature=ex.temperature, top_p=ex.top_p,
            max_tokens=ex.max_tokens, concurrency=ex.concurrency, timeout_s=ex.timeout_s, retries=ex.retries,
        )
    elif ex.kind == "hf":
        policy = HFPolicy(ex.model, temperature=ex.temperature, top_p=ex.top_p, max_tokens=ex.max_tokens,
                          model_obj=hf_model, tokenizer=hf_tokenizer)
    else:  # pragma: no cover - the spec's Literal prevents it
        raise TwinrunError(f"executor.kind: {ex.kind!r} is unknown (fix: scripted, openai or hf)")
    return Executor(policy, prompts, max_turns=ex.max_turns, history=ex.history,
                    settings_hash=executor_settings_hash(ex, prompts))


__all__ = [
    "BackgroundLoop",
    "Executor",
    "HFPolicy",
    "OpenAIPolicy",
    "ScriptedPolicy",
    "executor_settings_hash",
    "make_executor",
]

