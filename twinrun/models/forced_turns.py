"""A test stand-in for the curator's sampling: forced turns, so a plumbing test does not depend on which tokens a
tiny model samples (issue 34: torch picks other CPU kernels on other CPUs, the tiny curator then samples other
tokens, and a test that needed one of its calls to apply goes red on one machine and green on another). It lives in
models, not twinrun.testing: both backends' production paths look for it in the curator's folder, and production
code imports no test helper.

A *forced curator* is a model folder (a tiny Qwen3's weights, tokenizer and chat template, unchanged) that also
holds :data:`FORCED_TURNS_FILE`: the text of each curator turn. Both backends generate with the real
model, and where the folder holds that file every sampled token is replaced by the script's next token (the loss,
the log-probs and the tool loop are the backends' own; only the choice of token is scripted):

- TRL: :func:`install_forced_turns` adds :class:`ForcedTurns` as a transformers logits processor to the model's
  ``generate`` (the path GRPOTrainer generates through on CPU, both the accumulated tool loop and per_position);
- verl: the transformers rollout server (``backends/verl/hf_rollout.py``) asks :meth:`ForcedTurns.next_token`
  for each token, and reports the model's own tempered log-prob of it, as for a sampled one.

Which turn: the number of tool results already in the sequence (``<tool_response>`` blocks, the Qwen3/Hermes
template's; not the assistant headers, which verl's accumulated tool loop renders twice per turn); turn ``k`` is
forced to ``turns[min(k, len(turns) - 1)]``, then the end-of-turn token, counted from the last generation prompt
(``<|im_start|>assistant\\n`` for Qwen3). Stateless: the rule reads only the token ids, so it works for
left-padded batches, multi-turn tool loops and per_position prompts alike. :func:`forced_curator_folder` writes
such a folder; the spec names it with ``curator.model=<folder>`` (a local path), so a forced run's spec and records
say what generated.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FORCED_TURNS_FILE = "twinrun_forced_turns.json"
TOOL_RESULT = "<tool_response>"  # how the Qwen3 (Hermes) template opens a tool result


class ForcedTurns:
    """The scripted token choice of a forced curator (see the module docstring)."""

    def __init__(self, tokenizer: Any, turns: Sequence[str]):
        if not turns:
            raise ValueError(f"{FORCED_TURNS_FILE}: no turns (fix: list at least one turn's text)")
        probe = [{"role": "user", "content": "x"}]
        with_header = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        without = tokenizer.apply_chat_template(probe, tokenize=False)
        header = with_header[len(without):]
        self.header = tokenizer.encode(header, add_special_tokens=False)
        if not self.header:
            raise ValueError(f"{FORCED_TURNS_FILE}: the chat template adds no generation prompt to find turns by")
        tool = [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {}}}]}, {"role": "tool", "content": "x"}]
        if TOOL_RESULT not in tokenizer.apply_chat_template(probe + tool, tokenize=False):
            raise ValueError(f"{FORCED_TURNS_FILE}: the chat template does not wrap tool results in {TOOL_RESULT}")
        self.tool_result = tokenizer.encode(TOOL_RESULT, add_special_tokens=False)
        eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.turns = [list(tokenizer.encode(t, add_special_tokens=False)) + [eos] for t in turns]

    def next_token(self, ids: Sequence[int]) -> int:
        """The forced next token after ``ids`` (prompt and the tokens generated so far, any left padding)."""
        ids = list(ids)
        starts = _find(ids, self.header)
        if not starts:
            raise ValueError("forced turns: no generation prompt in the sequence (fix: render with "
                             "add_generation_prompt=True)")
        turn = len(_find(ids[:starts[-1]], self.tool_result))
        script = self.turns[min(turn, len(self.turns) - 1)]
        done = len(ids) - starts[-1] - len(self.header)
        return script[min(done, len(script) - 1)]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        """transformers ``LogitsProcessor``: every token but the forced one gets -inf."""
        import torch

        forced = torch.tensor([self.next_token(row) for row in input_ids.tolist()], device=scores.device)
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0], device=scores.device), forced] = 0.0
        return out


def _find(ids: list[int], pattern: list[int]) -> list[int]:
    """Start of every occurrence of ``pattern`` in ``ids``."""
    n, first = len(pattern), pattern[0]
    return [i for i in range(len(ids) - n + 1) if ids[i] == first and ids[i:i + n] == pattern]


def forced_turns(model_path: str | Path, tokenizer: Any = None) -> ForcedTurns | None:
    """The folder's forced turns, or None for any other model (a hub id, a plain folder)."""
    file = Path(model_path) / FORCED_TURNS_FILE
    if not file.is_file():
        return None
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
    return ForcedTurns(tokenizer, json.loads(file.read_text())["turns"])


def install_forced_turns(model: Any, forced: ForcedTurns) -> None:
    """Make ``model.generate`` (an instance attribute; TRL unwraps to this module) apply ``forced`` last."""
    from transformers import LogitsProcessorList

    generate = model.generate

    def forced_generate(*args: Any, **kwargs: Any) -> Any:
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(forced)
        return generate(*args, logits_processor=processors, **kwargs)

    model.generate = forced_generate


def forced_curator_folder(model: str | Path, out: str | Path, turns: Sequence[str]) -> Path:
    """Copy the model folder ``model`` to ``out`` and script its turns; returns ``out`` (absolute)."""
    out = Path(out).resolve()
    shutil.copytree(model, out, ignore=shutil.ignore_patterns(".complete", "*.transcripts.json"))
    (out / FORCED_TURNS_FILE).write_text(json.dumps({"turns": list(turns)}, indent=1) + "\n")
    return out


def curate_turns(group_size: int, name: str = "forced-tips") -> list[str]:
    """A curation rollout's worth of valid turns (accumulated shape: one per position, then the closing reply):
    insert a skill, update it at each later position but the last, delete it at the last; every operation applies
    to the rollout's repository. In the per_position shape every position gets the first turn (the insert): it
    applies at position 1 and is an invalid insert of an existing name after it."""
    from twinrun.core.curation.toolcalls import format_curate_call
    from twinrun.models.warmstart import FINAL_REPLY

    def body(text: str) -> str:
        return f"---\nname: {name}\ndescription: pick and put tasks\n---\n{text}\n"

    insert = [{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": body("Take the object.")}}]
    update = [{"function": "skill_update", "arguments": {"skill_name": name, "new_content": body("Put it there.")}}]
    delete = [{"function": "skill_delete", "arguments": {"skill_name": name}}]
    ops = [insert] + [update] * max(0, group_size - 2) + ([delete] if group_size > 1 else [])
    return ["<think>\n\n</think>\n\n" + format_curate_call(o) for o in ops] + [FINAL_REPLY]


__all__ = ["FORCED_TURNS_FILE", "ForcedTurns", "curate_turns", "forced_curator_folder", "forced_turns",
           "install_forced_turns"]
