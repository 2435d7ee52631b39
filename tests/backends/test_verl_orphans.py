"""Issue 30, children die with their parent: `kill -9` of the `twinrun train --backend verl` process while verl
trains leaves no process of the run behind (verl's trainer, Ray and its workers), nothing writes into the run
folder afterwards, and `--resume` completes the run. Red on main: the trainer, Ray and its workers kept running and
kept appending rows. Real verl 0.9.1 on CPU with a random tiny curator (no warm start: what it samples does not
matter here) and the scripted executor on real ALFWorld games."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from twinrun.core.records import RunPaths, read_jsonl  # noqa: E402
from twinrun.testing.run_folders import folder_digest  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.alfworld]

STEP_TIMEOUT_S = 1200  # one verl step on 2 busy CPU cores, Ray's start-up included


def _run_processes(out) -> list:
    """Every live process started for the run in ``out``: verl's child environment names the run folder
    (VERL_FILE_LOGGER_PATH), and Ray's processes and workers inherit it, daemonised or not."""
    found = []
    for p in psutil.process_iter():
        try:
            if str(out) in p.environ().get("VERL_FILE_LOGGER_PATH", "") and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _twinrun(args, log):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-m", "twinrun.cli", *map(str, args)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def test_kill_9_of_the_parent_leaves_no_process_and_resume_completes(smoke_spec_path, alfworld_data, tmp_path):
    from twinrun.models.tiny import build_tiny_qwen3

    tiny = build_tiny_qwen3(tmp_path / "tiny")
    sets = [f"--set=curator.model={tiny}", "--set=curator.context=accumulated", "--set=steps=2"]
    out = tmp_path / "run"
    paths = RunPaths(out)
    train = ["train", smoke_spec_path, "--backend", "verl", "--out", out, *sets]
    with open(tmp_path / "first.log", "wb") as log:
        parent = _twinrun(train, log)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not list(read_jsonl(paths.rollouts)):  # verl's trainer and Ray are up and writing
            assert parent.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no rollout row within the time limit"
            time.sleep(1)
        running = _run_processes(out)
        assert any("verl.trainer.main_ppo" in " ".join(p.cmdline()) for p in running)
        assert len(running) >= 3, [p.cmdline()[:3] for p in running]  # the trainer, Ray's daemons, its workers
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    t0 = time.monotonic()
    _, alive = psutil.wait_procs(running, timeout=15)
    alive += [p for p in _run_processes(out) if p not in alive]
    assert not alive, [" ".join(p.cmdline()[:4]) for p in alive]
    gone_s = time.monotonic() - t0
    settled = folder_digest(out)
    time.sleep(10)
    assert folder_digest(out) == settled, "something still writes into the run folder"
    print(f"every process of the run gone {gone_s:.1f} s after kill -9 of its parent")

    with open(tmp_path / "resume.log", "wb") as log:
        resumed = _twinrun([*train, "--resume"], log)
        assert resumed.wait(timeout=2 * STEP_TIMEOUT_S) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    assert [int(r["step"]) for r in read_jsonl(paths.metrics)] == [1, 2]
    assert not _run_processes(out)
