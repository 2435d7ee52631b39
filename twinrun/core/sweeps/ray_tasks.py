"""Sweeps over Ray: one task per checkpoint, spread over the cluster's nodes; a lost node's arms run again elsewhere.

Each checkpoint (its stream arms, played together under ``sweep.batch_streams``, else one task per arm) and the
baseline is one Ray task (one CPU, scheduling strategy SPREAD, so tasks land on different nodes while there are
free ones). On GPUs (a curator device other than cpu) a checkpoint's task also asks for one GPU
(``num_gpus = 1 / sweep.arms_per_gpu``): Ray places it and sets ``CUDA_VISIBLE_DEVICES``, its curator loads on
``cuda:0``, and the GPU ids Ray gave it are written into sweep.json (:func:`twinrun.core.sweeps.plan.record_placement`)
and the attempt log. The task writes the arm files itself, so ``--out`` must be on a filesystem every node sees.

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
)
from twinrun.core.sweeps.lockstep import play_unit
from twinrun.core.sweeps.placement import units
from twinrun.core.sweeps.plan import ArmPlan, SweepError, SweepPlan, load_plan, record_placement

RAY_DIR = "ray"  # leases and attempt logs (not under arms/, whose *.jsonl are the arm files)


def lease_path(out_dir: str | Path, arm: str) -> Path:
    return Path(out_dir) / RAY_DIR / f"{arm}.lease"


def attempts(out_dir: str | Path, arm: str) -> list[dict[str, Any]]:
    """The arm's Ray attempts, oldest first: attempt id, node id, host, pid, start time, rows found at start."""
    return list(read_jsonl(Path(out_dir) / RAY_DIR / f"{arm}.attempts.jsonl"))


class ArmTakenOver(SweepError):
    """This attempt's arm was taken over by a newer attempt (its node was presumed lost): it stops writing."""


def _take_lease(out_dir: str, arm: str, node_id: str, call: str, gpus: str | None = None) -> str:
    attempt = uuid.uuid4().hex[:12]
    entry = {"attempt": attempt, "call": call, "arm": arm, "node_id": node_id, "host": socket.gethostname(), "pid": os.getpid(),
             "time": time.time(), "rows_at_start": rows_done(out_dir, arm), "gpus": gpus}
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


def _ray_arm_task(plan_dict: dict[str, Any], arms: list[str], spec_dict: dict[str, Any], spec_dir: str, out_dir: str,
                  factory: PolicyFactory, workers: int | None, environ: dict[str, str] | None,
                  call: str, device: str = "cpu", batch: bool = True) -> list[dict[str, Any]]:
    """One attempt at one checkpoint's arms (or one arm) in a Ray worker: take each arm's lease, build its own
    runtime (env pool, executor), resume the arms from their rows. The same files as a local run."""
    import dataclasses

    import ray

    from twinrun.core.spec import spec_from_dict

    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    gpu_ids = ",".join(str(g) for g in ray.get_gpu_ids()) or None
    attempt = {arm: _take_lease(out_dir, arm, node_id, call, gpu_ids) for arm in arms}
    spec = spec_from_dict(spec_dict, Path(spec_dir))
    plan = SweepPlan.from_dict(plan_dict)
    # the curator's device in this worker: Ray's CUDA_VISIBLE_DEVICES shows the task its GPU(s) from 0
    here = "cuda:0" if gpu_ids and device != "cpu" else device
    plan.arms = [dataclasses.replace(a, device=here, gpus=gpu_ids, host=socket.gethostname()) if a.arm in arms
                 else a for a in plan.arms]
    runtime = build_runtime(spec, workers=workers, environ=environ)
    try:
        done = play_unit(plan, arms, spec, out_dir, runtime, factory, batch=batch,
                         before_write=lambda arm_, _i: _check_lease(out_dir, arm_, attempt[arm_]))
        out = []
        for arm in arms:
            tries = sum(e.get("call") == call for e in attempts(out_dir, arm))  # this sweep call's attempts
            out.append({**asdict(done[arm]), "attempts": max(tries, 1),
                        "placement": {"device": here, "gpus": gpu_ids, "host": socket.gethostname()}})
        return out
    finally:
        runtime.close()


def sweep_ray(plan: SweepPlan, todo: list[ArmPlan], spec: Any, out_dir: str | Path, factory: PolicyFactory,
              workers: int | None, address: str, num_cpus: int | None, progress: bool,
              environ: Mapping[str, str] | None, *, max_retries: int = 3, gpu: bool = False,
              num_gpus: int | None = None, batch: bool = True) -> dict[str, ArmOutcome]:
    """Checkpoints as Ray tasks (one CPU each, spread over nodes; gpu: each checkpoint's task asks for a GPU); the
    driver shows progress by counting each arm file's complete rows. A task whose node or worker died is run again
    (up to max_retries times) on another node."""
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
            ray.init(num_cpus=num_cpus or 2, num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
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
        on_gpu = remote.options(num_gpus=1 / spec.sweep.arms_per_gpu)  # a checkpoint's curator: its own GPU
        spec_dict = spec.model_dump(mode="json")
        spec_dir = str(Path(spec.source_dir).resolve())
        pending = {}
        outcomes: dict[str, ArmOutcome] = {}
        device = "cuda" if gpu else "cpu"
        for u in units(todo):
            for group in ([list(u.arms)] if batch else [[a] for a in u.arms]):
                left = [a for a in group if rows_done(out, a) < n]
                outcomes.update({a: _finished(out, a, n) for a in group if a not in left})
                if not left:
                    continue
                task = on_gpu if gpu and u.needs_gpu else remote
                ref = task.remote(plan.to_dict(), left, spec_dict, spec_dir, out, factory, workers,
                                  dict(environ) if environ else None, call, device, batch)
                pending[ref] = left
        with _progress(progress) as bars:
            tasks = {a.arm: bars.add_task(a.arm, total=n, completed=rows_done(out, a.arm)) for a in todo}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for a in todo:
                    bars.update(tasks[a.arm], completed=rows_done(out, a.arm))
                for ref in ready:
                    group = pending.pop(ref)
                    arm = group[0]
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
                    placed = {g["arm"]: g.pop("placement") for g in got}
                    outcomes.update({g["arm"]: ArmOutcome(**g) for g in got})
                    # where the arms ran (the manifest is the driver's: only it writes sweep.json)
                    record_placement(out, load_plan(out) or plan, placed)
    finally:
        if started_here:
            ray.shutdown()
    if failed:
        arm, why = next(iter(failed.items()))
        raise InfrastructureError(
            f"--ray: {len(failed)} arm(s) lost their Ray worker or node more than {max_retries} times (first: {arm!r}, "
            f"{why}) (fix: rerun the same sweep command: it resumes every arm from its rows)")
    return outcomes
