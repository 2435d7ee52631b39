"""Children die with their parent: a training process's children (verl's trainer and the Ray it starts, TRL's
ranks under torchrun) are killed by the kernel when their parent dies, however it dies (kill -9 included), so
no orphan keeps writing into a run folder beside a later ``--resume``.

Linux's ``prctl(PR_SET_PDEATHSIG)`` asks the kernel to signal a process when its parent exits; the setting
survives ``execve``. :func:`die_with_parent` sets it in the calling process (a torchrun rank, at start-up);
:func:`dying_with_parent` wraps a command line so that the child sets it before it becomes the command
(a few lines of ``python -c`` that arm it, then exec the command): unlike ``preexec_fn`` this is safe in a parent
with threads. Elsewhere than Linux both are no-ops (the child then outlives a killed parent, as before).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGKILL, *, parent: int | None = None) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies. ``parent``: the pid it should have; if
    that parent is already gone (it died before the signal was armed), exit now. Returns False where the
    platform has no such signal."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if parent is not None and os.getppid() != parent:
        os._exit(1)
    return True


# what the child runs before it becomes the command: self-contained (the child's environment need not import
# twinrun), the same steps as die_with_parent
_ARM_AND_EXEC = (
    "import ctypes, os, sys\n"
    "if sys.platform.startswith('linux'):\n"
    "    if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:\n"
    "        sys.exit('prctl(PR_SET_PDEATHSIG) failed: errno %d' % ctypes.get_errno())\n"
    "    if os.getppid() != int(sys.argv[1]):\n"
    "        os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def dying_with_parent(cmd: Sequence[str]) -> list[str]:
    """``cmd`` as a command line that is SIGKILLed when this process dies (run it with ``subprocess``): the child
    arms the signal, checks its parent is still this process, then execs ``cmd``."""
    return [sys.executable, "-c", _ARM_AND_EXEC, str(os.getpid()), *cmd]


STOP_GRACE_S = 10.0  # how long a child's group (verl's trainer and Ray, a curator server) gets after SIGTERM


def stop_group(proc: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """Stop a child started in its own session and every process of its group: SIGTERM, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # a group member that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
