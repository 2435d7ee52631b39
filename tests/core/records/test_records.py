"""Records: crash-safe JSONL (kill -9 mid-write loses nothing complete, duplicates nothing), atomic files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from twinrun.core.records import (
    EpisodeRecord,
    JsonlWriter,
    RecordError,
    atomic_write_json,
    provenance,
    read_jsonl,
)


def test_roundtrip_and_models(tmp_path):
    p = tmp_path / "r.jsonl"
    with JsonlWriter(p) as w:
        w.write({"a": 1})
        w.write(EpisodeRecord(game_id="g", task_type="pick", outcome="unmeasured", unmeasured_reason="timeout"))
    rows = list(read_jsonl(p))
    assert rows[0] == {"a": 1}
    assert rows[1]["outcome"] == "unmeasured" and rows[1]["schema_version"] == 1


def test_torn_last_line_is_skipped_then_truncated_on_resume(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\n{"i": 1}\n{"i": 2, "x": "tor')
    assert [r["i"] for r in read_jsonl(p)] == [0, 1]
    with pytest.raises(RecordError, match="torn last line"):
        list(read_jsonl(p, strict=True))
    with JsonlWriter(p) as w:
        w.write({"i": 2})
    assert [r["i"] for r in read_jsonl(p, strict=True)] == [0, 1, 2]


def test_corrupt_middle_line_names_the_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"i": 0}\nnot json\n{"i": 2}\n')
    with pytest.raises(RecordError, match=r"r.jsonl:2: not JSON"):
        list(read_jsonl(p))


def test_non_finite_values_are_refused(tmp_path):
    with JsonlWriter(tmp_path / "r.jsonl") as w, pytest.raises(RecordError, match="field r: nan is not finite"):
        w.write({"r": float("nan")})


def test_atomic_write_json(tmp_path):
    p = tmp_path / "sub" / "c.json"
    atomic_write_json(p, {"b": 2, "a": 1})
    assert json.loads(p.read_text()) == {"a": 1, "b": 2}
    assert not [f for f in p.parent.iterdir() if f.name.startswith(".")]


def test_provenance_has_version():
    p = provenance(spec_hash="abc", backend="trl", seed=1)
    assert p.twinrun_version and p.schema_version == 1 and p.host


def test_kill_9_mid_writing_loses_no_complete_row_and_resume_duplicates_none(tmp_path):
    p = tmp_path / "r.jsonl"
    writer = (
        "import sys; from twinrun.core.records import JsonlWriter, read_jsonl\n"
        f"p={str(p)!r}\n"
        "done={r['i'] for r in read_jsonl(p)}\n"
        "w=JsonlWriter(p)\n"
        "for i in range(100000):\n"
        "    if i in done: continue\n"
        "    w.write({'i': i, 'pad': 'x'*200})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", writer])
    deadline = time.time() + 60
    while time.time() < deadline and (not p.exists() or p.stat().st_size < 20000):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = [r["i"] for r in read_jsonl(p)]
    assert first == list(range(len(first))) and len(first) > 10
    # resume to completion
    subprocess.run([sys.executable, "-c", writer.replace("range(100000)", f"range({len(first) + 50})")], check=True)
    rows = [r["i"] for r in read_jsonl(p, strict=True)]
    assert rows == list(range(len(first) + 50))


def test_processes_appending_to_one_file_lose_and_duplicate_no_row(tmp_path):
    """verl's agent-loop workers (one process each) append to the same rollouts.jsonl, and each opens its writer
    whenever its first rollout ends, possibly while another process is writing a large row: every row of every
    process is there exactly once and whole (an opening writer must not cut another's row in flight as if it were
    a crash's torn line)."""
    p = tmp_path / "r.jsonl"
    writer = (
        "import sys; from twinrun.core.records import JsonlWriter\n"
        f"p={str(p)!r}; who=int(sys.argv[1])\n"
        "for i in range(40):\n"
        "    with JsonlWriter(p, fsync=False) as w:\n"  # a fresh writer per row: the open-while-writing race
        "        w.write({'who': who, 'i': i, 'pad': 'x' * (1 << 20)})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(k)]) for k in range(3)]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0, 0]
    rows = [(r["who"], r["i"]) for r in read_jsonl(p, strict=True)]
    assert sorted(rows) == [(k, i) for k in range(3) for i in range(40)]
