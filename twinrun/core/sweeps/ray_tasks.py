"""Sweeps over Ray: one task per arm, spread over the cluster's nodes; a lost node's arms run again elsewhere.

Each arm is one Ray task (one CPU, scheduling strategy SPREAD, so arms land on different nodes while there are
free ones). The task writes the arm file itself, so ``--out`` must be on a filesystem every node sees.

**Node loss.** Ray runs a task again when its worker process or its node dies (``max_retries``: system failures
only; a :class:`TwinrunError` in the arm is not retried). The new attempt resumes the arm from its complete rows
(:func:`twinrun.core.sweeps.arms.run_arm`: a torn last line is dropped, the repo is rebuilt by replaying the recorded
ops), so no row is lost or written twice. When the retries are spent the sweep ends with an infrastructure error
after the other arms finish; rerunning the same command resumes every arm.

**Leases.** Each attempt takes its arm's lease (``ray/<arm>.lease``: attempt id, node, host, pid) before it
builds its runtime, and checks it before every row it appends. An older attempt still alive (a node cut off from
the cluster but not from the shared filesystem) finds the lease taken and stops before writing. The new attempt
reads the arm's rows only after building its runtime (seconds after taking the lease), so a row the old attempt
was writing at the moment of the takeover is complete by then. Every attempt is logged in
``ray/<arm>.attempts.jsonl`` (where each arm ran, and which runs a node loss cost).

core imports no framework: ray is imported inside the functions.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.records import JsonlWriter, atomic_write_json, read_jsonl
from twinrun.core.sweeps.arms import (
    ArmOutcome,
    PolicyFactory,
    _finished,
    _progress,
    build_runtime,
    rows_done,
    run_arm,
)
from twinrun.core.sweeps.plan import ArmPlan, SweepError, SweepPlan

RAY_DIR = "ray"  # leases and attempt logs (not under arms/, whose *.jsonl are the arm files)


def lease_path(out_dir: str | Path, arm: str) -> Path:
    return Path(out_dir) / RAY_DIR / f"{arm}.lease"


def attempts(out_dir: str | Path, arm: str) -> list[dict[str, Any]]:
    """The arm's Ray attempts, oldest first: attempt id, node id, host, pid, start time, rows found at start."""
    return list(read_jsonl(Path(out_dir) / RAY_DIR / f"{arm}.attempts.jsonl"))


class ArmTakenOver(SweepError):
    """This attempt's arm was taken over by a newer attempt (its node was presumed lost): it stops writing."""


def _take_lease(out_dir: str, arm: str, node_id: str, call: str) -> str:
    attempt = uuid.uuid4().hex[:12]
    entry = {"attempt": attempt, "call": call, "arm": arm, "node_id": node_id, "host": socket.gethostname(), "pid": os.getpid(),
             "time": time.time(), "rows_at_start": rows_done(out_dir, arm)}
    atomic_write_json(lease_path(out_dir, arm), entry)
    with JsonlWriter(Path(out_dir) / RAY_DIR / f"{arm}.attempts.jsonl") as w:
        w.write(entry)
    return attempt


def _check_lease(out_dir: str, arm: str, attempt: str) -> None:
    try:
        holder = json.loads(lease_path(out_dir, arm).read_text(encoding="utf-8")).get("attempt")
    except (OSError, json.JSONDecodeError):
        holder = None
    if holder != attempt:
        raise ArmTakenOver(f"arm {arm!r}: attempt {attempt} was taken over by attempt {holder} (this node was presumed "
                           "lost); it stops before writing")


