"""Spec section of the held-out sweep: how many replicate streams each arm plays (docs/streams.md).

A sweep's numbers are read per stream: a checkpoint's curator writes skills into one repository that every later
game of its stream retrieves from, so the games of a stream are correlated and only replicate streams measure how
much. How many streams to play says how the checkpoints are *measured*, never what is trained: the section is
left out of the spec hash (a run keeps its hash, and a training resume is not refused, when streams change); the
sweep folder records its own stream count and refuses a resume with another.
"""

from __future__ import annotations

from pydantic import Field

from twinrun.core.spec.base import _Strict


class SweepSpec(_Strict):
    streams: int = Field(
        1, ge=1, le=64,
        description="replicate streams per arm (checkpoints and baseline): each plays the same held-out games in "
        "its own order, with its own executor and curator seeds, from an empty skill repository; stream 0 is the "
        "sweep's own order and seeds. `sweep --streams` overrides it; `twinrun design` says how many decide")
