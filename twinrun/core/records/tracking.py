"""Experiment tracking: one adapter for wandb, tensorboard and mlflow, fed by core's neutral records.

Both backends hand every ``metrics.jsonl`` row to the same :class:`StepReporter`, so a TRL run and a verl run
of one arm log the same metric names (the row's fields, nested ones joined with ``/``: ``reward_terms/r_task``,
``wall_s/step``) to the same project, grouped by the arm, tagged with backend, seed and spec hash, and their
curves overlay without renaming. Nothing here lists metric names: a field added to the neutral schema is logged
as it is. Each framework's own metrics may go alongside under its prefix (``trl/``, ``verl/``).

Trackers are optional: the tracker's package is imported when a run opens it, and a tracker that is not
installed or cannot be reached is one warning line at start (training goes on; ``metrics.jsonl`` is the
record). A tracker that fails later, mid-run, is one warning line too, and is then left alone.

A run's tracker state (the wandb/mlflow run id, the event folder) is kept in ``<folder>/tracking.json``, so a
resumed run logs into the same tracker run.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.records import atomic_write_json

STATE_FILE = "tracking.json"
# fields of a metrics.jsonl row that identify it rather than measure it
ROW_IDENTITY = frozenset({"kind", "schema_version", "step", "backend", "provenance"})
INSTALL_HINT = "pip install 'twinrun[tracking]'"

Log = Callable[[str], None]


# ------------------------------------------------------------------------------------------------------------
# Names and values


def flatten_scalars(row: Mapping[str, Any], *, prefix: str = "", skip: frozenset[str] = frozenset()) -> dict[str, float]:
    """Every finite number of `row` by its name; nested mappings joined with ``/``. Text, lists and nulls are
    not metrics and are left out; booleans are logged as 0/1."""
    out: dict[str, float] = {}
    for k, v in row.items():
        if k in skip:
            continue
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_scalars(v, prefix=name + "/"))
        elif isinstance(v, (bool, int, float)) and not (isinstance(v, float) and not math.isfinite(v)):
            out[name] = float(v)
    return out


def step_scalars(row: Any) -> dict[str, float]:
    """The tracker metrics of one ``metrics.jsonl`` row (a StepMetrics or its dict)."""
    data = row.model_dump(mode="json") if hasattr(row, "model_dump") else dict(row)
    return flatten_scalars(data, skip=ROW_IDENTITY)


def native_scalars(logs: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    """A framework's own metrics of one step under `prefix`; a step of several optimizer updates (several log
    dicts) gives each metric's mean over them."""
    sums: dict[str, list[float]] = {}
    for d in logs:
        for k, v in flatten_scalars(d, prefix=prefix).items():
            sums.setdefault(k, []).append(v)
    return {k: sum(v) / len(v) for k, v in sums.items()}


