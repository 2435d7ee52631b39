"""The ``hf`` executor policy: local transformers generation (CPU in tests, a GPU for small models).

transformers/torch are imported on first use. Generations are serialised on one thread (one model, no batching).
A decoding field the spec leaves out takes the model's ``generation_config`` (as vLLM takes it from the same
file); the policy reads that config when it loads the model, records it with every episode and prints one
warning line when it sets a sampling field the spec does not state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Mapping
from typing import Any

from twinrun.core.errors import DependencyMissing, InfrastructureError, TwinrunError
from twinrun.core.executors.openai_http import print_warning
from twinrun.core.executors.sampling import ServerDefaults, decoding_warning, sampling_record
from twinrun.core.records import SamplingRecord
from twinrun.core.executors.react import TurnView

# generation_config attributes a sampling run reads when generate() is not given them
_FROM_GENERATION_CONFIG = ("top_k", "min_p", "repetition_penalty")


class HFPolicy:
    """Local transformers generation (imported on first use). One generation at a time on a dedicated thread.

    top_k (0 or -1 = off), min_p and repetition_penalty are passed to generate() when not None, else the model's
    generation_config decides; chat_template_kwargs go to the tokenizer's chat template (Qwen3: enable_thinking)."""

    name = "hf"
    needs_expert = False

    def __init__(self, model: str, *, temperature: float = 0.4, top_p: float = 1.0, max_tokens: int = 512,
                 top_k: int | None = None, min_p: float | None = None, repetition_penalty: float | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None, device: str = "cpu", model_obj: Any = None,
                 tokenizer: Any = None, warn: Callable[[str], None] | None = print_warning):
        self.model_name = model
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.min_p = min_p
        self.repetition_penalty = repetition_penalty
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.warn = warn
        self.server_defaults: ServerDefaults | None = None
        self.device = device
        self._model = model_obj
        self._tok = tokenizer
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="twinrun-hf")
        self.attempts = 0

    def _load(self) -> None:
        if self._model is None or self._tok is None:
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
        if self.server_defaults is not None:
            return
        self.server_defaults = self._generation_config_defaults()
        line = decoding_warning(f"executor model {self.model_name}", self._decoding_sent(), self.server_defaults)
        if line and self.warn is not None:
            self.warn(line)

    @property
    def sampling(self) -> bool:
        return self.temperature > 0

    def generate_kwargs(self) -> dict[str, Any]:
        """The decoding keyword arguments of every generate() call (besides the pad token id)."""
        kw: dict[str, Any] = {"max_new_tokens": self.max_tokens}
        if self.sampling:
            kw.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
            if self.top_k is not None:
                kw["top_k"] = max(self.top_k, 0)  # vLLM's -1 (off) is transformers' 0
            if self.min_p is not None:
                kw["min_p"] = self.min_p
        else:
            kw.update(do_sample=False)
        if self.repetition_penalty is not None:
            kw["repetition_penalty"] = self.repetition_penalty
        return kw

    def _decoding_sent(self) -> dict[str, Any]:
        """generate_kwargs() under the spec's field names (greedy decoding is temperature 0)."""
        kw = self.generate_kwargs()
        out = {k: kw[k] for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty") if k in kw}
        out["max_tokens"] = kw["max_new_tokens"]
        if not self.sampling:
            out["temperature"] = 0.0
        return out

    def _generation_config_defaults(self) -> ServerDefaults:
        """What generate() takes from the model's generation_config for the fields it is not given."""
        config = getattr(self._model, "generation_config", None)
        # transformers fills what the model's config leaves unset from its global defaults (5.x: top_k 50,
        # repetition_penalty 1.0, no min_p): GenerationMixin._prepare_generation_config
        global_defaults = getattr(config, "_get_default_generation_params", lambda: {})()
        defaults: dict[str, Any] = {"presence_penalty": 0.0}  # transformers has no presence penalty
        off = {"top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
        for name in _FROM_GENERATION_CONFIG:
            if name != "repetition_penalty" and not self.sampling:
                continue  # greedy decoding reads no sampling filter
            value = getattr(config, name, None)
            value = global_defaults.get(name) if value is None else value
            defaults[name] = off[name] if value is None else value
        return ServerDefaults(source=f"transformers generation_config of {self.model_name}", defaults=defaults)

    def sampling_record(self) -> SamplingRecord:
        sent = dict(self.generate_kwargs())
        if self.chat_template_kwargs:
            sent["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        record = sampling_record(self._decoding_sent(), self.server_defaults, not_reported="model not loaded yet")
        return record.model_copy(update={"sent": sent})

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text: the tokenizer's chat template with the spec's chat_template_kwargs."""
        self._load()
        return self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **self.chat_template_kwargs)

    def generate(self, messages: list[dict[str, str]], seed: int) -> str:
        import torch

        self._load()
        ids = self._tok(self.render(messages), return_tensors="pt").to(self.device)
        torch.manual_seed(seed)
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id
        kw: dict[str, Any] = {**self.generate_kwargs(), "pad_token_id": pad}
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
