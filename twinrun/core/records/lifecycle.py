"""One run folder's lifecycle, the same for every trainer (TRL and verl training, their SFT, ROSE's rounds).

What a trainer does with its ``--out`` folder, in order:

1. **guard** (reads only): another live writer (the folder's lock), the folder itself, the backend and spec that
   wrote it (:func:`~twinrun.core.records.run_dir.guard_run_dir`), and, once the backend has resolved it, its
   native config against the recorded one. A refusal leaves the folder byte for byte as it was.
2. **begin** (the first writes): the lock is taken, the guards run again under it (another writer may have
   finished with the folder since), then spec.yaml, run.json and resolved_config.json are written and, on a
   resume or a restart, the records of steps past the resume point are dropped (:func:`truncate_records`).
3. the lock is held until the ``with`` block ends; its descriptor (:attr:`RunLifecycle.lock_fd`) can be passed to
   a child process so the folder stays locked while any of the run lives.

One step convention: a resume point ``keep_steps = k`` is the number of *training* steps (1-based, checkpoint
``step-k``) that are complete. metrics.jsonl, rows.jsonl and a backend's own step logs count training steps from 1
(row ``step <= k`` is kept); rollouts.jsonl carries core's 0-based task-group step, which training step ``s + 1``
trains (row ``step < k`` is kept), and episodes.jsonl keeps the rows the kept rollouts own.

May import: errors, spec (through run_dir), records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.records.files import atomic_write_json, atomic_write_text, read_jsonl
from twinrun.core.records.lock import check_unlocked, folder_lock
from twinrun.core.records.run_dir import RunDirState, RunPaths, guard_run_dir, restart_line, start_run_dir

# compare(recorded, resolved): raise a one-line error when a resume's resolved config differs from the recorded one
CompareConfig = Callable[[dict[str, Any], dict[str, Any]], None]


def _rows_text(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows)


def truncate_records(paths: RunPaths, keep_steps: int, extra: Sequence[Path] = ()) -> None:
    """Drop the rows of training steps after ``keep_steps`` (a crash after them, before their checkpoint): those
    steps are trained again. ``extra``: a backend's own JSON-lines logs whose ``step`` is a training step (a row
    without one counts as step 0 and is kept). A file that does not exist, or loses no row, is not rewritten."""
    rollouts = list(read_jsonl(paths.rollouts)) if paths.rollouts.exists() else []
    kept_rollouts = [r for r in rollouts if int(r.get("step", 0)) < keep_steps]  # core's 0-based task-group step
    files: list[tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]] = [(paths.rollouts, rollouts, kept_rollouts)]
    for path in (paths.metrics, paths.rows, *extra):  # 1-based training steps
        if path.exists():
            rows = list(read_jsonl(path))
            files.append((path, rows, [r for r in rows if int(r.get("step", 0)) <= keep_steps]))
    if paths.episodes.exists():  # written just before each rollout row, in the same order
        episodes = list(read_jsonl(paths.episodes))
        n = sum(int(r.get("executor_episodes", 0)) for r in kept_rollouts)
        files.append((paths.episodes, episodes, episodes[:n]))
    for path, rows, kept in files:
        if path.exists() and len(kept) != len(rows):
            atomic_write_text(path, _rows_text(kept))


@dataclass
class RunLifecycle:
    """A trainer's hold on one run folder (see the module docstring); made by :func:`run_lifecycle`.

    writer: whether this process writes the folder (rank 0); the other ranks of a launch guard nothing and write
    nothing (rank 0 refuses for them). hold_lock: False where the caller already holds the folder's lock (a
    launcher whose ranks inherited it). compare: the backend's check of a recorded resolved config. folder_guard:
    a folder that is not one training run (ROSE's rounds) says its own state instead of ``guard_run_dir``."""

    paths: RunPaths
    spec_yaml: str
    backend: str
    resume: bool
    hold_lock: bool = True
    writer: bool = True
    log: Callable[[str], Any] = print
    compare: CompareConfig | None = None
    folder_guard: Callable[[], RunDirState] | None = None
    state: RunDirState = "new"
    lock_fd: int | None = None
    _stack: ExitStack = field(default_factory=ExitStack, repr=False)

    @property
    def restart(self) -> bool:
        """The folder holds a start in which no step completed: it is trained again from step 1."""
        return self.state == "restart"

    @property
    def resuming(self) -> bool:
        """A resume of a run with completed steps (not a restart)."""
        return self.state == "resume"

    def guard(self, resolved: dict[str, Any] | None = None) -> RunDirState:
        """Every read-only check, in the order a refusal is said: another writer, the folder, backend and spec;
        with ``resolved``, the recorded resolved config on resume. Returns (and keeps) the folder's state."""
        if not self.writer:
            self.state = "resume" if self.resume else "new"
            return self.state
        if self.hold_lock and self.lock_fd is None:
            check_unlocked(self.paths.root)  # another writer: refused before anything else is said or done
        if self.folder_guard is not None:
            self.state = self.folder_guard()
        else:
            self.state = guard_run_dir(self.paths, spec_yaml=self.spec_yaml, resume=self.resume, backend=self.backend)
        if resolved is not None and self.resuming and self.compare is not None and self.paths.resolved_config.exists():
            self.compare(json.loads(self.paths.resolved_config.read_text(encoding="utf-8")), resolved)
        return self.state

    def begin(self, *, resolved: dict[str, Any] | None = None, keep_steps: int | None = 0,
              extra: Sequence[Path] = (), files: dict[str, Any] | None = None) -> None:
        """The guards passed: take the lock, guard again under it, then the first writes (spec.yaml, run.json,
        ``resolved`` as resolved_config.json, ``files``: name -> JSON object beside them) and, on a resume or a
        restart, drop the records past ``keep_steps`` (0 on a restart) and of ``extra`` logs; ``keep_steps=None``:
        the framework skips the steps it recorded (SFT) and nothing is dropped. Nothing on other ranks."""
        if not self.writer:
            return
        if self.hold_lock and self.lock_fd is None:
            self.lock_fd = self._stack.enter_context(folder_lock(self.paths.root))
            self.guard(resolved)  # again under the lock: another writer may have finished with the folder since
        start_run_dir(self.paths, spec_yaml=self.spec_yaml, backend=self.backend)
        if resolved is not None:
            atomic_write_text(self.paths.resolved_config,
                              json.dumps(resolved, indent=2, sort_keys=True, default=str) + "\n")
        for name, obj in (files or {}).items():
            atomic_write_json(self.paths.root / name, obj)
        if keep_steps is not None and (self.resume or self.restart):
            truncate_records(self.paths, 0 if self.restart else keep_steps, extra)

    def say_restart(self) -> None:
        """The one line a restart is announced with (rank 0 only)."""
        if self.writer and self.restart:
            self.log(restart_line(self.paths, self.spec_yaml, self.backend))

    def finished(self, done: int, steps: int) -> bool:
        """Whether a resume finds every step already trained (said in one line on rank 0)."""
        if not (self.resume and done >= steps):
            return False
        if self.writer:
            self.log(f"{self.backend}: {self.paths.root} already holds all {steps} steps; nothing to do")
        return True

    def close(self) -> None:
        self._stack.close()
        self.lock_fd = None


@contextmanager
def run_lifecycle(paths: RunPaths, *, spec_yaml: str, backend: str, resume: bool, hold_lock: bool = True,
                  writer: bool = True, log: Callable[[str], Any] = print,
                  compare: CompareConfig | None = None,
                  folder_guard: Callable[[], RunDirState] | None = None) -> Iterator[RunLifecycle]:
    """Guard ``paths.root`` (reads only; a failed start is announced in one line) and hold it for the ``with``
    block: :meth:`RunLifecycle.begin` takes the lock and makes the first writes; the lock ends with the block."""
    life = RunLifecycle(paths, spec_yaml, backend, resume, hold_lock=hold_lock, writer=writer, log=log,
                        compare=compare, folder_guard=folder_guard)
    try:
        life.guard()
        life.say_restart()
        yield life
    finally:
        life.close()


__all__ = ["CompareConfig", "RunLifecycle", "run_lifecycle", "truncate_records"]
