"""A training run folder: its files (RunPaths) and the guard every backend applies before writing into it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinrun.core.record_files import RecordError


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
