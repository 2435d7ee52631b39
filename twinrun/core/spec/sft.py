"""Spec sections of trajectory SFT (issue 9): the recipe and the ScienceWorld gold-path builder."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from twinrun.core.spec.base import _Strict


class GoldPathSpec(_Strict):
    """The embedded default SFT data (issue 9): ScienceWorld gold-path episodes on training variations."""

    variations: int = Field(16, ge=1, description="training variations sampled (fixed seed) from the split")
    tasks: list[str] | None = Field(None, description="ScienceWorld task names; None = all 30")
    split: Literal["train", "dev", "test"] = "train"
    max_steps: int | None = Field(None, ge=1, description="cut each gold path after this many actions")


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
    gold_path: GoldPathSpec = GoldPathSpec()

    @model_validator(mode="after")
    def _micro(self) -> SFTSpec:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"sft.micro_batch_size: {self.micro_batch_size} does not divide sft.batch_size={self.batch_size} "
                "(fix: choose a divisor)"
            )
        return self


