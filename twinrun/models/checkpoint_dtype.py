"""A checkpoint's config.json says the dtype of the tensors it holds.

``from_pretrained(dtype="auto")`` (what a sweep and ``eval-agent`` load with) trusts config.json's ``dtype``. verl
writes its bf16 model skeleton's dtype there whatever the saved tensors are, so fp32 weights would be evaluated as
bf16: a verl checkpoint swept at another precision than TRL's, and on a CPU without AVX-512 no generation at all
(torch's bf16 matmul packing, ``pack_vnni2``, needs AVX-512: every episode unmeasured). Both the RL merge
(backends/verl/checkpoints.py) and the SFT export (backends/sft_checkpoints.py) call :func:`record_weights_dtype`.
"""

from __future__ import annotations

import json
from pathlib import Path

from twinrun.core.records import atomic_write_json

_SAFETENSORS_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
_NOT_FLOAT = {"I64", "I32", "I16", "I8", "U8", "BOOL"}


def saved_floating_dtypes(folder: str | Path) -> set[str]:
    """The floating dtypes of the ``*.safetensors`` tensors in ``folder`` as safetensors records them ("F32",
    "BF16"), read from the files (not from config.json, which says what the writer believed)."""
    from safetensors import safe_open

    dtypes: set[str] = set()
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            dtypes.update(sf.get_slice(k).get_dtype() for k in sf.keys())
    return dtypes - _NOT_FLOAT


def weights_dtype(folder: str | Path) -> str:
    """The one floating dtype of the ``*.safetensors`` tensors in ``folder`` (torch's name, e.g. float32)."""
    floating = {_SAFETENSORS_DTYPE.get(d, d) for d in saved_floating_dtypes(folder)}
    if len(floating) != 1:
        raise ValueError(f"checkpoint: {folder} holds floating dtypes {sorted(floating)}, not one "
                         "(fix: save the checkpoint at one precision)")
    return floating.pop()


def record_weights_dtype(folder: str | Path) -> str:
    """Set config.json's ``dtype`` to the saved tensors' dtype; returns it."""
    cfg_path = Path(folder) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("torch_dtype", None)  # the older name, which from_pretrained also reads
    cfg["dtype"] = dtype = weights_dtype(folder)
    atomic_write_json(cfg_path, cfg)
    return dtype
