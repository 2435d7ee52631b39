"""Shared pieces of the spec models: the strict base model, the one-line error type and the literal types."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from twinrun.core.errors import TwinrunError

SPEC_VERSION = 1

Backend = Literal["trl", "verl"]
Estimator = Literal["grpo", "dr_grpo", "rloo", "gigpo"]
ContextShape = Literal["per_position", "accumulated"]


class SpecError(TwinrunError, ValueError):
    """A spec that cannot be used; ``str(err)`` is one line naming field, value and fix."""


class _Strict(BaseModel):
    # allow_inf_nan=False: `--set optimizer.lr=.inf` (or nan) is refused like any other bad number
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)
