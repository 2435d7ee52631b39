"""Live progress of the verl child process: each step on the console and in the tracker as verl finishes it.

verl runs in a child process whose output goes to a log file. The parent follows two files while the child
writes them: verl's per-step metrics (its `FileLogger`, one line per step, written unbuffered at the end of the
step) and core's ``rollouts.jsonl`` (the agent loop's records, each fsynced before verl's step can end). A new
step in verl's log is turned into its neutral ``metrics.jsonl`` row by the function that writes the final file
(:func:`~twinrun.backends.verl.metrics.step_rows`), printed with core's step line, logged to the tracker, and
``metrics.jsonl`` is rewritten with it, so the record is current during a long run too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from twinrun.backends.verl.metrics import step_rows
from twinrun.core.records import JsonlTail, RunPaths, atomic_write_text, read_jsonl
from twinrun.core.records.tracking import StepReporter


class VerlProgress:
    """Follows one verl attempt. `poll()` reports the steps completed since the last call; it never raises (a
    failure is one warning line, then the live view stops; the final metrics.jsonl is written after the child
    exits either way)."""

    def __init__(self, spec: Any, paths: RunPaths, verl_log: Path, reporter: StepReporter, *,
                 optimizer_updates: int, keep_steps: int):
        self.spec = spec
        self.paths = paths
        self.reporter = reporter
        self.optimizer_updates = optimizer_updates
        self._verl = JsonlTail(verl_log)
        self._rollouts = JsonlTail(paths.rollouts)
        self._by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
        # rows of steps a resume keeps; the steps after them are trained (and reported) again
        self._lines = {int(r["step"]): json.dumps(r, separators=(",", ":"))
                       for r in read_jsonl(paths.metrics) if int(r["step"]) <= keep_steps}
        self._stopped = False
        self.reported: list[int] = []

    def poll(self) -> int:
        """Report every step verl has finished since the last call; returns how many."""
        if self._stopped:
            return 0
        try:
            return self._poll()
        except Exception as e:  # noqa: BLE001 - progress must never stop training
            self._stopped = True
            self.reporter.log(f"warning: verl progress stopped ({type(e).__name__}: {e}); training goes on, "
                              "metrics.jsonl is written when verl exits")
            return 0

    def _poll(self) -> int:
        new = {int(r["step"]): r["data"] for r in self._verl.read_new()
               if "step" in r and isinstance(r.get("data"), dict) and "training/global_step" in r["data"]}
        if not new:
            return 0
        for r in self._rollouts.read_new():  # read after verl's row: the step's rollouts are all written by then
            self._by_step[int(r.get("step", -1)) + 1].append(r)
        for step in sorted(new):
            (row,) = step_rows(self.spec, {step: new[step]}, self._by_step.get(step, []), self.optimizer_updates,
                               run_id=self.paths.root.name)
            self._lines[step] = row.model_dump_json()  # as write_step_metrics writes it when verl exits
            atomic_write_text(self.paths.metrics, "".join(self._lines[s] + "\n" for s in sorted(self._lines)))
            self.reporter.step(row, native=[new[step]])
            self.reported.append(step)
        return len(new)
