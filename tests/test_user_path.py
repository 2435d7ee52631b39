"""The user's path as written: what the CLI refuses up front, instead of failing deep inside a framework's child."""

from __future__ import annotations

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
