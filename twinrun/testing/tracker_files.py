"""Read back what a tracker wrote locally, for tests: tensorboard event files (tensorboard's own reader) and
wandb offline runs (the ``run-*.wandb`` transaction log).

wandb 0.31 ships no Python reader for its offline log (its Go core writes and syncs it). The format is the
LevelDB log format under a 7-byte W&B header: 32 KiB blocks of records ``crc32c(4) length(2 LE) type(1) data``,
a record split across blocks as FIRST/MIDDLE/LAST pieces; each whole record is one protobuf
``wandb.proto.wandb_internal_pb2.Record``. This reader checks the header and the record types, not the CRCs.
"""

from __future__ import annotations

import json
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

# fields of a metrics.jsonl row that identify it rather than measure it
ROW_IDENTITY = ("kind", "schema_version", "step", "backend", "provenance")
_WANDB_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def tensorboard_scalars(logdir: str | Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of every scalar in the event files under `logdir` (tensorboard's EventAccumulator,
    which honours purge events as tensorboard does); a step logged twice (not purged) is an error."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    out: dict[str, dict[int, float]] = {}
    for tag in acc.Tags()["scalars"]:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        if len(set(steps)) != len(steps):  # tensorboard would draw both points of a step logged twice
            raise ValueError(f"{logdir}: {tag} has steps logged twice: {sorted(steps)}")
        out[tag] = {e.step: e.value for e in events}
    return out


def tensorboard_tags(logdir: str | Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return acc.Tags()


def wandb_records(path: str | Path) -> list[Any]:
    """Every record of one ``run-*.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if not data.startswith(_WANDB_HEADER):
        raise ValueError(f"{path}: not a wandb transaction log (header {data[:7]!r})")
    out: list[Any] = []
    pos = len(_WANDB_HEADER)
    pending = b""
    while pos + 7 <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < 7:  # block trailer: zero padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left_in_block
            continue
        piece = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            pending = piece
        elif kind == _FIRST:
            pending = piece
            continue
        elif kind == _MIDDLE:
            pending += piece
            continue
        elif kind == _LAST:
            pending += piece
        else:
            raise ValueError(f"{path}: unknown record type {kind} at byte {pos}")
        rec = pb.Record()
        rec.ParseFromString(pending)
        out.append(rec)
    return out


def _finished_wandb_records(log: Path, timeout_s: float = 60.0) -> list[Any]:
    """The records of a run whose ``exit`` record is written. wandb-core writes the transaction log on its own
    after ``finish()`` returns (measured: a 7-byte file right after finish in 1 of 3 runs, complete a moment later),
    so a reader polls for the run's exit record rather than racing the writer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            records = wandb_records(log)
        except Exception:  # a record cut mid-write; the deadline re-raises below
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def wandb_offline_run(run_dir: str | Path) -> dict[str, Any]:
    """The run's identity and its history from one offline run folder (``offline-run-*``): ``run`` (id,
    project, group, job type, name, tags), ``history`` {metric: {step: value}}, ``other`` {key: [values]} (media,
    tables) and ``summary``."""
    run_dir = Path(run_dir)
    (log,) = sorted(run_dir.glob("run-*.wandb"))
    records = _finished_wandb_records(log)
    info: dict[str, Any] = {}
    history: dict[str, dict[int, float]] = defaultdict(dict)
    other: dict[str, list[Any]] = defaultdict(list)
    summary: dict[str, Any] = {}
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            info = {"id": r.run_id, "project": r.project, "group": r.run_group, "job_type": r.job_type,
                    "name": r.display_name, "tags": list(r.tags)}
        elif kind == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            step = int(items.pop("_step"))
            for k, v in items.items():
                if k.startswith("_"):
                    continue
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    history[k][step] = float(v)
                else:
                    other[k].append(v)
        elif kind == "summary":
            for i in rec.summary.update:
                summary[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
    return {"run": info, "history": dict(history), "other": dict(other), "summary": summary}


def metrics_row_numbers(row: dict[str, Any]) -> dict[str, float]:
    """Every number of one metrics.jsonl row by its path (``a/b`` for nested), written out here on its own so a
    test does not check the tracker code against itself."""
    out: dict[str, float] = {}
    for k, v in row.items():
        if k in ROW_IDENTITY:
            continue
        if isinstance(v, dict):
            out.update({f"{k}/{kk}": float(vv) for kk, vv in v.items()
                        if isinstance(vv, (int, float)) and not isinstance(vv, bool)})
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def check_tracker_matches_metrics(series: dict[str, dict[int, float]], rows: list[dict[str, Any]], *,
                                  native_prefix: str) -> set[str]:
    """Assert that a tracker's scalar series (name -> {step: value}) hold exactly the rows' numbers at the rows'
    steps (float32 precision: tensorboard stores float32) plus the framework's own metrics under
    `native_prefix`, and nothing else. Returns the neutral names."""
    import math

    neutral = {k: v for k, v in series.items() if not k.startswith(native_prefix)}
    native = set(series) - set(neutral)
    want = set()
    for row in rows:
        for name, value in metrics_row_numbers(row).items():
            want.add(name)
            assert name in series, f"{name} of metrics.jsonl step {row['step']} is not in the tracker"
            got = series[name].get(int(row["step"]))
            assert got is not None, f"{name}: no value at step {row['step']} (tracker has {sorted(series[name])})"
            assert math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-6 * max(1.0, abs(value))) or math.isclose(
                got, float(_f32(value)), rel_tol=1e-9, abs_tol=1e-12), f"{name} step {row['step']}: {got} != {value}"
    assert set(neutral) == want, f"tracker-only names {sorted(set(neutral) - want)}, missing {sorted(want - set(neutral))}"
    assert native, f"no {native_prefix} metric in the tracker"
    return want


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


TEST_PROJECT = "twinrun-test"


def tracked(spec: Any, backend: str, tracking_dir: str | Path, **kw: Any) -> Any:
    """`spec` reporting to `backend` (wandb offline) under `tracking_dir`, project TEST_PROJECT."""
    from twinrun.core.spec import TrackingSpec

    return spec.model_copy(update={"tracking": TrackingSpec(backend=backend, offline=backend == "wandb",
                                                            project=TEST_PROJECT, dir=str(tracking_dir), **kw)})


def check_wandb_training_run(tracking_dir: str | Path, spec: Any, backend: str, rows: list[dict[str, Any]]) -> None:
    """The one offline wandb run under `tracking_dir` is the training run of `spec` under `backend` (project,
    group = the arm, tags = backend, seed, spec hash) and holds `rows` (metrics.jsonl) and the framework's own
    metrics under ``<backend>/``."""
    (run_dir,) = sorted((Path(tracking_dir) / "wandb").glob("offline-run-*"))
    got = wandb_offline_run(run_dir)
    assert got["run"]["project"] == TEST_PROJECT and got["run"]["group"] == spec.name, got["run"]
    assert got["run"]["name"] == f"{spec.name}-{backend}-seed{spec.seed}" and got["run"]["job_type"] == "train"
    assert set(got["run"]["tags"]) == {f"backend:{backend}", f"seed:{spec.seed}", f"spec:{spec.spec_hash()}"}
    names = check_tracker_matches_metrics(got["history"], rows, native_prefix=f"{backend}/")
    # the names both backends log for the smoke arm: every number of the schema (no KL term, no count judge:
    # kl and r_cnt are null there) and the step phases both frameworks have
    from twinrun.core.records import StepMetrics

    nested = {"reward_terms": ("r_task", "r_fc", "r_cnt", "r_comp")}
    schema = {k for k in StepMetrics.model_fields if k not in ROW_IDENTITY and k not in nested and k != "wall_s"}
    schema |= {f"{k}/{t}" for k, terms in nested.items() for t in terms}
    # a name is logged when some row has a value for it: kl is null with KL off, r_cnt while no content op was
    # judged (the tiny curator's sampled calls decide that), and nothing else may be missing
    def value(row: dict[str, Any], name: str) -> Any:
        head, _, tail = name.partition("/")
        return row.get(head, {}).get(tail) if tail else row.get(head)

    expected = {n for n in schema if any(value(row, n) is not None for row in rows)}
    may_be_null = {"kl", "reward_terms/r_cnt"}
    if spec.algorithm.estimator != "gigpo":  # anchor-group shares exist only for GiGPO
        may_be_null |= {"anchor_singleton_share", "step_adv_nonzero_share"}
    assert schema - expected <= may_be_null, f"null in every row: {schema - expected - may_be_null}"
    logged = {n for n in names if not n.startswith("wall_s/")}
    assert logged == expected, f"logged but not expected: {logged - expected}; expected but not logged: {expected - logged}"
    assert {"wall_s/step", "wall_s/rollout", "wall_s/advantages", "wall_s/update"} <= names

