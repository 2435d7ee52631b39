"""Records: the interface between stages. Crash-safe JSON lines with a schema version and provenance.

This module is the one import path for every record name; the pieces live by concept:
:mod:`~twinrun.core.record_files` (atomic writes, JSONL writer/readers), :mod:`~twinrun.core.record_schemas`
(provenance and row schemas), :mod:`~twinrun.core.run_dir` (a training run folder and its resume guard) and
:mod:`~twinrun.core.step_metrics` (the curation half of a step's metrics).
"""

from __future__ import annotations

from twinrun.core.record_files import (
    JsonlTail,
    JsonlWriter,
    RecordError,
    _complete_prefix_len,
    _dumps_row,
    _flocked,
    _json_default,
    _parse_line,
    atomic_write_json,
    atomic_write_text,
    publishing_dir,
    read_jsonl,
)
from twinrun.core.record_schemas import (
    SCHEMA_VERSION,
    EpisodeRecord,
    JudgeRecord,
    Outcome,
    Provenance,
    SamplingRecord,
    SequenceTokens,
    StepMetrics,
    _Row,
    provenance,
    twinrun_version,
)
from twinrun.core.run_dir import RunPaths, _trained_part, guard_run_dir
from twinrun.core.step_metrics import (
    _anchor_fields,
    _judge_agreement,
    curation_step_metrics,
    finite_or_none,
    mean_finite,
)

__all__ = [
    "SCHEMA_VERSION", "EpisodeRecord", "JsonlTail", "JsonlWriter", "JudgeRecord", "Outcome", "Provenance",
    "RecordError", "RunPaths", "SamplingRecord", "SequenceTokens", "StepMetrics", "atomic_write_json",
    "atomic_write_text", "curation_step_metrics", "finite_or_none", "guard_run_dir", "mean_finite", "provenance",
    "publishing_dir", "read_jsonl", "twinrun_version",
    # private helpers other modules and tests reach (kept importable from here)
    "_Row", "_anchor_fields", "_complete_prefix_len", "_dumps_row", "_flocked", "_json_default",
    "_judge_agreement", "_parse_line", "_trained_part",
]