def format_step_line(row: Any, total_steps: int) -> str:
    """The console line of one training step, the same for every backend."""
    r = row.model_dump(mode="json") if hasattr(row, "model_dump") else dict(row)

    def f(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    wall = (r.get("wall_s") or {}).get("step")
    return (f"{r['backend']}: step {r['step']}/{total_steps} reward {f(r.get('reward_mean'))} "
            f"r_task {f(r.get('r_task_measured_mean'))} tool calls {r.get('tool_calls', 0)} "
            f"episodes {r.get('executor_episodes', 0)}"
            + (f" unmeasured {r['unmeasured_episodes']}" if r.get("unmeasured_episodes") else "")
            + (f" ({wall:.1f}s)" if wall is not None else ""))


# ------------------------------------------------------------------------------------------------------------
# The tracker interface


class Tracker:
    """What twinrun logs. This base class logs nothing (tracking: none, or a tracker that could not start)."""

    backend = "none"
    location = ""  # where the tracker's files or run live (shown once at start)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        pass

    def log_image(self, key: str, path: Path) -> None:
        pass

    def log_text(self, key: str, text: str) -> None:
        pass

    def set_summary(self, values: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class _Guarded(Tracker):
    """Never lets a tracker error reach training: the first failure is one warning, then tracking stops."""

    def __init__(self, inner: Tracker, log: Log):
        self._inner: Tracker | None = inner
        self._log = log
        self.backend = inner.backend
        self.location = inner.location

    def _call(self, method: str, *args: Any) -> None:
        if self._inner is None:
            return
        try:
            getattr(self._inner, method)(*args)
        except Exception as e:  # noqa: BLE001 - a dashboard must never stop a run
            self._log(f"warning: tracking: {self.backend} failed ({type(e).__name__}: {_first_line(e)}); "
                      "tracking stops here, metrics.jsonl stays the record")
            inner, self._inner = self._inner, None
            try:
                inner.close()
            except Exception:  # noqa: BLE001
                pass

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._call("log_metrics", metrics, step)

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._call("log_table", key, columns, rows)

    def log_image(self, key: str, path: Path) -> None:
        self._call("log_image", key, path)

    def log_text(self, key: str, text: str) -> None:
        self._call("log_text", key, text)

    def set_summary(self, values: Mapping[str, Any]) -> None:
        self._call("set_summary", values)

    def close(self) -> None:
        self._call("close")
        self._inner = None

    @property
    def active(self) -> bool:
        return self._inner is not None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return "–" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return "\n".join(out + ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows])


# ------------------------------------------------------------------------------------------------------------
# The trackers


class _Wandb(Tracker):
    backend = "wandb"

    def __init__(self, run: Any):
        self._run = run
        mode = run.settings.mode
        self.location = (f"offline files in {run.dir}" if mode == "offline" else str(run.url) if mode != "disabled"
                         else "disabled by WANDB_MODE=disabled: nothing is logged")

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=int(step))

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        import wandb

        self._run.log({key: wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def log_image(self, key: str, path: Path) -> None:
        import wandb

        self._run.log({key: wandb.Image(str(path))})

    def log_text(self, key: str, text: str) -> None:
        import wandb

        self._run.log({key: wandb.Html(f"<pre>{_html_escape(text)}</pre>")})

    def set_summary(self, values: Mapping[str, Any]) -> None:
        self._run.summary.update(dict(values))

    def close(self) -> None:
        self._run.finish()


def _html_escape(s: str) -> str:
    import html

    return html.escape(s)


class _TensorBoard(Tracker):
    backend = "tensorboard"

    def __init__(self, logdir: Path, purge_step: int | None):
        from tensorboardX import SummaryWriter

        import time

        # the file name holds the second it was opened: a suffix in ns keeps two writers of one second apart
        # and in order (tensorboard reads a folder's event files in name order)
        self._w = SummaryWriter(logdir=str(logdir), purge_step=purge_step, flush_secs=10,
                                filename_suffix=f".{time.time_ns()}")
        self.location = str(logdir)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for k, v in metrics.items():
            self._w.add_scalar(k, v, global_step=int(step))
        self._w.flush()

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._w.add_text(key, markdown_table(columns, rows))
        self._w.flush()

    def log_image(self, key: str, path: Path) -> None:
        import matplotlib.image as mpimg

        img = mpimg.imread(str(path))  # PNG -> float HxWxC in [0, 1]
        self._w.add_image(key, img[..., :3], dataformats="HWC")
        self._w.flush()

    def log_text(self, key: str, text: str) -> None:
        self._w.add_text(key, "    " + text.replace("\n", "\n    "))  # a code block: tensorboard renders markdown
        self._w.flush()

    def set_summary(self, values: Mapping[str, Any]) -> None:
        nums = flatten_scalars(values)
        for k, v in nums.items():
            self._w.add_scalar(f"summary/{k}", v, global_step=0)
        rest = {k: v for k, v in values.items() if k not in nums}
        if rest:
            self._w.add_text("summary", markdown_table(["key", "value"], sorted(rest.items())))
        self._w.flush()

    def close(self) -> None:
        self._w.close()


class _Mlflow(Tracker):
    backend = "mlflow"

    def __init__(self, client: Any, run_id: str, where: str):
        self._c = client
        self._run_id = run_id
        self.location = f"{where} (run {run_id})"

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(_mlflow_key(k), float(v), now, int(step)) for k, v in metrics.items()]
        for i in range(0, len(items), 1000):  # mlflow's batch limit
            self._c.log_batch(self._run_id, metrics=items[i:i + 1000])

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self._c.log_text(self._run_id, markdown_table(columns, rows), f"{_mlflow_key(key)}.md")

    def log_image(self, key: str, path: Path) -> None:
        self._c.log_artifact(self._run_id, str(path), artifact_path=_mlflow_key(key).rsplit("/", 1)[0])

    def log_text(self, key: str, text: str) -> None:
        self._c.log_text(self._run_id, text, f"{_mlflow_key(key)}.txt")

    def set_summary(self, values: Mapping[str, Any]) -> None:
        nums = flatten_scalars(values)
        if nums:
            self.log_metrics({f"summary/{k}": v for k, v in nums.items()}, 0)
        for k, v in values.items():
            if k not in nums and not isinstance(v, Mapping):
                self._c.set_tag(self._run_id, f"summary.{_mlflow_key(k)}", str(v)[:5000])

    def close(self) -> None:
        self._c.set_terminated(self._run_id)


def _mlflow_key(k: str) -> str:
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in k)


