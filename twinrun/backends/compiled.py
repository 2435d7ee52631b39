"""What a backend's `compile_spec(spec)` returns: native config + realised counts + knob settings.

Pure python: `twinrun plan` builds these for every backend with only base dependencies installed.
Counts are re-derived from the *native* config after `spec.overrides` were applied, so an override that
changes the amount of work is caught by `plan` (the guard against 64-vs-32 trajectories per step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twinrun.core.errors import TwinrunError

COUNT_NAMES = (
    "curation_trajectories",  # curation rollouts (GRPO samples) per training step
    "executor_episodes",  # executor episodes per training step (positions x rollouts, less shared position 1)
    "training_rows",  # training sequences per step: one per rollout (accumulated) or per (rollout, position)
    "optimizer_updates",  # optimizer steps per training step
    "sequences_per_update",  # training rows in one optimizer update
    "training_steps",  # training steps (generation rounds) in the whole run
)


@dataclass(frozen=True)
class KnobSetting:
    """How one neutral knob is realised by one backend.

    setting: the native spelling shown to the reader (e.g. "learning_rate=1e-06").
    value: the neutral value the native setting amounts to (compared across backends).
    divergence: why this knob cannot be made equal on this backend, or None.
    """

    setting: str
    value: Any
    divergence: str | None = None


@dataclass
class CompiledBackend:
    backend: str
    framework: str  # pinned framework version the mapping was written against
    config: dict[str, Any]  # native keyword arguments / hydra overrides, fully pinned
    counts: dict[str, int]
    knobs: dict[str, KnobSetting] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "config": self.config,
            "counts": self.counts,
            "knobs": {k: {"setting": v.setting, "value": v.value, "divergence": v.divergence} for k, v in self.knobs.items()},
        }


def apply_native_overrides(config: dict[str, Any], overrides: dict[str, Any], backend: str) -> dict[str, Any]:
    """Apply `spec.overrides[backend]` to the compiled native config (unknown keys are allowed: they are the
    framework's, and the framework validates them; plan shows them)."""
    out = dict(config)
    for k, v in overrides.items():
        if not isinstance(k, str) or not k:
            raise TwinrunError(f"overrides.{backend}: key {k!r} is not a knob name (fix: use the native key)")
        out[k] = v
    return out


def executor_episodes(spec: Any, trajectories: int, groups: int) -> int:
    """Executor episodes one training step plays: |G| per curation rollout, less the N-1 position-1 episodes
    per group that `share_first_position` reuses."""
    g = spec.environment.group_size
    episodes = trajectories * g
    if spec.environment.share_first_position:
        per_group = trajectories // max(groups, 1)
        episodes -= groups * (per_group - 1)
    return episodes


def context_value(spec: Any) -> str:
    """The neutral value of the ``context`` knob: the shape and, for per_position, the history window."""
    c = spec.curator
    return f"per_position, history {c.history}" if c.context == "per_position" else "accumulated"


def world_size(spec: Any) -> int:
    """Training processes in all (`resources.processes`, else nodes x GPUs per node, one per node on CPU)."""
    return spec.resources.world_size
