"""Generate curator turns for several prompts at once, each row with its own sampling seed.

``transformers``' ``generate`` draws every row of a batch from one global generator, so a row's tokens would depend
on which other rows share its batch. A sweep's streams must sample as if alone (the same seed per stream whether
its checkpoint's streams are batched or not), so this loop samples each row with a ``torch.Generator`` of its own,
after the same warping (temperature, top-k, top-p) for every row. One-at-a-time generation is this loop with a
batch of one, so the batched and the one-at-a-time sweep differ only in what left padding changes in the forward
pass (numerics: ``tests/core/sweeps/test_sweep_batched.py`` compares the logits, never sampled text).

Prompts are left-padded (the newest token of every row in the last column), with an attention mask and position
ids that count only real tokens, and a KV cache. A row ends at an end-of-sequence token; finished rows are fed the
pad token (masked out) until every row is done or ``max_new_tokens`` is reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: Any = "cpu") -> tuple[Any, Any, Any]:
    """(input_ids, attention_mask, position_ids), each (B, L) with L the longest prompt; real tokens right-aligned,
    positions 0.. over each row's real tokens (pads get 0)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


def _pick(logits: Any, generator: Any, temperature: float, top_p: float, top_k: int | None) -> int:
    """One token from one row's next-token logits (V,): greedy at temperature 0, else temperature, top-k, top-p
    (the smallest set of tokens whose probability reaches top_p, at least one) and a draw with the row's generator."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    x = logits.float() / temperature
    if top_k:
        kth = torch.topk(x, min(int(top_k), x.shape[-1])).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        before = probs.cumsum(-1) - probs  # probability of the tokens ranked above each
        drop = before >= top_p
        x = x.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def generate_rows(model: Any, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *, max_new_tokens: int,
                  temperature: float, top_p: float, top_k: int | None, eos_ids: Sequence[int],
                  pad_id: int) -> list[list[int]]:
    """New token ids per prompt (an end-of-sequence token included when one was drawn). seeds: one per prompt."""
    import torch

    if len(prompts) != len(seeds):
        raise ValueError(f"generate_rows: {len(prompts)} prompts but {len(seeds)} seeds")
    device = next(model.parameters()).device
    ids, mask, pos = left_pad(prompts, pad_id, device)
    gens = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
    stop = {int(e) for e in eos_ids}
    out: list[list[int]] = [[] for _ in prompts]
    done = [False] * len(prompts)
    past = None
    step_ids = ids
    with torch.no_grad():
        for _ in range(max_new_tokens):
            res = model(input_ids=step_ids, attention_mask=mask, position_ids=pos, past_key_values=past, use_cache=True)
            past = res.past_key_values
            last = res.logits[:, -1, :]
            nxt = []
            for i in range(len(prompts)):
                if done[i]:
                    nxt.append(pad_id)
                    continue
                tok = _pick(last[i], gens[i], temperature, top_p, top_k)
                out[i].append(tok)
                done[i] = tok in stop
                nxt.append(tok)
            if all(done):
                break
            step_ids = torch.tensor(nxt, dtype=torch.long, device=device)[:, None]
            # a finished row's pad is masked out, so it changes no other row and its own output is complete
            live = torch.tensor([0 if d else 1 for d in done], dtype=torch.long, device=device)[:, None]
            mask = torch.cat([mask, live], dim=1)
            pos = pos[:, -1:] + 1
    return out
