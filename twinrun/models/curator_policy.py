"""A sweep's checkpoint curator: generate curator turns with an HF checkpoint (transformers).

Moved out of :mod:`twinrun.core.sweeps.sweep` so core imports no model code: :func:`twinrun.core.sweeps.sweep.sweep` takes a
``policy_factory`` and the commands pass :func:`hf_policy_factory` (the checkpoint's own generation)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinrun.core.errors import CheckpointUnreadable, DependencyMissing, InfrastructureError, TwinrunError
from twinrun.core.sweeps.sweep import ArmPlan, CuratorPolicy, SweepError, curator_seed
from twinrun.core.curation.toolcalls import CURATE_TOOL
from twinrun.core.spec.dtypes import torch_dtype_name
from twinrun.models.tiny import resolve_model

__all__ = ["HFCuratorPolicy", "hf_policy_factory", "policy_settings"]


class HFCuratorPolicy:
    """Generate curator turns with an HF checkpoint: the system prompt and chi as the chat, the ``curate`` tool
    in the chat template (as in training), the spec's sampling settings, ``curator.max_response_tokens`` new
    tokens. The seed of a generation is derived from (seed, chi), so a rerun of the same input reproduces it on
    the same hardware. torch/transformers are imported on first use."""

    def __init__(self, model_dir: str | Path, *, system_prompt: str, tools: list[dict[str, Any]], temperature: float,
                 top_p: float, top_k: int | None, max_new_tokens: int, seed: int,
                 tokenizer_dir: str | Path | None = None, device: str = "cpu", max_prompt_tokens: int | None = None,
                 dtype: str = "float32"):
        self.model_dir = str(model_dir)
        self.max_prompt_tokens = max_prompt_tokens
        self.tokenizer_dir = str(tokenizer_dir) if tokenizer_dir else None
        self.system_prompt = system_prompt
        self.tools = tools
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.device = device
        self.dtype = dtype  # the sweep's one evaluation dtype, whatever the checkpoint's config.json says
        self.loaded_dtype: str | None = None  # the dtype its weights were loaded at (torch's name)
        self._model: Any = None
        self._tok: Any = None

    def _load_tokenizer(self) -> None:
        """The checkpoint's tokenizer (else curator.model's): what renders every prompt and decodes every turn."""
        if self._tok is not None:
            return
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise DependencyMissing("sweep: transformers is missing (fix: pip install 'twinrun[trl]')") from None
        sources = [self.model_dir] + ([self.tokenizer_dir] if self.tokenizer_dir else [])
        for src in sources:
            try:
                self._tok = AutoTokenizer.from_pretrained(src)
                break
            except (OSError, ValueError):
                continue
        if self._tok is None:
            raise SweepError(f"checkpoint {self.model_dir}: no tokenizer there or at curator.model (fix: save the "
                             "tokenizer with the checkpoint)")

    def _load(self) -> None:
        if self._model is not None:
            return
        self._load_tokenizer()
        import torch
        from transformers import AutoModelForCausalLM

        try:
            # dtype= casts every floating weight on load: a bf16 export and an fp32 merge are evaluated alike
            self._model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=getattr(torch, self.dtype)
                                                               ).to(self.device)
        except TwinrunError:
            raise
        except Exception as e:  # noqa: BLE001  (a truncated file raises safetensors' own error, not OSError)
            # the sweep checked the files before its first write: they went bad since. Its arms become unmeasured
            why = (str(e).splitlines() or [""])[0][:200]
            raise CheckpointUnreadable(f"checkpoint {self.model_dir}: cannot be loaded ({type(e).__name__}: {why}; "
                                       "fix: save it again from its training run)") from None
        self._model.eval()
        self.loaded_dtype = str(next(self._model.parameters()).dtype).removeprefix("torch.")

    def prompt_ids(self, curator_input: str, history: Sequence[Any] = ()) -> list[int]:
        """The prompt token ids of one curator call: core's per_position messages (the input, and the history
        window that fits curator.max_prompt_tokens), tokenised as both backends tokenise a training row."""
        from twinrun.core.curation.context_shape import fit_history, prompt_token_ids

        self._load()
        messages, _ = fit_history(self.system_prompt, curator_input, history, limit=self.max_prompt_tokens,
                                  measure=lambda m: len(prompt_token_ids(self._tok, m, self.tools)))
        return prompt_token_ids(self._tok, messages, self.tools)

    def row_seed(self, curator_input: str, stream_seed: int | None = None) -> int:
        """The sampling seed of one generation: from the stream's curator seed and the input, so a rerun of the
        same input reproduces it on the same hardware, batched or not."""
        from twinrun.core.curation import stable_int

        return stable_int("curator-turn", self.seed if stream_seed is None else stream_seed, curator_input) % (2**31)

    def __call__(self, curator_input: str, history: Sequence[Any] = ()) -> str:
        """One turn, alone (a batch of one). ``history``: the arm's last ``curator.history`` (input, turn) pairs
        (context_shape.HistoryTurn), oldest first."""
        return self.batch([(curator_input, list(history), self.seed)])[0]

    def batch(self, requests: Sequence[tuple[str, Sequence[Any], int]]) -> list[str]:
        """Turns for several streams at once: requests are (curator input, history window, the stream's curator
        seed); one left-padded batch, each row sampled with its own seed (:mod:`twinrun.models.batched_generation`)."""
        from twinrun.models.batched_generation import generate_rows

        prompts = [self.prompt_ids(x, h) for x, h, _ in requests]
        seeds = [self.row_seed(x, s) for x, _, s in requests]
        try:
            rows = generate_rows(self._model, prompts, seeds, max_new_tokens=self.max_new_tokens,
                                 temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                                 eos_ids=self.eos_ids(), pad_id=self.pad_id())
        except RuntimeError as e:  # out of memory, device failure: infrastructure, not the curator's choice
            raise InfrastructureError(f"curator generation failed: {e}") from e
        return [self.decode(r) for r in rows]

    def decode(self, ids: Sequence[int]) -> str:
        """A turn's text from its new token ids (special tokens dropped; the tool-call tags are not special)."""
        self._load_tokenizer()
        return self._tok.decode(list(ids), skip_special_tokens=True)

    def eos_ids(self) -> list[int]:
        """Where a turn ends: the checkpoint's generation config's end-of-sequence ids, else the tokenizer's."""
        self._load()
        eos = getattr(self._model.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else self._tok.eos_token_id
        return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None]

    def pad_id(self) -> int:
        self._load()
        return int(self._tok.pad_token_id if self._tok.pad_token_id is not None else self._tok.eos_token_id)


