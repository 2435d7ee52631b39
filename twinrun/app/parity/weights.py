"""How far apart two updates of the same weights are: ``||dW_trl - dW_verl|| / ||dW_trl||`` per tensor group and in
total (pure numpy over name -> array mappings; the callers load safetensors files)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from twinrun.core.errors import TwinrunError


def tensor_group(name: str) -> str:
    """The group a parameter is reported in: ``[layers.N.]kind`` with kind one of embed, attn, mlp, norm,
    lm_head (else the owning module's name). ``model.layers.0.self_attn.q_proj.weight`` -> ``layers.0.attn``;
    ``model.layers.1.post_attention_layernorm.weight`` -> ``layers.1.norm``; ``model.norm.weight`` -> ``norm``."""
    parts = name.split(".")
    prefix = ""
    if "layers" in parts:
        i = parts.index("layers")
        if i + 1 < len(parts):
            prefix = f"layers.{parts[i + 1]}."
    owner = parts[-2] if len(parts) >= 2 else parts[-1]
    if "norm" in owner:
        kind = "norm"
    elif "embed" in owner:
        kind = "embed"
    elif owner == "lm_head":
        kind = "lm_head"
    elif any("attn" in p for p in parts):
        kind = "attn"
    elif "mlp" in parts:
        kind = "mlp"
    else:
        kind = owner
    return prefix + kind


def _group_order(g: str) -> tuple[int, int, str]:
    if g.startswith("layers."):
        return (1, int(g.split(".")[1]), g)
    return ((0 if g == "embed" else 2), 0, g)


def update_difference(
    initial: Mapping[str, Any], trl: Mapping[str, Any], verl: Mapping[str, Any], *, ignore: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Compare ``dW_trl = trl - initial`` with ``dW_verl = verl - initial``.

    All three map parameter names to arrays (float, same shapes); every name of ``initial`` (less ``ignore``,
    e.g. a tied ``lm_head.weight``) must be in both updates. Returns ``{"total": row, "groups": [row, ...]}``,
    a row being ``{"group", "params", "rel_diff", "norm_trl", "norm_verl", "norm_diff", "cosine"}`` with
    ``rel_diff = ||dW_trl - dW_verl|| / ||dW_trl||`` (inf when TRL did not move the group but verl did, 0 when
    neither moved it)."""
    names = [n for n in initial if n not in ignore]
    missing = [n for n in names if n not in trl or n not in verl]
    if missing:
        raise TwinrunError(f"weights: {missing[0]} missing from an update ({len(missing)} names; fix: both "
                           "trainers must export the full model under HF names)")
    acc: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for n in names:
        w0 = np.asarray(initial[n], dtype=np.float64)
        a = np.asarray(trl[n], dtype=np.float64) - w0
        b = np.asarray(verl[n], dtype=np.float64) - w0
        if a.shape != w0.shape or b.shape != w0.shape:
            raise TwinrunError(f"weights: {n} has shapes {w0.shape}, {a.shape}, {b.shape} (fix: the same model)")
        g = tensor_group(n)
        acc.setdefault(g, np.zeros(4))
        acc[g] += [float(np.sum((a - b) ** 2)), float(np.sum(a * a)), float(np.sum(b * b)), float(np.sum(a * b))]
        counts[g] = counts.get(g, 0) + int(w0.size)
    groups = [_row(g, acc[g], counts[g]) for g in sorted(acc, key=_group_order)]
    total = _row("total", sum(acc.values(), np.zeros(4)), sum(counts.values()))
    return {"total": total, "groups": groups}


def _row(group: str, s: np.ndarray, n: int) -> dict[str, Any]:
    diff, ta, tb, ab = (float(x) for x in s)
    na, nb, nd = math.sqrt(ta), math.sqrt(tb), math.sqrt(diff)
    rel = nd / na if na > 0 else (0.0 if nd == 0 else math.inf)
    cos = ab / (na * nb) if na > 0 and nb > 0 else None
    return {"group": group, "params": n, "rel_diff": rel, "norm_trl": na, "norm_verl": nb, "norm_diff": nd,
            "cosine": cos}
