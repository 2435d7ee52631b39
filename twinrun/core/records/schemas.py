"""The neutral record schemas every backend writes: provenance, episodes, sampling, step metrics."""

from __future__ import annotations

import platform
import socket
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

Outcome = Literal["success", "failure", "unmeasured"]


class Provenance(BaseModel):
    """Where a row came from. Every record type carries one."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    twinrun_version: str
    spec_hash: str | None = None
    run_id: str | None = None
    backend: str | None = None
    framework_version: str | None = None
    checkpoint: str | None = None
    checkpoint_hash: str | None = None
    seed: int | None = None
    executor_settings_hash: str | None = None
    host: str = Field(default_factory=socket.gethostname)
    python: str = Field(default_factory=platform.python_version)
    time: float = Field(default_factory=time.time)


def twinrun_version() -> str:
    from twinrun import __version__

    return __version__


def provenance(**kw: Any) -> Provenance:
    return Provenance(twinrun_version=twinrun_version(), **kw)


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION


class SamplingRecord(BaseModel):
    """An episode's executor decoding: what every request carried, and what the server applied.

    sent: the request's fields besides model and messages (openai) or the generate() keyword arguments (hf).
    effective: decoding field -> the value the server applied (a sent value, else the server's default for the
    field); null where the server fills the field but does not report the value.
    source: where `effective` comes from (e.g. the vLLM /server_info report, or "not reported")."""

    model_config = ConfigDict(extra="forbid")
    sent: dict[str, Any]
    effective: dict[str, Any] = Field(default_factory=dict)
    source: str = "not reported"


class JudgeRecord(BaseModel):
    """The content judge a rollout's r_cnt verdicts came from: kind (rules / openai), model, the fields besides
    model and messages that every judge request carried, and sha256[:16] of those and the prompt text
    (:class:`twinrun.core.rewards.judges.JudgeSettings`)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    model: str | None = None
    sent: dict[str, Any] = Field(default_factory=dict)
    settings_hash: str


class EpisodeRecord(_Row):
    """One executor episode (one game played at one position of a curation rollout, or in a sweep)."""

    kind: Literal["episode"] = "episode"
    game_id: str
    task_type: str
    position: int | None = None  # 1-based position within the task group; None in a sweep's baseline
    outcome: Outcome
    unmeasured_reason: str | None = None
    score: float | None = None  # env score (ALFWorld 0/1, ScienceWorld 0..100, negative allowed)
    steps: int = 0
    executor_calls: int = 0
    invalid_actions: int = 0
    retrieved_skills: list[str] = Field(default_factory=list)
    wall_s: float = 0.0
    started_at: float | None = None  # unix seconds when the episode began (episodes in flight per step)
    executor_settings_hash: str | None = None
    sampling: SamplingRecord | None = None  # None: a scripted executor, or no executor call was made
    # the scripted stand-in's relevance of the retrieved skills to the game (executor.skill_effect > 0: its expert
    # chance is expert_prob + skill_effect x this); None for every other executor
    skill_relevance: float | None = None


class SequenceTokens(BaseModel):
    """One training sequence of a curation rollout, exactly as the backend trained it (a ``sequences`` entry of
    a rollouts.jsonl row): the policy's input and what followed it. ``completion_mask`` is 1 on the curator's own
    tokens (they carry the loss) and 0 on tool results (the next position's input) inside the completion.
    `twinrun parity` replays these through both trainers."""

    model_config = ConfigDict(extra="forbid")
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]

    @model_validator(mode="after")
    def _aligned(self) -> SequenceTokens:
        if len(self.completion_mask) != len(self.completion_ids):
            raise ValueError(
                f"completion_mask: {len(self.completion_mask)} flags for {len(self.completion_ids)} completion "
                "tokens (fix: one 0/1 flag per completion token)"
            )
        if any(m not in (0, 1) for m in self.completion_mask):
            raise ValueError("completion_mask: values other than 0/1 (fix: 1 = curator token, 0 = tool result)")
        return self


class StepMetrics(_Row):
    """One training step, the same schema for every backend (metrics.jsonl)."""

    kind: Literal["step"] = "step"
    step: int
    backend: str
    reward_mean: float | None
    reward_std: float | None
    reward_terms: dict[str, float | None] = Field(default_factory=dict)  # r_task, r_fc, r_cnt, r_comp means
    r_task_measured_mean: float | None = None
    positions_measured_mean: float | None = None
    positions_measured_min: int | None = None
    curation_rollouts: int
    executor_episodes: int
    executor_calls: int
    unmeasured_episodes: int
    optimizer_updates: int
    turns_missing: int | None = None  # positions played without a curator turn (curator.max_missing_turn_share gates it)
    turns_missing_share: float | None = None  # turns_missing / positions of the step
    judge_agreement: float | None = None  # judged correctness == ground truth, over positions with both known
    episodes_in_flight_mean: float | None = None  # executor episodes running at once, time-weighted (core.in_flight)
    episodes_in_flight_max: int | None = None
    anchor_singleton_share: float | None = None  # GiGPO: measured position rows alone in their anchor group
    step_adv_nonzero_share: float | None = None  # GiGPO: measured position rows with |A^S| > 1e-9
    tool_calls: int = 0
    tool_failures: int = 0
    entropy: float | None = None
    kl: float | None = None
    grad_norm: float | None = None
    clip_fraction: float | None = None
    completion_length_mean: float | None = None
    wall_s: dict[str, float] = Field(default_factory=dict)  # phase -> seconds (rollout, update, ...)
    provenance: Provenance
