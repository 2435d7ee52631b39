"""Spec section of the held-out sweep: how checkpoints are *measured* (docs/streams.md, docs/scale.md).

A sweep's numbers are read per stream: a checkpoint's curator writes skills into one repository that every later
game of its stream retrieves from, so the games of a stream are correlated and only replicate streams measure how
much. How many streams to play, at which precision the checkpoints are evaluated and where their curators run say
how the checkpoints are measured, never what is trained: the section is left out of the spec hash (a run keeps its
hash, and a training resume is not refused, when they change); the sweep folder records its own stream count and
evaluation dtype and refuses a resume with others.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from twinrun.core.spec.base import _Strict

CuratorDtype = Literal["float32", "bfloat16", "float16"]


class SweepSpec(_Strict):
    streams: int = Field(
        1, ge=1, le=64,
        description="replicate streams per arm (checkpoints and baseline): each plays the same held-out games in "
        "its own order, with its own executor and curator seeds, from an empty skill repository; stream 0 is the "
        "sweep's own order and seeds. `sweep --streams` overrides it; `twinrun design` says how many decide")
    curator_dtype: CuratorDtype | None = Field(
        None,
        description="the one dtype every checkpoint of a sweep is loaded at, whatever its export saved (verl's "
        "merge is fp32, TRL's ZeRO-3 export bf16: DIVERGENCES B19); null: curator.precision's dtype on a GPU, "
        "float32 on CPU. Recorded in sweep.json; a folder resumes only at the dtype it was planned with")
    batch_streams: bool = Field(
        True,
        description="play a checkpoint's streams together (game g of every stream, then g+1), one curator call "
        "generating for all R inputs at once; false: each stream on its own, one sequence at a time")
    arms_per_gpu: int = Field(
        1, ge=1, le=8,
        description="checkpoint curators loaded on one GPU at a time (`sweep --gpus`); 1: each its own GPU. Above 1 "
        "only when the models fit twice over (e.g. a small curator on an 80 GB GPU)")
