"""Records: the interface between stages. Crash-safe JSON lines with a schema version and provenance.

This module is the one import path for every record name; the pieces live by concept:
:mod:`~twinrun.core.records.files` (atomic writes, JSONL writer/readers), :mod:`~twinrun.core.records.schemas`
(provenance and row schemas), :mod:`~twinrun.core.records.run_dir` (a training run folder and its resume guard),
:mod:`~twinrun.core.records.lock` (one writer per folder) and :mod:`~twinrun.core.records.lifecycle` (what every
trainer does with its folder: guard, lock, resume point, truncation). A step's curation metrics live with the
advantages (:mod:`twinrun.core.advantages.step_metrics`).

May import: errors, spec.
"""

from __future__ import annotations

from twinrun.core.records.files import (
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
from twinrun.core.records.schemas import (
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
from twinrun.core.records.run_dir import RunPaths, _trained_part, guard_run_dir

__all__ = [
    "SCHEMA_VERSION", "EpisodeRecord", "JsonlTail", "JsonlWriter", "JudgeRecord", "Outcome", "Provenance",
    "RecordError", "RunPaths", "SamplingRecord", "SequenceTokens", "StepMetrics", "atomic_write_json",
    "atomic_write_text", "guard_run_dir", "provenance",
    "publishing_dir", "read_jsonl", "twinrun_version",
    # private helpers other modules and tests reach (kept importable from here)
    "_Row", "_complete_prefix_len", "_dumps_row", "_flocked", "_json_default", "_parse_line", "_trained_part",
]
