"""Spec section of experiment tracking (issue 18): where both backends, the sweep and compare report to.

Tracking says where numbers are *shown*, never what is trained: it is left out of the spec hash (a run keeps its
hash when it gains a dashboard) and a resume may change it. ``metrics.jsonl`` stays the record either way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from twinrun.core.spec.base import _Strict

TrackerName = Literal["wandb", "tensorboard", "mlflow", "none"]


class TrackingSpec(_Strict):
    """One tracker for every run of the arm: the TRL run, the verl run, their sweep and its comparison."""

    backend: TrackerName = Field("none", description="wandb, tensorboard, mlflow or none (metrics.jsonl only)")
    project: str = Field("twinrun", min_length=1, max_length=128,
                         description="wandb project / mlflow experiment / tensorboard top folder, shared by runs")
    group: str | None = Field(None, max_length=128, description="runs of one arm; None = the spec's name")
    tags: list[str] = Field(default_factory=list, description="extra tags; backend, seed and spec hash are added")
    dir: str | None = Field(
        None, description="local tracker files (tensorboard events, wandb's run files, mlflow's store); None = "
        "<run folder>/tracking. A relative path is taken from the working directory, like --out")
    offline: bool = Field(False, description="wandb: write the run locally only (upload later with `wandb sync`)")
    uri: str | None = Field(None, description="mlflow tracking URI; None = a sqlite store in dir")
    native: bool = Field(True, description="also log each framework's own metrics, under trl/ or verl/")

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        for t in v:
            if not t or len(t) > 64:
                raise ValueError(f"{t!r} is not a tag (fix: 1 to 64 characters; wandb refuses longer tags)")
        return v

    @field_validator("project", "group")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and any(c in v for c in "/\\#?%:"):
            raise ValueError(f"{v!r} holds one of / \\ # ? % : (fix: letters, digits, '-', '_' and '.')")
        return v
