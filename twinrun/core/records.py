"""Records: the interface between stages. Crash-safe JSON lines with a schema version and provenance.

Writes are append-only and durable: each row is one `write` of one line, then flush + fsync. A crash can leave
at most one torn last line; :func:`read_jsonl` drops it (and says so), and `JsonlWriter` truncates it before
appending, so resuming never duplicates or loses a complete row.

Whole files (configs, summaries) are written with :func:`atomic_write_text` (temp file + fsync + rename).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

Outcome = Literal["success", "failure", "unmeasured"]


from twinrun.core.errors import TwinrunError
from twinrun.core.in_flight import step_in_flight


class RecordError(TwinrunError, ValueError):
    """A record file that cannot be used (one line: file, line number, problem)."""


# ------------------------------------------------------------------------------------------------------------
# File primitives


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a whole file atomically: readers see the old or the new content, never a mix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    try:  # make the rename itself durable
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


@contextmanager
def publishing_dir(dst: str | Path) -> Iterator[Path]:
    """Fill a temporary folder beside `dst`, then swap it in with one rename: readers see the old folder or the
    complete new one (a checkpoint is never half-written). On an error `dst` is left as it was."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        yield tmp
        if dst.exists():  # e.g. a step re-run after --resume replaces its own earlier export
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):  # numpy scalars/arrays without importing numpy here
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _dumps_row(row: dict[str, Any]) -> str:
    # NaN/inf are not JSON: a record never holds them (unmeasured values are null)
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise RecordError(f"record field {k}: {v} is not finite (fix: use null for unmeasured values)")
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=False)


