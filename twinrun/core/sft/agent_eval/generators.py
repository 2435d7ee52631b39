"""Generators: the models behind an arm (local transformers, or an OpenAI-compatible endpoint), and the
checkpoint fingerprint written into every row. Frameworks are imported on first use."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from twinrun.core.sft.agent_eval.episode import ContextFull, GenerateFn
from twinrun.core.sft.agent_eval.protocol import AgentEvalSettings
from twinrun.core.errors import InfrastructureError, TwinrunError


class _ChatTemplateDefaults:
    """A tokenizer whose apply_chat_template defaults ``enable_thinking`` (thinking on/off for Qwen3)."""

    def __init__(self, tokenizer: Any, thinking: bool):
        self._tok = tokenizer
        self._thinking = thinking

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("enable_thinking", self._thinking)
        return self._tok.apply_chat_template(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


def hf_generator(model_path: str, settings: AgentEvalSettings, *, device: str = "cpu") -> GenerateFn:
    """Local transformers generation through the executor's HF policy (twinrun.core.executors.HFPolicy), with
    the protocol's sampling settings and thinking on/off. Failures become InfrastructureError (unmeasured)."""
    from transformers import AutoConfig, AutoTokenizer

    from twinrun.core.executors import HFPolicy

    tok = _ChatTemplateDefaults(AutoTokenizer.from_pretrained(model_path), settings.thinking)
    policy = HFPolicy(model_path, temperature=settings.temperature, top_p=settings.top_p,
                      max_tokens=settings.max_tokens, device=device, tokenizer=tok)
    context = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)

    def generate(messages: list[dict[str, Any]], seed: int) -> str:
        if context is not None:
            prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            if len(tok(prompt)["input_ids"]) + settings.max_tokens > context:
                raise ContextFull(f"prompt + {settings.max_tokens} new tokens exceed {context}")
        try:
            return policy.generate(messages, seed)
        except TwinrunError:
            raise
        except Exception as e:  # noqa: BLE001 - a crashed generation is infrastructure
            raise InfrastructureError(f"hf generation failed: {type(e).__name__}: {e}") from e

    return generate


def openai_generator(base_url: str, model: str, settings: AgentEvalSettings, *, api_key: str = "EMPTY",
                     loop: Any = None) -> GenerateFn:
    """An OpenAI-compatible endpoint (vLLM) through the executor's OpenAI policy: retries, timeouts,
    unmeasured on failure. Thinking is switched with vLLM's ``chat_template_kwargs``; the seed is sent."""
    from twinrun.core.executors import BackgroundLoop, OpenAIPolicy

    loop = loop or BackgroundLoop(name="twinrun-eval-agent")
    policy = OpenAIPolicy(base_url=base_url, model=model, api_key=api_key, temperature=settings.temperature,
                          top_p=settings.top_p, max_tokens=settings.max_tokens,
                          extra_body={"chat_template_kwargs": {"enable_thinking": settings.thinking}})

    def generate(messages: list[dict[str, Any]], seed: int) -> str:
        return loop.run(policy.complete(messages, seed=seed))

    return generate


def checkpoint_fingerprint(path: str | Path) -> str | None:
    """sha256[:16] over a checkpoint folder's file names, sizes and first MiB of each file (cheap, stable)."""
    p = Path(path)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(x for x in p.iterdir() if x.is_file()):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]
