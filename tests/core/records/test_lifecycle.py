"""Core's run lifecycle (issue 54 item 1), the one every trainer uses: the step convention of its truncation, the
guard before any write, the lock for the block and nothing held after it."""

from __future__ import annotations

import json

import pytest

from twinrun.core.records import JsonlWriter, RecordError, RunPaths, read_jsonl
from twinrun.core.records.lifecycle import RunLifecycle, run_lifecycle, truncate_records
from twinrun.core.records.lock import FolderLocked, check_unlocked


def _run(paths: RunPaths, steps: int = 3) -> None:
    """Rows of ``steps`` training steps as a trainer appends them: one rollout (2 episodes) per step."""
    with JsonlWriter(paths.metrics) as m, JsonlWriter(paths.rollouts) as r, JsonlWriter(paths.episodes) as e, \
            JsonlWriter(paths.rows) as rows, JsonlWriter(paths.root / "native.jsonl") as n:
        for s in range(steps):
            e.write_many([{"group_step": s, "i": i} for i in range(2)])
            r.write({"step": s, "executor_episodes": 2})  # core's 0-based task-group step
            rows.write({"step": s + 1})  # 1-based training step
            m.write({"step": s + 1})
            n.write({"step": s + 1})
    paths.spec.write_text("spec: 1\n")


def test_truncation_keeps_the_first_k_training_steps_of_every_record(tmp_path):
    paths = RunPaths(tmp_path)
    _run(paths)
    truncate_records(paths, 2, extra=[tmp_path / "native.jsonl"])
    assert [r["step"] for r in read_jsonl(paths.metrics)] == [1, 2]
    assert [r["step"] for r in read_jsonl(paths.rows)] == [1, 2]
    assert [r["step"] for r in read_jsonl(tmp_path / "native.jsonl")] == [1, 2]
    assert [r["step"] for r in read_jsonl(paths.rollouts)] == [0, 1]  # training step s + 1 trains group step s
    assert [e["group_step"] for e in read_jsonl(paths.episodes)] == [0, 0, 1, 1]
    truncate_records(paths, 0)
    assert not list(read_jsonl(paths.metrics)) and not list(read_jsonl(paths.episodes))


def test_a_refused_resume_writes_nothing_and_takes_no_lock(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    _run(paths)
    before = {p.name: p.read_bytes() for p in paths.root.iterdir()}
    with pytest.raises(RecordError, match="different spec"):
        with run_lifecycle(paths, spec_yaml="spec: 2\n", backend="trl", resume=True):
            pass
    assert {p.name: p.read_bytes() for p in paths.root.iterdir()} == before


def test_begin_locks_writes_and_truncates_then_the_block_releases(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    _run(paths)
    refused = []

    def compare(old, new):
        refused.append((old, new))

    (paths.resolved_config).write_text(json.dumps({"lr": 1}))
    with run_lifecycle(paths, spec_yaml="spec: 1\n", backend="trl", resume=True, compare=compare) as run:
        assert run.resuming and run.lock_fd is None
        run.guard({"lr": 1})
        run.begin(resolved={"lr": 1}, keep_steps=1, files={"plan.json": {"a": 1}})
        assert run.lock_fd is not None
        with pytest.raises(FolderLocked):
            check_unlocked(paths.root)
        assert [r["step"] for r in read_jsonl(paths.metrics)] == [1]
        assert json.loads(paths.run_info.read_text()) == {"backend": "trl"}
        assert json.loads((paths.root / "plan.json").read_text()) == {"a": 1}
        assert not run.finished(1, 3) and run.finished(3, 3)
    check_unlocked(paths.root)  # released
    assert refused and all(old == {"lr": 1} for old, _ in refused)


def test_keep_steps_none_keeps_every_record_and_other_ranks_write_nothing(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    _run(paths)
    with run_lifecycle(paths, spec_yaml="spec: 1\n", backend="trl", resume=True) as run:
        run.begin(keep_steps=None)
    assert len(list(read_jsonl(paths.metrics))) == 3
    other = RunLifecycle(RunPaths(tmp_path / "absent"), "spec: 1\n", "trl", resume=True, writer=False)
    assert other.guard() == "resume"  # rank 0 refuses for the others
    other.begin(keep_steps=0)
    assert not (tmp_path / "absent").exists()
