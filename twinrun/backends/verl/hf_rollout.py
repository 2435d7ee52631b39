"""An out-of-tree transformers rollout for verl 0.9.1 (rollout name ``hf``, mode ``async``).

verl 0.9.1 generates only through vLLM, SGLang or TensorRT-LLM servers; none runs on a CPU. This module gives
verl the same three pieces those backends provide, generating with plain transformers:

- :class:`HFGenerationServer`: a Ray actor holding a copy of the policy; ``generate`` is token-in/token-out
  (the `LLMServerClient` contract) and returns a `TokenOutput` stamped with the weight version
  (``extra_fields["global_steps"]``) the agent loop copies into ``min/max_global_steps``.
- :class:`HFReplica`: the `RolloutReplica` that launches one server per replica (registered as ``"hf"``).
- :class:`HFServerAdapter`: the `BaseRollout` living in the actor worker process. verl's sync trainer calls
  ``update_weights`` once per step with a generator of full ``(hf_name, tensor)`` pairs (a collective: every
  rank drains it); the replica's first rank ships the state dict to its server.

Requests are served one at a time under a lock (a tiny model on 2 cores gains nothing from batching), on a
worker thread so the actor stays responsive to control calls. The log-probs returned are those of the sampled
tokens under ``logits / temperature``, which is what verl's actor computes, so verl's rollout-vs-actor log-prob
metrics stay meaningful.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Generator
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)

from twinrun.backends.verl.names import ROLLOUT_NAME  # noqa: E402, F401 (plugin.py registers it from here)

ROLLOUT_CLASS = f"{__name__}.HFServerAdapter"


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"twinrun_hf_server_{replica_rank}{suffix}"


def sample_next(logits: torch.Tensor, *, temperature: float, top_p: float, top_k: int, generator: torch.Generator,
                forced: int | None = None) -> tuple[int, float]:
    """Sample one token from logits[V]; return (token id, log-prob under logits/temperature).

    temperature 0 = greedy (log-prob under the raw logits). top_k <= 0 or None = off; top_p 1 = off. Filtering
    only restricts where the sample may land; the returned log-prob is the unfiltered tempered one (as the actor
    recomputes it). ``forced``: a test stand-in's token (twinrun.models.forced_turns), returned with its log-prob
    instead of a sample."""
    logits = logits.float()
    if temperature is None or temperature <= 0:
        token = int(torch.argmax(logits)) if forced is None else forced
        return token, float(torch.log_softmax(logits, -1)[token])
    scaled = logits / temperature
    logp = torch.log_softmax(scaled, -1)
    if forced is not None:
        return forced, float(logp[forced])
    filtered = scaled.clone()
    if top_k is not None and 0 < top_k < filtered.numel():
        kth = torch.topk(filtered, top_k).values[-1]
        filtered[filtered < kth] = float("-inf")
    if top_p is not None and top_p < 1.0:
        sorted_logits, idx = torch.sort(filtered, descending=True)
        cum = torch.softmax(sorted_logits, -1).cumsum(-1)
        drop = cum - torch.softmax(sorted_logits, -1) >= top_p  # keep the smallest prefix reaching top_p
        filtered[idx[drop]] = float("-inf")
    probs = torch.softmax(filtered, -1)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logp[token])


class HFGenerationServer:
    """Token-in/token-out generation with transformers (one request at a time)."""

    def __init__(self, model_path: str, *, prompt_length: int, response_length: int, seed: int = 0,
                 trust_remote_code: bool = False, num_threads: int = 1):
        from transformers import AutoModelForCausalLM, GenerationConfig

        torch.set_num_threads(num_threads)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
        )
        self.model.eval()
        from twinrun.models.forced_turns import forced_turns

        self.forced = forced_turns(model_path)  # a test stand-in's scripted turns; None for every real model
        try:
            gen = GenerationConfig.from_pretrained(model_path)
            eos = gen.eos_token_id
        except (OSError, ValueError):
            eos = self.model.config.eos_token_id
        self.eos_ids = set([eos] if isinstance(eos, int) else list(eos or []))
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.global_steps: int | None = None
        self.generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()
        self.requests = 0

    # --- the generation contract -----------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **_: Any) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError("hf rollout: multimodal inputs are not supported (fix: a text-only model)")
        return await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))

    def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> TokenOutput:
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:  # as verl's vLLM server: the per-turn cap and the remaining sequence budget
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = max(1, int(max_tokens))
        stop = set(self.eos_ids) | set(params.get("stop_token_ids") or [])
        temperature = float(params.get("temperature", 1.0))
        top_p = float(params.get("top_p", 1.0))
        top_k = params.get("top_k", -1)
        top_k = int(top_k) if top_k is not None else -1
        want_logprobs = bool(params.get("logprobs", False))

        with self._lock, torch.no_grad():
            self.requests += 1
            input_ids = torch.tensor([prompt_ids], dtype=torch.long)
            out = self.model(input_ids=input_ids, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
            tokens: list[int] = []
            logps: list[float] = []
            stop_reason = "length"
            for _ in range(max_tokens):
                forced = None if self.forced is None else self.forced.next_token(prompt_ids + tokens)
                token, lp = sample_next(logits, temperature=temperature, top_p=top_p, top_k=top_k,
                                        generator=self.generator, forced=forced)
                tokens.append(token)
                logps.append(lp)
                if token in stop:
                    stop_reason = "completed"
                    break
                out = self.model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[0, -1]
        return TokenOutput(
            token_ids=tokens,
            log_probs=logps if want_logprobs else None,
            stop_reason=stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    # --- weights ---------------------------------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """Load a full (HF-named) state dict; returns how many tensors were loaded."""
        with self._lock:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            if unexpected:
                raise ValueError(f"hf rollout: unexpected weights {unexpected[:3]} (fix: same model as the actor)")
            self.model.tie_weights()
            self.global_steps = global_steps
        return len(state_dict)

    def set_global_steps(self, global_steps: int | None) -> None:
        self.global_steps = global_steps

    def get_global_steps(self) -> int | None:
        return self.global_steps

    # --- control calls verl makes on every server; nothing to free or pause on a CPU ---------------------------
    async def wake_up(self, *_: Any, **__: Any) -> None:
        return None

    async def sleep(self, *_: Any, **__: Any) -> None:
        return None

    async def abort_all_requests(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}

    async def resume_generation(self, *_: Any, **__: Any) -> None:
        return None

    async def clear_kv_cache(self, *_: Any, **__: Any) -> None:
        return None

    async def release_kv_cache(self, *_: Any, **__: Any) -> None:
        return None

    async def resume_kv_cache(self, *_: Any, **__: Any) -> None:
        return None

    async def start_profile(self, *_: Any, **__: Any) -> None:
        return None

    async def stop_profile(self, *_: Any, **__: Any) -> None:
        return None


class HFReplica(RolloutReplica):
    """One transformers server per replica. The server holds its own copy of the weights (no CUDA IPC on a CPU);
    `HFServerAdapter.update_weights` keeps it in sync with the actor."""

    async def launch_servers(self) -> None:
        cfg = self.config
        model_path = self.model_config.get("local_path", None) or self.model_config.path
        name = server_name(self.replica_rank, self.name_suffix)
        server = (
            ray.remote(HFGenerationServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(
                model_path,
                prompt_length=cfg.prompt_length,
                response_length=cfg.response_length,
                seed=int(getattr(cfg, "seed", 0) or 0) + self.replica_rank,
                trust_remote_code=bool(self.model_config.get("trust_remote_code", False)),
            )
        )
        await server.get_global_steps.remote()  # wait until the model is loaded
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"hf://{name}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


def load_replica() -> type[RolloutReplica]:
    return HFReplica


class HFServerAdapter(BaseRollout):
    """Worker-side half of the hf rollout: forwards the actor's weights to this replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any = None, *args: Any,
                 replica_rank: int | None = None, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank = replica_rank if replica_rank is not None else rank // world
        self.is_leader = rank % world == 0
        self.sleep_level = 1
        self._server = None

    def _server_handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"hf rollout: wire_format {wire_format!r} is not supported (fix: checkpoint_engine "
                             "backend naive)")
        state: dict[str, torch.Tensor] = {}

        def keep(name: str, tensor: torch.Tensor) -> None:
            if self.is_leader:
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                state[name] = full.detach().to("cpu", copy=True)

        # every rank drains the generator: producing full tensors is a collective
        if hasattr(weights, "__aiter__"):
            async for name, tensor in weights:
                keep(name, tensor)
        else:
            for name, tensor in weights:
                keep(name, tensor)
        if self.is_leader:
            await self._server_handle().update_weights.remote(state, kwargs.get("global_steps"))
