"""The warm start's training: a plain AdamW loop on assistant-turn windows (loss on the turn only), then a probe
of sampled turns on held-out prompts, and the settings both read (moved out of warmstart.py, which builds the data,
caches the result and imports this module, never the other way round)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class WarmStartSettings:
    # real curation sessions recorded (|G| executor episodes each). Two were too few: the model learnt those six
    # inputs, and on the inputs of new games (every RL step's) 70% of its turns had no parseable call (issue 17)
    transcripts: int = 12
    probe_transcripts: int = 1  # recorded apart: the probe samples turns on inputs the SFT never saw
    conversations: int = 48  # SFT conversations built from them (ops re-drawn per conversation)
    steps: int = 300
    batch_size: int = 4  # assistant-turn windows per step
    context: int | None = None  # context kept before each turn; None = the model's receptive field
    # (layers x sliding_window, exact for tiny-qwen3's sliding-window attention) or the whole conversation
    lr: float = 5e-3
    warmup_steps: int = 10
    weight_decay: float = 0.0
    seed: int = 0
    probe_samples: int = 16  # sampled turns (temperature 1) per held-out input, scored for a parseable curate call


def tokenize_conversation(tok: Any, messages: list[dict], template: str) -> tuple[list[int], list[int]]:
    from twinrun.core.curation.toolcalls import CURATE_TOOL

    if messages[-1].get("tool_calls") and len(messages) > 3:
        # a per_position row with history: the prompt is what the backends render (core's prompt_token_ids; the
        # tokenizer's own template drops earlier turns' think blocks, TRL's training variant keeps them), the
        # turn is the one the training template renders after [system, chi_i]
        from twinrun.core.curation.context_shape import prompt_token_ids

        prompt = prompt_token_ids(tok, messages[:-1], [CURATE_TOOL])
        ids, mask = tokenize_conversation(tok, [messages[0], messages[-2], messages[-1]], template)
        _, start, end = turn_windows(ids, mask, 0)[-1]
        return prompt + ids[start:end], [0] * len(prompt) + [1] * (end - start)
    enc = tok.apply_chat_template(messages, tools=[CURATE_TOOL], chat_template=template, tokenize=True,
                                  return_dict=True, return_assistant_tokens_mask=True)
    return list(enc["input_ids"]), list(enc["assistant_masks"])


def turn_windows(ids: list[int], mask: list[int], context: int) -> list[tuple[int, int, int]]:
    """One training window per assistant turn: ``(start, turn_start, end)`` with at most ``context`` tokens of
    context before the turn. Windows keep their true positions (position_ids = start..end-1), so RoPE sees the
    offsets a full-length rollout has; only the far context is left out (the cost is quadratic in length)."""
    out = []
    i, n = 0, len(mask)
    while i < n:
        if mask[i]:
            j = i
            while j < n and mask[j]:
                j += 1
            out.append((max(0, i - context), i, j))
            i = j
        else:
            i += 1
    return out


def receptive_field(config: Any) -> int | None:
    """Tokens a prediction can depend on when every layer uses sliding-window attention (else None)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None) or []
    if window and types and all(t == "sliding_attention" for t in types):
        return int(window) * len(types)
    return None


def sft(base: Path, conversations: list[list[dict]], settings: WarmStartSettings, out: Path,
        say: Callable[[str], None] | None = None, probes: list[list[dict]] | None = None) -> dict[str, Any]:
    """AdamW on assistant-turn windows (loss on the turn only), then a probe on full-length prompts (``probes``:
    held-out prompts; None = the first conversation's, which the model was trained on)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template

    tok = AutoTokenizer.from_pretrained(base)
    template = get_training_chat_template(tok)
    rows = [tokenize_conversation(tok, m, template) for m in conversations]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        context = settings.context or receptive_field(model.config) or max(len(r[0]) for r in rows)
        windows = [(r, w) for r in rows for w in turn_windows(r[0], r[1], context)]
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, settings.warmup_steps)))
        rng = random.Random(settings.seed)
        order: list[int] = []
        losses: list[float] = []
        t0 = time.perf_counter()
        for step in range(settings.steps):
            batch = []
            for _ in range(settings.batch_size):
                if not order:
                    order = list(range(len(windows)))
                    rng.shuffle(order)
                batch.append(windows[order.pop()])
            width = max(e - s for _, (s, _, e) in batch)
            ids_t = torch.full((len(batch), width), tok.pad_token_id, dtype=torch.long)
            pos = torch.zeros((len(batch), width), dtype=torch.long)
            att = torch.zeros((len(batch), width), dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for b, ((ids, _), (s, t, e)) in enumerate(batch):
                n = e - s
                ids_t[b, :n] = torch.tensor(ids[s:e])
                pos[b, :n] = torch.arange(s, e)
                att[b, :n] = 1
                labels[b, t - s:n] = torch.tensor(ids[t:e])
            loss = model(input_ids=ids_t, attention_mask=att, position_ids=pos, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if say is not None and (step + 1) % 50 == 0:
                say(f"warm start: step {step + 1}/{settings.steps} loss {sum(losses[-50:]) / 50:.3f}")
        train_s = time.perf_counter() - t0
        model.eval()
        if probes is None:
            first = conversations[0]
            probes = [first[:-1]] if first[-1].get("tool_calls") and len(first) <= 3 else [first[:2], first[:4]]
        rate = probe(model, tok, probes, template, settings)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"loss_first": losses[0], "loss_last": sum(losses[-10:]) / len(losses[-10:]), "train_s": round(train_s, 3),
            "probe_parse_rate": rate, "tokens_per_conversation": sum(len(r[0]) for r in rows) / len(rows),
            "windows": len(windows), "context": context}


def probe(model: Any, tok: Any, prompts: list[list[dict]], template: str, settings: WarmStartSettings) -> float:
    """Share of sampled turns (temperature 1, ``settings.probe_samples`` per prompt) that parse as a curate call
    with an operations list. A prompt ending in a user message is a per_position row's, rendered as the backends
    render it (:func:`~twinrun.core.curation.context_shape.prompt_token_ids`); one ending in a tool result is an
    accumulated conversation's, rendered with the training template the tool loop extends."""
    import torch

    from twinrun.core.curation.context_shape import prompt_token_ids
    from twinrun.core.curation.toolcalls import CURATE, CURATE_TOOL, parse_curator_turn

    n = max(1, settings.probe_samples)
    ok = total = 0
    for prefix in prompts:
        if prefix[-1]["role"] == "user":
            ids = prompt_token_ids(tok, prefix, [CURATE_TOOL])
        else:
            ids = tok.apply_chat_template(prefix, tools=[CURATE_TOOL], chat_template=template,
                                          add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        with torch.no_grad():
            gen = model.generate(torch.tensor([ids] * n), attention_mask=torch.ones((n, len(ids)), dtype=torch.long),
                                 do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=160,
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        for row in gen[:, len(ids):]:
            turn = parse_curator_turn(tok.decode(row, skip_special_tokens=False))
            ok += any(c.name == CURATE and not c.error and isinstance((c.arguments or {}).get("operations"), list)
                      for c in turn.calls)
            total += 1
    return ok / total