def _ray_arm_task(plan_dict: dict[str, Any], arm: str, spec_dict: dict[str, Any], spec_dir: str, out_dir: str,
                  factory: PolicyFactory, workers: int | None, environ: dict[str, str] | None,
                  call: str) -> dict[str, Any]:
    """One attempt at one arm in a Ray worker: take the lease, build its own runtime (env pool, executor), resume
    the arm from its rows. The same files as a local run."""
    import ray

    from twinrun.core.spec import spec_from_dict

    node_id = ray.get_runtime_context().get_node_id()
    attempt = _take_lease(out_dir, arm, node_id, call)
    spec = spec_from_dict(spec_dict, Path(spec_dir))
    plan = SweepPlan.from_dict(plan_dict)
    a = plan.arm(arm)
    runtime = build_runtime(spec, workers=workers, environ=environ)
    try:
        policy = factory(a, spec) if a.role == "checkpoint" else None
        outcome = run_arm(plan, arm, spec, out_dir, runtime, policy,
                          before_write=lambda arm_, _i: _check_lease(out_dir, arm_, attempt))
        tries = sum(e.get("call") == call for e in attempts(out_dir, arm))  # this sweep call's attempts
        return {**asdict(outcome), "attempts": tries}
    finally:
        runtime.close()


def sweep_ray(plan: SweepPlan, todo: list[ArmPlan], spec: Any, out_dir: str | Path, factory: PolicyFactory,
              workers: int | None, address: str, num_cpus: int | None, progress: bool,
              environ: Mapping[str, str] | None, *, max_retries: int = 3) -> dict[str, ArmOutcome]:
    """Arms as Ray tasks (one CPU each, spread over nodes); the driver shows progress by counting each arm file's
    complete rows. An arm whose node or worker died is run again (up to max_retries times) on another node."""
    try:
        import ray
    except ImportError:
        from twinrun.core.errors import DependencyMissing

        raise DependencyMissing("--ray: ray is missing (fix: pip install 'twinrun[verl]')") from None
    if max_retries < 0:
        raise SweepError(f"--ray-retries: {max_retries} (fix: 0 or more)")
    started_here = False
    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=num_cpus or 2, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started_here = True
    n = len(plan.games)
    out = str(Path(out_dir).resolve())  # workers run in other working directories
    (Path(out) / RAY_DIR).mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    call = uuid.uuid4().hex[:12]  # this sweep call: its attempts are counted apart from earlier calls'
    try:
        remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False,
                            scheduling_strategy="SPREAD")(_ray_arm_task)
        spec_dict = spec.model_dump(mode="json")
        spec_dir = str(Path(spec.source_dir).resolve())
        pending = {}
        outcomes: dict[str, ArmOutcome] = {}
        for a in todo:
            if rows_done(out, a.arm) >= n:
                outcomes[a.arm] = _finished(out, a.arm, n)
                continue
            ref = remote.remote(plan.to_dict(), a.arm, spec_dict, spec_dir, out, factory, workers,
                                dict(environ) if environ else None, call)
            pending[ref] = a.arm
        with _progress(progress) as bars:
            tasks = {a.arm: bars.add_task(a.arm, total=n, completed=rows_done(out, a.arm)) for a in todo}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for a in todo:
                    bars.update(tasks[a.arm], completed=rows_done(out, a.arm))
                for ref in ready:
                    arm = pending.pop(ref)
                    try:
                        got = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:
                        cause = e.as_instanceof_cause()
                        if isinstance(cause, TwinrunError):
                            raise cause from None
                        raise
                    except ray.exceptions.RayError as e:  # worker or node lost more often than max_retries
                        first = (str(e).splitlines() or [""])[0].split(". ")[0]
                        failed[arm] = f"{type(e).__name__}: {first}"
                        continue
                    outcomes[arm] = ArmOutcome(**got)
    finally:
        if started_here:
            ray.shutdown()
    if failed:
        arm, why = next(iter(failed.items()))
        raise InfrastructureError(
            f"--ray: {len(failed)} arm(s) lost their Ray worker or node more than {max_retries} times (first: {arm!r}, "
            f"{why}) (fix: rerun the same sweep command: it resumes every arm from its rows)")
    return outcomes
