"""The controls' committed rows as one compressed file, ``experiments/controls/data/rows.jsonl.gz`` (issue 54).

It holds what a compact sweep folder held (sweep.json, ``arms/<arm>.jsonl``, ``metrics/<run>.jsonl``), one JSON
object per line, in a fixed order:

* line 1: ``{"kind": "sweep", "format": 1, "plan": <sweep.json>}``;
* then every eval row as ``twinrun compare`` reads it (``"kind": "eval"``, its ``arm``), the arms in the plan's
  order and each arm's rows in the order they were played;
* then each run's step metrics as ``{"kind": "metrics", "run": RUN, "row": <a metrics.jsonl row>}``, the runs in
  name order and each run's rows in file order.

Why JSONL.gz and not Parquet: the bytes are a function of the rows alone (a fixed order, keys sorted but a metrics
row's, which keep the run's order; gzip's mtime 0 and no file name), where pyarrow stamps its own version into every
Parquet file; the rows nest (provenance, metrics' wall times and reward terms) and differ by backend, which Parquet
would need a fixed schema for; JSON keeps every float as written, so :func:`write_folder` rebuilds the old folder
byte for byte; and it needs the standard library only (``zcat`` reads it). Parquet would be smaller (the 28,800
eval rows of 2026-12-06 took 0.25-0.28 MB as Parquet, the whole file 0.56 MB), a difference git does not feel.

A writer that finds the file already holding the same rows leaves it as it is, so re-running a compaction makes no
diff even under another zlib.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "experiments" / "controls" / "data" / "rows.jsonl.gz"
FORMAT = 1


class RowsError(ValueError):
    pass


class Rows:
    """A compact sweep folder in memory: sweep.json (plan), the eval rows by arm and the metrics rows by run. (Not
    a dataclass: this file is loaded by path, outside sys.modules, which dataclasses look the module up in.)"""

    def __init__(self, plan: dict[str, Any], arms: dict[str, list[dict[str, Any]]] | None = None,
                 metrics: dict[str, list[dict[str, Any]]] | None = None):
        self.plan, self.arms, self.metrics = plan, arms or {}, metrics or {}


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


def _compact(row: dict[str, Any]) -> str:
    """A metrics row as a run writes it: keys in the run's order (verl's rows are not sorted), no spaces."""
    return json.dumps(row, separators=(",", ":"), allow_nan=False)


def _metrics_line(run: str, row: dict[str, Any]) -> str:
    # the wrapper's keys sorted, the row's kept in its own order, so that write_folder gives back the run's bytes
    return f'{{"kind":"metrics","row":{_compact(row)},"run":{json.dumps(run)}}}\n'


def dumps(rows: Rows) -> str:
    """The file's text (before compression): the plan, the eval rows in plan order, the metrics in run order."""
    parts = [_line({"kind": "sweep", "format": FORMAT, "plan": rows.plan})]
    for a in rows.plan["arms"]:
        parts += [_line(r) for r in rows.arms.get(a["arm"], [])]
    for run in sorted(rows.metrics):
        parts += [_metrics_line(run, r) for r in rows.metrics[run]]
    return "".join(parts)


