"""Crash-safe record files: JSON lines appended durably, whole files and folders published atomically.

Writes are append-only and durable: each row is one `write` of one line, then flush + fsync. A crash can leave
at most one torn last line; :func:`read_jsonl` drops it (and says so), and `JsonlWriter` truncates it before
appending, so resuming never duplicates or loses a complete row.

Whole files (configs, summaries) are written with :func:`atomic_write_text` (temp file + fsync + rename).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from twinrun.core.errors import TwinrunError


class RecordError(TwinrunError, ValueError):
    """A record file that cannot be used (one line: file, line number, problem)."""


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a whole file atomically: readers see the old or the new content, never a mix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
    try:  # make the rename itself durable
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


@contextmanager
def publishing_dir(dst: str | Path) -> Iterator[Path]:
    """Fill a temporary folder beside `dst`, then swap it in with one rename: readers see the old folder or the
    complete new one (a checkpoint is never half-written). On an error `dst` is left as it was."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        yield tmp
        if dst.exists():  # e.g. a step re-run after --resume replaces its own earlier export
            shutil.rmtree(dst)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):  # numpy scalars/arrays without importing numpy here
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _dumps_row(row: dict[str, Any]) -> str:
    # NaN/inf are not JSON: a record never holds them (unmeasured values are null)
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise RecordError(f"record field {k}: {v} is not finite (fix: use null for unmeasured values)")
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=_json_default, allow_nan=False)


@contextmanager
def _flocked(f: Any) -> Iterator[None]:
    """An exclusive advisory lock on an open file (between processes; a no-op where flock does not exist)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _complete_prefix_len(path: Path) -> int:
    """Byte length of the file up to and including its last newline (a torn tail line is excluded)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        step = 1 << 16
        pos = size
        while pos > 0:
            start = max(0, pos - step)
            f.seek(start)
            chunk = f.read(pos - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            pos = start
    return 0


class JsonlWriter:
    """Append rows to a JSONL file durably. Opening truncates a torn last line left by a crash.

    Several processes may append to one file (verl's agent-loop workers share rollouts.jsonl): each row is
    written, and a torn tail truncated, under an exclusive `flock` on the file, so rows never interleave and a
    writer opening the file never mistakes another's row in flight for a crash's torn line."""

    def __init__(self, path: str | Path, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._f = open(self.path, "a", encoding="utf-8")
        with _flocked(self._f):
            keep = _complete_prefix_len(self.path)
            if keep != self.path.stat().st_size:
                os.truncate(self.path, keep)

    def write(self, row: dict[str, Any] | BaseModel) -> None:
        if isinstance(row, BaseModel):
            row = row.model_dump(mode="json")
        line = _dumps_row(row) + "\n"
        with _flocked(self._f):
            self._f.write(line)
            self._f.flush()
            if self._fsync:
                os.fsync(self._f.fileno())

    def write_many(self, rows: Iterable[dict[str, Any] | BaseModel]) -> None:
        for r in rows:
            self.write(r)

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: str | Path, *, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield complete rows. A torn final line (crash mid-write) is skipped; a bad line elsewhere is an error."""
    p = Path(path)
    if not p.exists():
        return
    with open(p, encoding="utf-8") as f:
        lines = f.readlines()
    for n, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            if strict:
                raise RecordError(f"{p}:{n}: torn last line (a crash mid-write; fix: rerun to resume)")
            return
        if line.strip():
            yield _parse_line(line, p, n)


def _parse_line(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}:{n}: not JSON ({e.msg}; fix: remove or repair the line)") from None
    if not isinstance(row, dict):
        raise RecordError(f"{path}:{n}: a JSON {type(row).__name__}, not an object (fix: one object per line)")
    return row


class JsonlTail:
    """Rows that another process appends to a JSONL file, read as they complete: each call returns the rows
    completed since the last call (a line still being written waits for its newline)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._line = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:  # the writer started the file again
                    self._offset = self._line = 0
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        rows = []
        for line in chunk[: end + 1].decode("utf-8").splitlines():
            self._line += 1
            if line.strip():
                rows.append(_parse_line(line, self.path, self._line))
        return rows
