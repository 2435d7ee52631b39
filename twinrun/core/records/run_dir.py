"""A training run folder: its files (RunPaths) and the guard every backend applies before writing into it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from twinrun.core.records.files import RecordError, atomic_write_json, read_jsonl

RUN_INFO = "run.json"  # which backend writes the folder (guarded on --resume)


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

    @property
    def resolved_config(self) -> Path:
        """resolved_config.json: the backend's native config, compared on --resume (each backend its own way)."""
        return self.root / "resolved_config.json"

    @property
    def run_info(self) -> Path:
        return self.root / RUN_INFO


RunDirState = Literal["new", "resume", "restart"]


def guard_run_dir(paths: RunPaths, *, spec_yaml: str, resume: bool, backend: str | None = None) -> RunDirState:
    """The rule every backend applies before training into `paths.root`: never overwrite a run silently; on
    resume, refuse a folder with no run, another backend's run or a different spec. Reads only: every refusal
    leaves the folder as it was (the backend checks its resolved config next, also before any write).

    Returns what the backend does: "new" (an empty or absent folder), "resume", or "restart": the folder holds a
    start in which no step completed (a failed start), so nothing in it is worth keeping and it is trained again
    from step 1 (with or without --resume, with the same or a changed spec); the backend says so in one line."""
    root = paths.root
    if root.exists() and not root.is_dir():
        raise RecordError(f"--out: {str(root)!r} is a file, not a folder (fix: a folder path for the run)")
    if not root.exists() or all(_is_lock(p) for p in root.iterdir()):
        if resume:
            raise RecordError(f"--resume: {str(root)!r} holds no run (no spec.yaml; fix: drop --resume for a new run)")
        return "new"
    if not paths.spec.exists():
        raise RecordError(f"--out: {str(root)!r} is not empty and holds no twinrun run (fix: a new folder"
                          + (", or drop --resume" if resume else "") + ")")
    done = completed_steps(paths)
    if done == 0:
        return "restart"
    if not resume:
        raise RecordError(f"--out: {str(root)!r} is not empty: it holds a run with {done} completed step(s) (fix: "
                          "--resume to continue it, or a new folder)")
    recorded = recorded_backend(paths)
    if backend is not None and recorded is not None and recorded != backend:
        raise RecordError(f"--backend: {backend!r}, but {str(root)!r} holds a {recorded} run (fix: --backend "
                          f"{recorded} to resume it, or a new --out for a {backend} run)")
    if _trained_part(paths.spec.read_text(encoding="utf-8")) != _trained_part(spec_yaml):
        raise RecordError(f"--resume: {paths.spec} holds a different spec and {done} completed step(s) (fix: "
                          "resume with the same spec and --set overrides, or start a new --out)")
    return "resume"


def restart_line(paths: RunPaths, spec_yaml: str, backend: str) -> str:
    """The one line a backend prints when it trains a failed start's folder again."""
    changed = paths.spec.exists() and _trained_part(paths.spec.read_text(encoding="utf-8")) != _trained_part(spec_yaml)
    return (f"{backend}: no step of {paths.root} completed (a start that failed); training it again from step 1"
            + (" with the changed spec" if changed else ""))


def recorded_backend(paths: RunPaths) -> str | None:
    """The backend that wrote the folder: run.json's, else the ``backend`` field of resolved_config.json (runs
    written before run.json existed; verl's resolved config names it); None when neither says."""
    import json

    for path in (paths.run_info, paths.resolved_config):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("backend"), str):
            return data["backend"]
    return None


def start_run_dir(paths: RunPaths, *, spec_yaml: str, backend: str) -> None:
    """The first writes into a run folder, made after every guard passed: spec.yaml and run.json (atomically)."""
    from twinrun.core.records.files import atomic_write_text

    paths.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.spec, spec_yaml)
    atomic_write_json(paths.run_info, {"backend": backend})


def completed_steps(paths: RunPaths) -> int:
    """Training steps the folder holds a record of (metrics.jsonl rows, or exported checkpoints)."""
    rows = len(list(read_jsonl(paths.metrics))) if paths.metrics.exists() else 0
    ckpts = len(list(paths.checkpoints.glob("step-*"))) if paths.checkpoints.is_dir() else 0
    return max(rows, ckpts)


def _is_lock(p: Path) -> bool:
    from twinrun.core.records.lock import LOCK_NAME

    return p.name == LOCK_NAME


def _trained_part(spec_yaml: str) -> Any:
    """A spec's text less the sections that say where results are shown (a resume may change its tracker)."""
    import yaml

    from twinrun.core.spec.experiment import UNHASHED_SECTIONS

    data = yaml.safe_load(spec_yaml)
    if isinstance(data, dict):
        for k in UNHASHED_SECTIONS:
            data.pop(k, None)
    return data
