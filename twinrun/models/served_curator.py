"""A served checkpoint curator (``sweep.curator_server``): the in-process curator's rendering, seeds and decoding,
with the generation done by an OpenAI-compatible server (vLLM, or the user's own) holding the checkpoint.

:class:`ServedCuratorPolicy` is :class:`twinrun.models.curator_policy.HFCuratorPolicy` without the model: the same
prompt token ids (``prompt_ids``: core's per_position messages and history window, tokenised as training tokenises
them), the same per-call seed (``row_seed``), the same end-of-sequence ids, and the same decoding of the returned
token ids; only the forward passes and the draw happen in the server (:mod:`twinrun.core.sweeps.served`). The turn
is parsed by the sweep with twinrun's own parser, as every turn is. What can differ from the in-process path is the
sampler's draw for a seed (DIVERGENCES D10)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinrun.core.sweeps.sweep import ArmPlan, CuratorPolicy, PolicyFactory
from twinrun.models.curator_policy import HFCuratorPolicy, policy_settings

__all__ = ["ServedCuratorPolicy", "served_policy_factory"]


class ServedCuratorPolicy(HFCuratorPolicy):
    """Curator turns from a server: ``client`` (a :class:`twinrun.core.sweeps.served.CompletionsClient`) for this
    checkpoint; :meth:`close` stops the server twinrun launched for it (none for a user endpoint)."""

    def __init__(self, model_dir: str | Path, *, client: Any, **settings: Any):
        super().__init__(model_dir, **settings)
        self.client = client

    def _load(self) -> None:  # the weights live in the server: only the tokenizer here
        self._load_tokenizer()

    def eos_ids(self) -> list[int]:
        """Where a turn ends, as the in-process model's generation config says it: the checkpoint's
        generation_config.json, else its model config's, else the tokenizer's end-of-sequence id."""
        from transformers import AutoConfig, GenerationConfig

        self._load_tokenizer()
        try:
            gen = GenerationConfig.from_pretrained(self.model_dir)
        except OSError:
            gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(self.model_dir))
        eos = gen.eos_token_id if gen.eos_token_id is not None else self._tok.eos_token_id
        return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]

    def pad_id(self) -> int:
        self._load_tokenizer()
        return int(self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id)

    def bodies(self, requests: Sequence[tuple[str, Sequence[Any], int]]) -> list[dict[str, Any]]:
        """The ``/v1/completions`` requests of several streams' inputs: each its rendered prompt ids and its seed."""
        from twinrun.core.sweeps.served import completion_body

        stop = self.eos_ids()
        return [completion_body(self.client.model, self.prompt_ids(x, h), seed=self.row_seed(x, s),
                                temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                                max_tokens=self.max_new_tokens, stop_token_ids=stop) for x, h, s in requests]

    def batch(self, requests: Sequence[tuple[str, Sequence[Any], int]]) -> list[str]:
        """Turns for several streams at once (one request each, in flight together: the server batches them).
        The returned token ids are decoded here as the in-process path decodes its own (a server that returns no
        ids: its text, which keeps special tokens since the request says ``skip_special_tokens: false``)."""
        out = self.client.complete_many(self.bodies(requests))
        return [self.decode(ids) if ids is not None else text for ids, text in out]

    def close(self) -> None:
        self.client.close()
        if self.client.server is not None:
            self.client.server.stop()


def served_policy_factory(servers: Any, *, cache_dir: str | Path | None = None) -> PolicyFactory:
    """The policy factory of a served sweep: per checkpoint, ``servers.open(arm)`` (a launched, healthy server, or
    the user's endpoint: :class:`twinrun.core.sweeps.served.CuratorServers`) behind a :class:`ServedCuratorPolicy`
    built with exactly the settings of the in-process curator."""

    def factory(arm: ArmPlan, spec: Any) -> CuratorPolicy:
        settings = policy_settings(arm, spec, cache_dir)
        client = servers.open(arm)
        try:
            policy = ServedCuratorPolicy(settings.pop("model_dir"), client=client, **settings)
            policy._load_tokenizer()  # a checkpoint without a tokenizer fails here, and its server is stopped
        except BaseException:
            client.close()
            if client.server is not None:
                client.server.stop()
            raise
        return policy

    return factory
