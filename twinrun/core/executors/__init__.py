"""Executors: the frozen agent that plays the games with retrieved skills. One loop (:mod:`twinrun.core.executors.react`),
three policies, one episode record.

- ``openai`` (:mod:`.openai_http`): any OpenAI-compatible chat endpoint (a vLLM server in real runs).
- ``hf`` (:mod:`.hf`): local transformers generation.
- ``scripted`` (:mod:`.scripted`): the expert with probability ``expert_prob`` (+ ``skill_effect`` x the
  retrieved skills' relevance, :mod:`.skill_effect`); a stand-in, its numbers mean nothing about SkillOS.

Every episode records the decoding its calls carried and what the server applied (:mod:`.sampling`); all async
work runs on one :class:`BackgroundLoop` (:mod:`.loop`).

May import: errors, spec, records, envs. The ReAct loop is :mod:`.react`; :mod:`.endpoints` is the one
HTTP client and retry policy for every OpenAI-compatible endpoint (executor, judge, teacher).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twinrun.core.envs.base import GameRef
from twinrun.core.errors import TwinrunError
from twinrun.core.executors.hf import HFPolicy
from twinrun.core.executors.loop import BackgroundLoop
from twinrun.core.executors.openai_http import OpenAIPolicy
from twinrun.core.executors.scripted import ScriptedPolicy
from twinrun.core.executors.react import AsyncEnv, Episode, ExecutorPrompts, play_episode


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
    """sha256[:16] of everything that changes what the executor does: every executor spec field (decoding, the
    fields left to the server as null, extra_body) and the prompt text."""
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
        policy = ScriptedPolicy(ex.expert_prob, ex.skill_effect)
    elif ex.kind == "openai":
        key = api_key or (environ or {}).get(ex.api_key_env) or "EMPTY"
        policy = OpenAIPolicy(
            base_url=ex.base_url, model=ex.model, api_key=key, temperature=ex.temperature, top_p=ex.top_p,
            max_tokens=ex.max_tokens, top_k=ex.top_k, min_p=ex.min_p, presence_penalty=ex.presence_penalty,
            repetition_penalty=ex.repetition_penalty, extra_body=ex.extra_body, concurrency=ex.concurrency,
            timeout_s=ex.timeout_s, retries=ex.retries,
        )
    elif ex.kind == "hf":
        policy = HFPolicy(ex.model, temperature=ex.temperature, top_p=ex.top_p, max_tokens=ex.max_tokens,
                          top_k=ex.top_k, min_p=ex.min_p, repetition_penalty=ex.repetition_penalty,
                          chat_template_kwargs=ex.extra_body.get("chat_template_kwargs"), model_obj=hf_model,
                          tokenizer=hf_tokenizer)
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

