"""Input checks a command runs before its first write (issue 30: "fail before spending", nothing left behind by a
refusal): inputs whose errors would otherwise surface only after a run or sweep folder was created."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.core.records.run_dir import RunPaths


def check_skills(spec: Any) -> None:
    """The spec's skill repository can be built (skills.human_skills: a folder of readable SKILL.md files). Reads
    only; a bad folder is the skill loader's one-line SkillError."""
    from twinrun.core.skills.repository import SkillRepo

    SkillRepo.for_experiment(spec)


def check_sweep_out(out: str | Path) -> None:
    """A sweep's --out is a folder of its own: not a file, not a training run's folder (a sweep's files would sit
    among the run's records, and the run's lock and guards would not see them)."""
    from twinrun.core.sweeps.plan import MANIFEST, SweepError

    p = Path(out)
    if p.exists() and not p.is_dir():
        raise SweepError(f"--out: {str(p)!r} is a file, not a folder (fix: a folder for the sweep)")
    if RunPaths(p).spec.exists() and not (p / MANIFEST).exists():
        raise SweepError(f"--out: {str(p)!r} is a training run's folder (it holds spec.yaml; fix: a folder of the "
                         f"sweep's own, e.g. {str(p.with_name(p.name + '-sweep'))!r})")


def check_replicate_steps(run_dirs: Sequence[str | Path], replicate_checkpoints: Mapping[str, Sequence[int] | str]
                          ) -> None:
    """Every step a --replicates RUN:STEP names is a checkpoint of that run (main ignored a missing one)."""
    from twinrun.core.sweeps.plan import SweepError, discover_checkpoints, parse_run_dirs

    if not replicate_checkpoints:
        return
    runs = parse_run_dirs(list(run_dirs))
    for run, steps in replicate_checkpoints.items():
        if run not in runs:
            raise SweepError(f"--replicates: run {run!r} is not among the RUN_DIRs (fix: one of {sorted(runs)})")
        if steps == "all":
            continue
        have = [s for s, _ in discover_checkpoints(runs[run])]
        missing = [s for s in steps if s not in have]
        if missing:
            raise SweepError(f"--replicates: {run}:{missing[0]}: run {run!r} has no checkpoint at step {missing[0]} "
                             f"(fix: one of its steps {have})")


__all__ = ["check_replicate_steps", "check_skills", "check_sweep_out"]