def compress(text: str) -> bytes:
    """gzip with no timestamp and no file name: the same text gives the same bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
        f.write(text.encode("utf-8"))
    return buf.getvalue()


def write(rows: Rows, path: Path = ROWS) -> bool:
    """Write the rows to `path` atomically (a reader sees the old file or the new one). Returns False, writing
    nothing, when the file already holds these rows (or when a row holds what JSON cannot: NaN, infinity)."""
    try:
        text = dumps(rows)
    except ValueError as e:
        raise RowsError(f"{path}: a row holds a value JSON cannot ({e}; fix: null for an unmeasured value in the "
                        "run's rows)") from None
    if path.is_file() and gzip.decompress(path.read_bytes()).decode("utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    tmp.write_bytes(compress(text))
    os.replace(tmp, path)
    return True


def read(path: Path = ROWS) -> Rows:
    """The rows of a file :func:`write` wrote; a file of another shape is a one-line error naming the line."""
    if not path.is_file():
        raise RowsError(f"{path}: missing (fix: analyse.py compact --from the controls folder)")
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RowsError(f"{path}: not gzipped UTF-8 ({e}; fix: rebuild it with analyse.py compact)") from None
    lines = text.splitlines()
    head = _parse(lines[0], path, 1) if lines else {}
    if head.get("kind") != "sweep" or head.get("format") != FORMAT:
        raise RowsError(f"{path}:1: not a format-{FORMAT} sweep line (fix: rebuild it with analyse.py compact)")
    rows = Rows(plan=head["plan"], arms={a["arm"]: [] for a in head["plan"]["arms"]})
    for n, ln in enumerate(lines[1:], 2):
        r = _parse(ln, path, n)
        if r.get("kind") == "metrics" and isinstance(r.get("row"), dict):
            rows.metrics.setdefault(r["run"], []).append(r["row"])
        elif r.get("kind") == "eval" and r.get("arm") in rows.arms:
            rows.arms[r["arm"]].append(r)
        else:
            raise RowsError(f"{path}:{n}: neither an eval row of a planned arm nor a metrics row (fix: rebuild it "
                            "with analyse.py compact)")
    return rows


def _parse(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        r = json.loads(line)
    except json.JSONDecodeError as e:
        raise RowsError(f"{path}:{n}: not JSON ({e.msg}; fix: rebuild it with analyse.py compact)") from None
    if not isinstance(r, dict):
        raise RowsError(f"{path}:{n}: not a JSON object (fix: rebuild it with analyse.py compact)")
    return r


def cut(rows: Rows, runs: set[str] | None) -> Rows:
    """The baseline and the given runs' arms and metrics (all of them with runs None)."""
    if runs is None:
        return rows
    arms = [a for a in rows.plan["arms"] if a["role"] == "baseline" or a.get("run") in runs]
    return Rows(plan=dict(rows.plan, arms=arms), arms={a["arm"]: rows.arms.get(a["arm"], []) for a in arms},
                metrics={r: m for r, m in rows.metrics.items() if r in runs})


def write_folder(rows: Rows, dst: Path) -> Path:
    """The rows as the sweep folder they were compacted from, file for file as compact wrote it before issue 54:
    sweep.json, arms/<arm>.jsonl (one row a line, keys sorted) and metrics/<run>.jsonl (as the run wrote it)."""
    from twinrun.core.records import atomic_write_json

    (dst / "arms").mkdir(parents=True, exist_ok=True)
    (dst / "metrics").mkdir(exist_ok=True)  # not runs/: .gitignore keeps run folders out of the repository
    # plain writes, no fsync per file: a view is rebuilt from the committed file, never the only copy
    for a in rows.plan["arms"]:
        (dst / "arms" / f"{a['arm']}.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows.arms.get(a["arm"], [])), encoding="utf-8")
    for run, ms in rows.metrics.items():
        (dst / "metrics" / f"{run}.jsonl").write_text("".join(_compact(r) + "\n" for r in ms), encoding="utf-8")
    atomic_write_json(dst / "sweep.json", rows.plan)  # last: a folder is a sweep once its sweep.json is there
    return dst


def read_folder(src: Path) -> Rows:
    """A compact sweep folder (the layout :func:`write_folder` writes) as rows."""
    from twinrun.core.records import read_jsonl

    plan = json.loads((src / "sweep.json").read_text(encoding="utf-8"))
    return Rows(plan=plan, arms={a["arm"]: list(read_jsonl(src / "arms" / f"{a['arm']}.jsonl")) for a in plan["arms"]},
                metrics={f.stem: list(read_jsonl(f)) for f in sorted((src / "metrics").glob("*.jsonl"))})


def unpack(dst: Path, path: Path = ROWS, runs: set[str] | None = None) -> Path:
    """The committed rows (or the given runs' and the baseline's) as a sweep folder at dst, for readers of a
    folder (``twinrun compare``, ``compare --training``, the tests)."""
    return write_folder(cut(read(path), runs), dst)