def policy_settings(arm: ArmPlan, spec: Any, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """What a checkpoint's curator is built with, in process or served: the checkpoint, the tokenizer's fallback
    source, the system prompt and tool, the spec's sampling and lengths, the stream's curator seed."""
    assert arm.checkpoint_path is not None
    try:  # the tokenizer's fallback source when a checkpoint was saved without one
        tok_dir = resolve_model(spec.curator.model, cache_dir)
    except TwinrunError:
        tok_dir = None
    return dict(
        model_dir=arm.checkpoint_path, system_prompt=spec.read_prompt("curator_system").strip(), tools=[CURATE_TOOL],
        temperature=spec.sampling.temperature, top_p=spec.sampling.top_p, top_k=spec.sampling.top_k,
        max_new_tokens=spec.curator.max_response_tokens, seed=curator_seed(spec.seed, arm.replicate),
        tokenizer_dir=tok_dir, max_prompt_tokens=spec.curator.max_prompt_tokens,
        dtype=torch_dtype_name(spec.sweep.curator_dtype or "fp32"))  # torch's name: getattr(torch, dtype)


def hf_policy_factory(arm: ArmPlan, spec: Any, *, cache_dir: str | Path | None = None,
                      device: str = "cpu") -> CuratorPolicy:
    """The default: generate with the arm's checkpoint (tokenizer from the checkpoint, else from curator.model), on
    the device the sweep placed the arm on (``arm.device``, else ``device``), at the sweep's one evaluation dtype
    (``spec.sweep.curator_dtype``, resolved by the sweep; float32 when unset)."""
    policy = HFCuratorPolicy(**policy_settings(arm, spec, cache_dir), device=arm.device or device)
    policy._load()  # now: a checkpoint that cannot be loaded is known before any of its games is played
    return policy
