"""Issue 30, children die with their parent: a child started through core.parent_death is killed by the kernel when
its parent is killed with SIGKILL (no handler runs), and verl's child runner stops the child's whole process group
when its own process gets SIGTERM. Real processes; the verl end-to-end case is tests/backends/test_verl_orphans.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

PARENT = """
import subprocess, sys, time
from twinrun.core.records.parent_death import dying_with_parent
cmd = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"]
child = subprocess.Popen(dying_with_parent(cmd) if sys.argv[1] == "guarded" else cmd)
time.sleep(1.5)  # the child armed its signal and started its own child
print(child.pid, flush=True)
time.sleep(300)
"""


def _start_parent(mode):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True, env=ENV)
    child = psutil.Process(int(parent.stdout.readline()))
    return parent, child


def test_a_guarded_child_dies_when_its_parent_is_killed_with_sigkill():
    parent, child = _start_parent("guarded")
    assert "sleep" in " ".join(child.cmdline()) or child.is_running()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    _, alive = psutil.wait_procs([child], timeout=5)
    assert not alive


def test_an_unguarded_child_outlives_its_killed_parent():
    """The cut: without the wrapper the child is orphaned (what main did with verl's trainer)."""
    parent, child = _start_parent("plain")
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _, alive = psutil.wait_procs([child], timeout=3)
        assert alive == [child]
    finally:
        for p in [child, *child.children(recursive=True)]:
            p.kill()


RUNNER = """
import sys
from pathlib import Path
from twinrun.backends.verl.child import run_child
run_child([sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"],
          cwd=Path(sys.argv[1]), env={"PATH": "/usr/bin:/bin"}, log_path=Path(sys.argv[1]) / "log",
          on_poll=lambda: print("polled", flush=True), poll_s=0.5)
"""


def test_sigterm_to_the_runner_stops_the_childs_whole_group(tmp_path):
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=ENV)
    assert runner.stdout.readline().strip() == "polled"
    time.sleep(1.0)
    group = psutil.Process(runner.pid).children(recursive=True)
    assert len(group) >= 2  # the child and its own child (Ray's daemons, in verl's case)
    t0 = time.monotonic()
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=20) == 128 + signal.SIGTERM
    _, alive = psutil.wait_procs(group, timeout=5)
    assert not alive and time.monotonic() - t0 < 15
