"""Spec sections of trajectory SFT: the recipe (issue 9), the ScienceWorld gold-path builder, the teacher
endpoint that plays training variations (issue 15) and online stitched SFT (ROSE, issue 15)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from twinrun.core.spec.base import _Strict
from twinrun.core.spec.dtypes import Precision

# Sampling parameters a teacher request may carry; `sft.teacher.send` lists the ones that are sent. Reasoning
# models (OpenAI o-series, gpt-5) take reasoning_effort and max_completion_tokens and reject temperature,
# top_p and max_tokens: which ones an endpoint takes is a spec choice, never a code edit.
TeacherParam = Literal["temperature", "top_p", "max_tokens", "max_completion_tokens", "reasoning_effort", "seed"]
TEACHER_PARAMS: tuple[str, ...] = TeacherParam.__args__  # type: ignore[attr-defined]


class GoldPathSpec(_Strict):
    """The embedded default SFT data (issue 9): ScienceWorld gold-path episodes on training variations."""

    variations: int = Field(16, ge=1, description="training variations sampled (fixed seed) from the split")
    tasks: list[str] | None = Field(None, description="ScienceWorld task names; None = all 30")
    split: Literal["train", "dev", "test"] = "train"
    max_steps: int | None = Field(None, ge=1, description="cut each gold path after this many actions")


class TeacherSpec(_Strict):
    """The teacher behind an OpenAI-compatible endpoint (`twinrun sft-data SPEC --teacher openai`, ROSE).

    Teacher data: every variation of ``split`` (or ``variations`` of them, drawn with the spec seed) is played
    once in the AgentGym conversation, at most ``max_turns`` replies; every episode is kept, failed or not, with
    its rejected actions, and every teacher reply is trained (its visible text: a ``<think>`` block is dropped).
    """

    model: str | None = Field(None, description="model name at the endpoint (--model overrides)")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key")
    send: list[TeacherParam] = Field(
        default_factory=lambda: ["temperature", "top_p", "max_tokens", "seed"],
        description="sampling parameters sent with every request (the others are not sent)")
    temperature: float | None = Field(0.4, ge=0.0, le=2.0)
    top_p: float | None = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int | None = Field(2048, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="reasoning models' output cap")
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict, description="more request fields, sent as is")
    max_turns: int = Field(30, ge=1, description="teacher replies per episode")
    split: Literal["train", "dev", "test"] = "train"
    tasks: list[str] | None = Field(None, description="ScienceWorld task names; None = all 30")
    variations: int | None = Field(None, ge=1, description="None = every variation of the split once")
    workers: int = Field(1, ge=1, description="episodes in flight (one simulator JVM each)")
    timeout_s: float = Field(300.0, gt=0)
    retries: int = Field(3, ge=0)

    @model_validator(mode="after")
    def _sent_means_set(self) -> TeacherSpec:
        if len(set(self.send)) != len(self.send):
            raise ValueError(f"sft.teacher.send: {self.send} names a parameter twice (fix: list each once)")
        for name in self.send:
            if name != "seed" and getattr(self, name) is None:
                raise ValueError(f"sft.teacher.{name}: null but {name!r} is in sft.teacher.send "
                                 f"(fix: set sft.teacher.{name}, or drop it from send)")
        for name in ("reasoning_effort", "max_completion_tokens"):
            if getattr(self, name) is not None and name not in self.send:
                raise ValueError(f"sft.teacher.{name}: {getattr(self, name)!r} is set but not in sft.teacher.send, "
                                 f"so it would never reach the endpoint (fix: add {name!r} to send, or null it)")
        clash = set(self.send) & set(self.extra_body)
        if clash:
            raise ValueError(f"sft.teacher.extra_body: {sorted(clash)} duplicates sft.teacher.send (fix: set them "
                             "through their own fields)")
        return self


class RoseSpec(_Strict):
    """Online stitched SFT (ROSE): each round the current student plays ``student_turns`` replies on training
    variations, the teacher (``sft.teacher``) continues from the student's own state for ``teacher_turns``
    replies, and the student is fine-tuned on the teacher's replies only (loss masked elsewhere), with the
    ``sft`` recipe (lr, batch, schedule per round), continuing from the previous round's weights and, unless
    ``carry_optimizer`` is false (the published study's flaw), its optimizer state."""

    rounds: int = Field(2, ge=1)
    student_turns: int = Field(10, ge=0, description="s: the student's prefix")
    teacher_turns: int = Field(5, ge=1, description="t: the teacher's continuation (the trained turns)")
    variations_per_round: int = Field(64, ge=1, description="training variations played per round")
    epochs_per_round: int = Field(1, ge=1)
    carry_optimizer: bool = Field(True, description="continue AdamW's state across rounds")
    student_temperature: float = Field(0.4, ge=0.0, le=2.0)
    student_top_p: float = Field(1.0, gt=0.0, le=1.0)
    student_max_tokens: int = Field(512, ge=1)


class SFTSpec(_Strict):
    """Trajectory SFT (issue 9) and the warm start of a tiny curator."""

    data: str | None = Field(None, description="trajectory file (jsonl/json), relative to the spec file")
    model: str | None = Field(None, description="model to fine-tune; None = curator.model")
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    max_length: int = Field(2048, gt=0)
    batch_size: int = Field(8, ge=1, description="sequences per optimizer step (global)")
    micro_batch_size: int | None = Field(None, ge=1, description="sequences per forward/backward; None = batch_size")
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    precision: Precision | None = Field(None, description="None = curator.precision (bf16 or fp32; bfloat16, float32 "
                                        "accepted)")
    only_successful: bool = Field(False, description="train on verified successes only (SkillGym's filter)")
    literal_copies: list[str] = Field(default_factory=lambda: ["open/close OBJ"], min_length=1,
                                      description="actions counted by the literal template-copy share")
    gold_path: GoldPathSpec = GoldPathSpec()
    teacher: TeacherSpec = TeacherSpec()
    rose: RoseSpec = RoseSpec()

    @model_validator(mode="after")
    def _micro(self) -> SFTSpec:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"sft.micro_batch_size: {self.micro_batch_size} does not divide sft.batch_size={self.batch_size} "
                "(fix: choose a divisor)"
            )
        return self


