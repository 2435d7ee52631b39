"""One writer per folder: an exclusive lock on a run or sweep folder, held by the process that writes it and by
every child it starts.

The lock is ``fcntl.flock`` on ``<folder>/.twinrun.lock``, which holds the holder's pid (for the refusal's message).
The kernel drops a flock when the last process holding its file descriptor exits, however it exits (kill -9
included), so a stale lock (holder dead) is taken over without any clean-up, and a child that inherited the
descriptor (``pass_fds``) keeps the folder locked for as long as it runs, even if its parent was killed. Written
here rather than with ``filelock``: the lock's descriptor is handed to children, the holder's pid is written into
it, and :func:`check_unlocked` probes a folder without creating anything in it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from twinrun.core.errors import TwinrunError

LOCK_NAME = ".twinrun.lock"


class FolderLocked(TwinrunError):
    """Another process writes the folder."""


def lock_path(folder: str | Path) -> Path:
    return Path(folder) / LOCK_NAME


def _flock_nb(fd: int) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "another process"


def _refusal(folder: Path, option: str) -> FolderLocked:
    return FolderLocked(f"{option}: {str(folder)!r} is being written by {_holder(lock_path(folder))} (fix: wait for it "
                        f"to finish or stop it, then run again; a second writer would interleave its rows)")


def check_unlocked(folder: str | Path, *, option: str = "--out") -> None:
    """Refuse a folder another live process holds; creates and changes nothing (a read-only probe)."""
    folder = Path(folder)
    path = lock_path(folder)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file (or no folder): nobody has written it under a lock
        return
    try:
        if not _flock_nb(fd):
            raise _refusal(folder, option)
    finally:
        os.close(fd)  # closing the descriptor releases the probe's lock


@contextmanager
def folder_lock(folder: str | Path, *, option: str = "--out") -> Iterator[int]:
    """Hold ``folder``'s lock (creating the folder) while the body runs; yields the lock's file descriptor, to be
    passed to child processes (``subprocess.Popen(pass_fds=[fd])``) so they hold it too. A live holder: refused in
    one line naming its pid; a dead one's lock is free and taken over. A folder this call created and nothing but
    the lock was written into (the body refused before its first write) is removed again."""
    folder = Path(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = lock_path(folder)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not _flock_nb(fd):
            raise _refusal(folder, option)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        yield fd
    finally:
        if created and [p.name for p in folder.iterdir()] == [LOCK_NAME]:
            path.unlink(missing_ok=True)
            folder.rmdir()
        os.close(fd)


__all__ = ["LOCK_NAME", "FolderLocked", "check_unlocked", "folder_lock", "lock_path"]