# ------------------------------------------------------------------------------------------------------------
# Opening a tracker


@dataclass(frozen=True)
class TrackedRun:
    """What one tracker run is: a training run or a sweep, inside `folder` (its tracker state lives
    in `folder`/tracking.json)."""

    name: str
    group: str
    job_type: str  # train | sweep
    tags: tuple[str, ...]
    folder: Path
    config: Mapping[str, Any] = field(default_factory=dict)


def open_tracker(tracking: Any, run: TrackedRun, *, log: Log = print, resume_after: int | None = None) -> _Guarded:
    """The run's tracker, or one that logs nothing (with one warning line) when the tracker cannot start.

    tracking: a :class:`~twinrun.core.spec.TrackingSpec`; resume_after: the last step whose metrics the
    tracker already holds when a run resumes (tensorboard drops its later points; wandb ignores re-logged
    steps)."""
    if tracking.backend == "none":
        return _Guarded(Tracker(), log)
    local = Path(tracking.dir).resolve() if tracking.dir else run.folder.resolve() / "tracking"
    state = _read_state(run.folder)
    if state.get("backend") != tracking.backend or state.get("project") != tracking.project:
        state = {}
    try:
        inner, state = _OPENERS[tracking.backend](tracking, run, local, state, resume_after)
    except ImportError as e:
        log(f"warning: tracking: {tracking.backend} is not installed ({_first_line(e)}; fix: {INSTALL_HINT}); "
            "going on without it, metrics.jsonl is the record")
        return _Guarded(Tracker(), log)
    except Exception as e:  # noqa: BLE001 - unreachable server, no credentials, bad URI: warn, train anyway
        log(f"warning: tracking: {tracking.backend} could not start ({type(e).__name__}: {_first_line(e)}); "
            "going on without it, metrics.jsonl is the record")
        return _Guarded(Tracker(), log)
    # what a later stage (a resume, compare) needs to log into the same tracker run
    atomic_write_json(run.folder / STATE_FILE, {"backend": tracking.backend, "project": tracking.project,
                                                "name": run.name, "group": run.group, "job_type": run.job_type,
                                                "tags": list(run.tags),
                                                # the folder as resolved now: a later stage may run elsewhere
                                                "spec": tracking.model_dump(mode="json") | {"dir": str(local)},
                                                **state})
    log(f"tracking: {tracking.backend} project {tracking.project!r}, group {run.group!r}, run {run.name!r}: "
        f"{inner.location}")
    return _Guarded(inner, log)


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _open_wandb(tracking: Any, run: TrackedRun, local: Path, state: dict[str, Any],
                resume_after: int | None) -> tuple[Tracker, dict[str, Any]]:
    import wandb

    run_id = state.get("run_id") or uuid.uuid4().hex[:12]
    local.mkdir(parents=True, exist_ok=True)
    wb = wandb.init(
        project=tracking.project, group=run.group, name=run.name, job_type=run.job_type, tags=list(run.tags),
        config=dict(run.config), dir=str(local), id=run_id, resume="allow",
        # offline: as the spec says; else wandb's own choice (WANDB_MODE, default online)
        mode="offline" if tracking.offline else None, reinit="create_new",
        # no console capture (the run's console is its own), and never wait long on a login prompt or server
        settings=wandb.Settings(console="off", init_timeout=60, login_timeout=15, silent=True),
    )
    return _Wandb(wb), {"run_id": run_id}


