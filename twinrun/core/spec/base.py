"""Shared pieces of the spec models: the strict base model, the one-line error type and the literal types."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from twinrun.core.errors import TwinrunError

SPEC_VERSION = 1

# The backends a spec may name. Core lists none: `twinrun.backends.registry` registers each backend's name when it is
# imported (every command imports it before it loads a spec), so a third framework is one registry entry in the
# backends layer and no edit here. Core used on its own (reading committed records) has none registered and accepts
# any name of a backend's shape; the backends layer refuses an unknown one where it is used. A plugin table, filled
# once at import (tests add and remove a fake backend), not state a run changes.
_BACKEND_NAMES: dict[str, None] = {}


def register_backend_name(name: str) -> None:
    _BACKEND_NAMES[name] = None


def unregister_backend_name(name: str) -> None:
    _BACKEND_NAMES.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """The registered backends, in registration order (what a spec's ``backends`` may list)."""
    return tuple(_BACKEND_NAMES)


def _known_backend(name: str) -> str:
    if _BACKEND_NAMES and name not in _BACKEND_NAMES:
        raise ValueError(f"{name!r} is not a backend (fix: one of {', '.join(_BACKEND_NAMES)})")
    return name


Backend = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$"), AfterValidator(_known_backend)]
Estimator = Literal["grpo", "dr_grpo", "rloo", "gigpo"]
ContextShape = Literal["per_position", "accumulated"]


class SpecError(TwinrunError, ValueError):
    """A spec that cannot be used; ``str(err)`` is one line naming field, value and fix."""


class _Strict(BaseModel):
    # allow_inf_nan=False: `--set optimizer.lr=.inf` (or nan) is refused like any other bad number
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)