@contextmanager
def _flocked(f: Any) -> Iterator[None]:
    """An exclusive advisory lock on an open file (between processes; a no-op where flock does not exist)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _complete_prefix_len(path: Path) -> int:
    """Byte length of the file up to and including its last newline (a torn tail line is excluded)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        step = 1 << 16
        pos = size
        while pos > 0:
            start = max(0, pos - step)
            f.seek(start)
            chunk = f.read(pos - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
    return 0


class JsonlWriter:
    """Append rows to a JSONL file durably. Opening truncates a torn last line left by a crash.

    Several processes may append to one file (verl's agent-loop workers share rollouts.jsonl): each row is
    written, and a torn tail truncated, under an exclusive `flock` on the file, so rows never interleave and a
    writer opening the file never mistakes another's row in flight for a crash's torn line."""

    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._f = open(self.path, "a", encoding="utf-8")
        with _flocked(self._f):
            keep = _complete_prefix_len(self.path)
            if keep != self.path.stat().st_size:
                os.truncate(self.path, keep)

    def write(self, row: dict[str, Any] | BaseModel) -> None:
        if isinstance(row, BaseModel):
            row = row.model_dump(mode="json")
        line = _dumps_row(row) + "\n"
        with _flocked(self._f):
            self._f.write(line)
            self._f.flush()
            if self._fsync:
                os.fsync(self._f.fileno())

    def write_many(self, rows: Iterable[dict[str, Any] | BaseModel]) -> None:
        for r in rows:
            self.write(r)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | Path, *, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield complete rows. A torn final line (crash mid-write) is skipped; a bad line elsewhere is an error."""
    p = Path(path)
    if not p.exists():
        return
    with open(p, encoding="utf-8") as f:
        lines = f.readlines()
    for n, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            if strict:
                raise RecordError(f"{p}:{n}: torn last line (a crash mid-write; fix: rerun to resume)")
            return
        if line.strip():
            yield _parse_line(line, p, n)


def _parse_line(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}:{n}: not JSON ({e.msg}; fix: remove or repair the line)") from None
    if not isinstance(row, dict):
        raise RecordError(f"{path}:{n}: a JSON {type(row).__name__}, not an object (fix: one object per line)")
    return row


class JsonlTail:
    """Rows that another process appends to a JSONL file, read as they complete: each call returns the rows
    completed since the last call (a line still being written waits for its newline)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._line = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # the writer started the file again
                    self._offset = self._line = 0
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        rows = []
        for line in chunk[: end + 1].decode("utf-8").splitlines():
            self._line += 1
            if line.strip():
                rows.append(_parse_line(line, self.path, self._line))
        return rows


# ------------------------------------------------------------------------------------------------------------
# Provenance


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


# ------------------------------------------------------------------------------------------------------------
# Neutral record schemas


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
    (:class:`twinrun.core.judges.JudgeSettings`)."""

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


@dataclass(frozen=True)
class RunPaths:
    """The files of one training run directory (no defaults: the caller names the directory)."""

    root: Path

    @property
    def spec(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts.jsonl"

    @property
    def episodes(self) -> Path:
        return self.root / "episodes.jsonl"

    @property
    def rows(self) -> Path:
        """rows.jsonl: every trained row (core.training_rows.TrainingRowRecord)."""
        return self.root / "rows.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"


def guard_run_dir(paths: RunPaths, *, spec_yaml: str, resume: bool) -> None:
    """The rule every backend applies before training into `paths.root`: never overwrite a run silently; on
    resume, refuse a folder with no run or with a different spec. Writes nothing."""
    root = paths.root
    if not resume:
        if root.exists() and any(root.iterdir()):
            raise RecordError(f"--out: {str(root)!r} is not empty (fix: a new folder, or --resume to continue it)")
        return
    if not paths.spec.exists():
        raise RecordError(f"--resume: {str(root)!r} holds no run (no spec.yaml; fix: drop --resume for a new run)")
    if _trained_part(paths.spec.read_text(encoding="utf-8")) != _trained_part(spec_yaml):
        raise RecordError(f"--resume: {paths.spec} holds a different spec (fix: resume with the same spec "
                          "and --set overrides, or start a new --out)")


def _trained_part(spec_yaml: str) -> Any:
    """A spec's text less the sections that say where results are shown (a resume may change its tracker)."""
    import yaml

    from twinrun.core.spec.experiment import UNHASHED_SECTIONS

    data = yaml.safe_load(spec_yaml)
    if isinstance(data, dict):
        for k in UNHASHED_SECTIONS:
            data.pop(k, None)
    return data


# ------------------------------------------------------------------------------------------------------------
# Step metrics: the curation half, identical for every backend


def finite_or_none(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def mean_finite(values: Iterable[Any]) -> float | None:
    vals = [f for f in (finite_or_none(v) for v in values) if f is not None]
    return sum(vals) / len(vals) if vals else None


def _judge_agreement(records: Sequence[dict[str, Any]]) -> float | None:
    """Share of positions whose judged correctness (what the curator read) equals the environment's outcome, over
    positions of curation.correctness=judged rollouts where both are success/failure; None without any."""
    pairs = [(p.get("correctness"), p.get("outcome")) for r in records if r.get("correctness_source") == "judged"
             for p in r.get("positions", [])]
    known = [(c, o) for c, o in pairs if c in ("success", "failure") and o in ("success", "failure")]
    return sum(c == o for c, o in known) / len(known) if known else None


def _anchor_fields(estimator: Any, records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    if estimator is None or getattr(estimator, "estimator", None) != "gigpo" or not records:
        return {}
    from twinrun.core.anchors import anchor_stats, step_rows

    stats = anchor_stats(estimator, step_rows(records))
    return {k: stats[k] for k in ("anchor_singleton_share", "step_adv_nonzero_share")}


def curation_step_metrics(step: int, records: Sequence[dict[str, Any]], *, backend: str,
                          optimizer_updates: int, provenance: Provenance, estimator: Any = None) -> StepMetrics:
    """The fields of one StepMetrics row that come from core's curation records (rollouts.jsonl rows of one
    step), so reward means, terms and episode counts mean the same on every backend. A backend adds its
    training fields (entropy, KL, grad norm, clip fraction, lengths, tool counts, wall time) with model_copy.
    ``estimator``: the step's core EstimatorConfig; under GiGPO the anchor-group shares are computed from the
    records' own anchors and step rewards (core.anchors.anchor_stats), the rows both backends handed the estimator."""
    totals = [r["reward"]["total"] for r in records]
    measured = [t for t in totals if t is not None]
    mean = sum(measured) / len(measured) if measured else None
    std = (math.sqrt(sum((t - mean) ** 2 for t in measured) / (len(measured) - 1))
           if mean is not None and len(measured) > 1 else None)
    terms = {name: mean_finite([r["reward"][name]["value"] for r in records]) for name in ("r_task", "r_fc", "r_cnt", "r_comp")}
    # r_task pooled over every measured scored position of the step (not a mean of per-rollout ratios)
    num = sum(r["reward"]["r_task"]["numerator"] or 0.0 for r in records)
    den = sum(r["reward"]["r_task"]["denominator"] or 0 for r in records)
    positions = [int(r["positions_measured"]) for r in records]
    n_positions = sum(len(r["positions"]) for r in records)
    missing = sum(int(r["turns_missing"]) for r in records)
    flight_mean, flight_max = step_in_flight(records)
    return StepMetrics(
        step=step,
        backend=backend,
        reward_mean=mean,
        reward_std=std,
        reward_terms=terms,
        r_task_measured_mean=(num / den) if den else None,
        positions_measured_mean=(sum(positions) / len(positions)) if positions else None,
        positions_measured_min=min(positions) if positions else None,
        curation_rollouts=len(records),
        executor_episodes=sum(int(r["executor_episodes"]) for r in records),
        executor_calls=sum(int(r["executor_calls"]) for r in records),
        unmeasured_episodes=sum(int(r["unmeasured_episodes"]) for r in records),
        optimizer_updates=optimizer_updates,
        turns_missing=missing,
        turns_missing_share=(missing / n_positions) if n_positions else None,
        judge_agreement=_judge_agreement(records),
        episodes_in_flight_mean=round(flight_mean, 4) if flight_mean is not None else None,
        episodes_in_flight_max=flight_max,
        **_anchor_fields(estimator, records),
        provenance=provenance,
    )