def _open_tensorboard(tracking: Any, run: TrackedRun, local: Path, state: dict[str, Any],
                      resume_after: int | None) -> tuple[Tracker, dict[str, Any]]:
    logdir = local / tracking.project / run.group / run.name
    tb = _TensorBoard(logdir, purge_step=None if resume_after is None else resume_after + 1)
    if resume_after is None:  # (at step 0: on a resume it would read as a restart and purge every step)
        tb.log_text("twinrun/run", json.dumps({"name": run.name, "group": run.group, "job_type": run.job_type,
                                               "tags": list(run.tags), "config": run.config}, indent=2))
    return tb, {"logdir": str(logdir)}


def _open_mlflow(tracking: Any, run: TrackedRun, local: Path, state: dict[str, Any],
                 resume_after: int | None) -> tuple[Tracker, dict[str, Any]]:
    from mlflow.tracking import MlflowClient

    local.mkdir(parents=True, exist_ok=True)
    uri = tracking.uri or f"sqlite:///{local / 'mlflow.db'}"  # mlflow 3 keeps its file store read-only
    client = MlflowClient(tracking_uri=uri)
    run_id = state.get("run_id")
    if run_id:
        client.update_run(run_id, status="RUNNING")
    else:
        exp = client.get_experiment_by_name(tracking.project)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(tracking.project)
        tags = {"group": run.group, "job_type": run.job_type, **{f"tag.{t}": "1" for t in run.tags},
                "mlflow.runName": run.name}
        run_id = client.create_run(exp_id, run_name=run.name, tags=tags).info.run_id
        flat = flatten_config(run.config)
        for i in range(0, len(flat), 100):
            from mlflow.entities import Param

            client.log_batch(run_id, params=[Param(k, v) for k, v in list(flat.items())[i:i + 100]])
    return _Mlflow(client, run_id, uri), {"run_id": run_id, "uri": uri}


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flatten_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)[:500]
    return out


_OPENERS = {"wandb": _open_wandb, "tensorboard": _open_tensorboard, "mlflow": _open_mlflow}


# ------------------------------------------------------------------------------------------------------------
# What each stage logs


def run_tags(spec: Any, backend: str | None) -> tuple[str, ...]:
    base = ([f"backend:{backend}"] if backend else []) + [f"seed:{spec.seed}", f"spec:{spec.spec_hash()}"]
    return tuple(base + [t for t in spec.tracking.tags if t not in base])


def training_run(spec: Any, backend: str, run_dir: Path) -> TrackedRun:
    """A training run of the arm: grouped by the arm, named by backend and seed."""
    config = {**spec.model_dump(mode="json"),
              "twinrun": {"backend": backend, "seed": spec.seed, "spec_hash": spec.spec_hash(),
                          "run_dir": str(Path(run_dir).resolve())}}
    return TrackedRun(name=f"{spec.name}-{backend}-seed{spec.seed}", group=spec.tracking.group or spec.name,
                      job_type="train", tags=run_tags(spec, backend), folder=Path(run_dir), config=config)


class StepReporter:
    """One training step on the console and in the tracker, the same for every backend."""

    def __init__(self, tracker: Tracker, *, total_steps: int, native_prefix: str, native: bool = True,
                 log: Log = print):
        self.tracker = tracker
        self.total_steps = total_steps
        self.native_prefix = native_prefix
        self.native = native
        self.log = log

    def step(self, row: Any, native: Sequence[Mapping[str, Any]] = ()) -> None:
        self.log(format_step_line(row, self.total_steps))
        metrics = step_scalars(row)
        if self.native and native:
            metrics.update(native_scalars(native, self.native_prefix))
        step = row.step if hasattr(row, "step") else row["step"]
        self.tracker.log_metrics(metrics, int(step))

    def close(self) -> None:
        self.tracker.close()


def step_reporter(spec: Any, backend: str, run_dir: Path, *, log: Log = print,
                  resume_after: int | None = None, enabled: bool = True) -> StepReporter:
    """The reporter of a training run: its tracker from ``spec.tracking`` (only where `enabled`: the main
    process of a multi-process run) and the console line."""
    from twinrun.core.spec import TrackingSpec

    tracking = spec.tracking if enabled else TrackingSpec()
    tracker = open_tracker(tracking, training_run(spec, backend, run_dir), log=log, resume_after=resume_after)
    return StepReporter(tracker, total_steps=spec.steps, native_prefix=f"{backend}/", native=spec.tracking.native,
                        log=log)
