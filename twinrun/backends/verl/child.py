"""verl's trainer as a child process that dies with its parent (issue 30: no orphaned trainer keeps writing into a
run folder): its own process group, a parent-death signal (core.parent_death), and the whole group stopped on an
interrupt, SIGTERM or error in the parent."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from twinrun.core.records.parent_death import STOP_GRACE_S, dying_with_parent, stop_group  # noqa: F401

POLL_S = 2.0  # how often the parent reads the child's step log (live progress)


def run_child(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path,
              on_poll: Callable[[], Any] | None = None, poll_s: float = POLL_S, pass_fds: tuple[int, ...] = ()) -> int:
    """`cmd` in a child process, its output appended to log_path, `on_poll` called while it runs.

    The child dies with this process: it runs in its own process group (a new session: the terminal's Ctrl-C
    reaches this process, which stops the whole group), the kernel kills it if this process dies (kill -9
    included: core.parent_death), and Ray's own processes die with it (Ray ties them to the driver). On an
    interrupt, SIGTERM or any error here the group gets SIGTERM, then SIGKILL after STOP_GRACE_S."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log, _sigterm_raises():
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(dying_with_parent(cmd), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=pass_fds, start_new_session=True)
        try:
            while True:
                try:
                    return proc.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    if on_poll is not None:
                        on_poll()
        except BaseException:
            stop_group(proc)
            raise


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While verl runs, SIGTERM to this process raises SystemExit (143) like Ctrl-C raises KeyboardInterrupt, so
    the child's group is stopped before this process ends (Python's default would end it at once)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
