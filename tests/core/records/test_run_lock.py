"""Issue 30, one writer per folder: core.run_lock against real processes (a second writer refused in one line
naming the holder's pid, a dead holder's lock taken over, a child that inherited the lock keeps the folder locked
after its parent let go)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from twinrun.core.records.lock import LOCK_NAME, FolderLocked, check_unlocked, folder_lock

HOLD = ("import sys, time; from twinrun.core.records.lock import folder_lock\n"
        "with folder_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(120)\n")


def _holder(folder):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_writer_is_refused_naming_the_holder_then_takes_a_dead_holders_lock(tmp_path):
    folder = tmp_path / "run"
    holder = _holder(folder)
    try:
        for attempt in (lambda: check_unlocked(folder), lambda: folder_lock(folder).__enter__()):
            with pytest.raises(FolderLocked, match=rf"^--out: '{folder}' is being written by pid {holder.pid} \(fix:"):
                attempt()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    check_unlocked(folder)  # the kernel dropped the dead holder's lock: nothing to clean up
    with folder_lock(folder):
        assert (folder / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_a_child_that_inherited_the_lock_keeps_the_folder_locked(tmp_path):
    folder = tmp_path / "run"
    with folder_lock(folder) as fd:
        (folder / "spec.yaml").write_text("x")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=(fd,))
    try:  # the parent let go; its child (verl's trainer, in twinrun) still holds the folder
        with pytest.raises(FolderLocked, match="is being written by"):
            check_unlocked(folder)
    finally:
        child.kill()
        child.wait()
    check_unlocked(folder)


def test_a_folder_the_lock_created_is_removed_when_nothing_else_was_written(tmp_path):
    folder = tmp_path / "new" / "run"
    with pytest.raises(RuntimeError), folder_lock(folder):
        raise RuntimeError("a refusal before the first write")
    assert not folder.exists() and folder.parent.exists()
    with folder_lock(folder):
        (folder / "spec.yaml").write_text("x")
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME, "spec.yaml"]


def test_the_lock_file_is_not_an_unchanged_folders_content(tmp_path):
    """A run folder whose only writer finished holds its lock file; a probe creates nothing."""
    check_unlocked(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()
