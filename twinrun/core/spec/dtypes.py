"""One dtype vocabulary (issue 53): the spec's short names are the ones twinrun shows (bf16, fp32, fp16); torch's
names (bfloat16, float32, float16) are accepted wherever a spec, a --set or a sweep folder gives a dtype, and are
what is handed to torch and vLLM. curator.precision was always written short, and it is in the spec hash, so the
short name is the canonical one."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

CANONICAL = {"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16"}
TORCH_NAME = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}


def dtype_name(value: str) -> str:
    """The shown (canonical) name of a dtype in either spelling: ``bfloat16`` -> ``bf16``. Unknown names raise
    ValueError (a spec validator turns it into the one-line field error)."""
    try:
        return CANONICAL[str(value).strip().lower()]
    except KeyError:
        raise ValueError(f"{value!r} is not a dtype (fix: one of {', '.join(TORCH_NAME)}, or torch's "
                         f"{', '.join(TORCH_NAME.values())})") from None


def torch_dtype_name(value: str) -> str:
    """torch's (and vLLM's --dtype) name of a dtype in either spelling: ``bf16`` -> ``bfloat16``."""
    return TORCH_NAME[dtype_name(value)]


def either_spelling(value: Any) -> Any:
    """A pydantic before-validator: a dtype in either spelling as its canonical name (anything else unchanged, for
    the field's own Literal to refuse)."""
    if isinstance(value, str) and value.strip().lower() in CANONICAL:
        return CANONICAL[value.strip().lower()]
    return value


# a training precision (curator.precision, sft.precision) and a sweep's evaluation dtype (sweep.curator_dtype),
# each given in either spelling and kept as its canonical name
Precision = Annotated[Literal["bf16", "fp32"], BeforeValidator(either_spelling)]
EvalDtype = Annotated[Literal["bf16", "fp32", "fp16"], BeforeValidator(either_spelling)]

__all__ = ["CANONICAL", "EvalDtype", "Precision", "TORCH_NAME", "dtype_name", "either_spelling", "torch_dtype_name"]
