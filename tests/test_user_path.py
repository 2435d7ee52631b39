"""The user's path as written: what the CLI refuses up front, instead of failing deep inside a framework's child."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twinrun import cli


def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["twinrun", *args])
    with pytest.raises(SystemExit) as e:
        cli.main()
    return int(e.value.code or 0)


@pytest.mark.parametrize("command", [["train", "--backend", "verl"], ["run"]])
def test_linear_schedule_is_refused_before_verl_starts(monkeypatch, capsys, tmp_path: Path, smoke_spec_path: Path,
                                                       command: list[str]) -> None:
    """verl's FSDP optimizer has no linear schedule; the refusal names field, value and fix in one line."""
    from twinrun.backends import registry

    # no trainer may start (were the refusal cut, this fails at once instead of training)
    monkeypatch.setattr(registry, "trainer", lambda b: pytest.fail(f"the {b} trainer was reached"))
    out = tmp_path / "run"
    code = run_cli(monkeypatch, command[0], str(smoke_spec_path), *command[1:], "--out", str(out),
                   "--set", "optimizer.schedule=linear")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "optimizer.schedule: 'linear'" in err and "fix: --set optimizer.schedule=cosine" in err
    assert not out.exists()  # nothing started


def test_linear_schedule_stays_open_to_trl(smoke_spec_path: Path) -> None:
    from twinrun.backends import registry
    from twinrun.core.spec import load_spec

    spec = load_spec(smoke_spec_path, ["optimizer.schedule=linear"])
    registry.check_runnable("trl", spec)  # TRL has a linear schedule: no refusal
    with pytest.raises(Exception, match="optimizer.schedule"):
        registry.check_runnable("verl", spec)


def _pytest_without_games(repo_root: Path, tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    """This suite's own conftest on two sweep tests (one pure, one on real games), with no ALFWorld data."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    env["ALFWORLD_DATA"] = str(tmp_path / "no-games")
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/core/sweeps/test_sweep.py",
                           "-k", "stratified or resume_noop"], cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_without_games_a_user_run_passes_and_says_what_was_skipped(repo_root: Path, tmp_path: Path) -> None:
    got = _pytest_without_games(repo_root, tmp_path, ci=False)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    lines = [ln for ln in got.stdout.splitlines() if ln.startswith("twinrun: ")]
    assert got.stdout.strip().splitlines()[-1] == lines[-1]  # the run ends with it
    assert len(lines) == 1 and "1 tests skipped without ALFWorld games" in lines[0] and "fix: export" in lines[0]


def test_without_games_a_ci_run_fails_at_once_with_the_fix(repo_root: Path, tmp_path: Path) -> None:
    got = _pytest_without_games(repo_root, tmp_path, ci=True)
    assert got.returncode == 4, got.stdout[-2000:] + got.stderr[-2000:]  # pytest's usage error: nothing ran
    err = [ln for ln in (got.stdout + got.stderr).splitlines() if "CI=true" in ln]
    assert len(err) == 1 and "ALFWORLD_DATA" in err[0] and "fix: export ALFWORLD_DATA=" in err[0]
    assert "passed" not in got.stdout
