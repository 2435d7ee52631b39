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

from pydantic import Field, model_validator

from twinrun.core.spec.base import _Strict
from twinrun.core.spec.dtypes import EvalDtype

CuratorDtype = EvalDtype  # bf16 | fp32 | fp16, torch's bfloat16 | float32 | float16 accepted (shown short)


class SweepSpec(_Strict):
    streams: int = Field(
        1, ge=1, le=64,
        description="replicate streams per arm (checkpoints and baseline): each plays the same held-out games in "
        "its own order, with its own executor and curator seeds, from an empty skill repository; stream 0 is the "
        "sweep's own order and seeds. `sweep --streams` overrides it; `twinrun design` says how many decide")
    curator_dtype: CuratorDtype | None = Field(
        None,
        description="the one dtype every checkpoint of a sweep is loaded at, whatever its export saved (verl's "
        "merge is fp32, TRL's ZeRO-3 export bf16: DIVERGENCES B19): bf16, fp32 or fp16 (torch's bfloat16, float32, "
        "float16 accepted); null: curator.precision on a GPU, fp32 on CPU. Recorded in sweep.json; a folder resumes "
        "only at the dtype it was planned with")
    batch_streams: bool = Field(
        True,
        description="play a checkpoint's streams together (game g of every stream, then g+1), one curator call "
        "generating for all R inputs at once; false: each stream on its own, one sequence at a time")
    arms_per_gpu: int = Field(
        1, ge=1, le=8,
        description="checkpoint curators loaded on one GPU at a time (`sweep --gpus`); 1: each its own GPU. Above 1 "
        "only when the models fit twice over (e.g. a small curator on an 80 GB GPU)")
    curator_server: Literal["vllm", "endpoints"] | None = Field(
        None,
        description="null: each checkpoint's curator generates in the sweep's process (transformers). vllm: twinrun "
        "launches one OpenAI-compatible server per checkpoint (curator_server_command, one GPU each, stopped when "
        "its arm ends) and sends it the prompt token ids it renders, parsing the turn itself; endpoints: the "
        "user's own servers, curator_endpoints. A server that dies leaves its games unmeasured; a rerun resumes")
    curator_endpoints: list[str] = Field(
        default_factory=list,
        description="with curator_server: endpoints: one base URL (http://HOST:PORT/v1) per checkpoint, in the "
        "order `twinrun sweep` lists them (the RUN_DIRs in order, each run's steps ascending), each serving that "
        "checkpoint's weights at the stated sweep.curator_dtype")
    curator_server_command: list[str] | None = Field(
        None,
        description="with curator_server: vllm: the launch command, one argument per item, with {model} {port} "
        "{dtype} {seed} {max_model_len} filled in (null: `vllm serve {model} --port {port} --dtype {dtype} "
        "--seed {seed} ...`, twinrun.core.sweeps.served.VLLM_COMMAND)")
    curator_server_timeout_s: float = Field(
        900.0, gt=0,
        description="with curator_server: vllm: how long a launched server may take to answer /health (its model "
        "load); one that does not is stopped and the sweep says so, naming its log")
    until_decided: bool = Field(
        False, description="play streams in batches (looks) up to max_streams and stop when compare's pair verdicts "
        "are decided under a group-sequential rule that spends each claim's alpha over the looks (docs/streams.md); "
        "`sweep --until-decided` sets it")
    max_streams: int = Field(8, ge=2, le=64, description="with until_decided: the streams planned, the last look")
    streams_per_look: int = Field(2, ge=1, le=64, description="with until_decided: streams added per look (the "
                                  "first look has at least 2)")

    @model_validator(mode="after")
    def _looks_fit(self) -> "SweepSpec":
        if self.until_decided and self.streams_per_look > self.max_streams:
            raise ValueError(f"sweep.streams_per_look: {self.streams_per_look} > sweep.max_streams "
                             f"{self.max_streams} (fix: streams_per_look <= max_streams)")
        return self

    @model_validator(mode="after")
    def _served(self) -> "SweepSpec":
        if self.curator_endpoints and self.curator_server != "endpoints":
            raise ValueError(f"sweep.curator_endpoints: {len(self.curator_endpoints)} URL(s) given, but "
                             f"sweep.curator_server is {self.curator_server!r} (fix: sweep.curator_server: endpoints)")
        if self.curator_server == "endpoints" and not self.curator_endpoints:
            raise ValueError("sweep.curator_server: endpoints, but sweep.curator_endpoints is empty (fix: one base URL "
                             "per checkpoint, e.g. [http://node1:8000/v1, http://node2:8000/v1])")
        return self
