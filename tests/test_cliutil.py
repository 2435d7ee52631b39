"""CLI helpers: the cache folder reaches child processes (verl's trainer, Ray workers) as an absolute path."""

from __future__ import annotations

from pathlib import Path

from twinrun.cliutil import cache_dir


def test_a_relative_cache_folder_is_made_absolute(monkeypatch, tmp_path):
    """README's by-hand commands export TWINRUN_CACHE=.cache/twinrun; verl's child runs elsewhere, so a relative
    path reached it as a hub repo id and training failed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TWINRUN_CACHE", ".cache/twinrun")
    assert cache_dir(None) == tmp_path / ".cache" / "twinrun"
    assert cache_dir(Path("rel")) == tmp_path / "rel"
    monkeypatch.delenv("TWINRUN_CACHE")
    assert cache_dir(None) is None


def test_relative_path_variables_reach_children_absolute(tmp_path):
    """README's by-hand commands export ALFWORLD_DATA=../shared/data/alfworld: verl's agent-loop workers run in
    another folder and failed with 'has no json_2.1.1/'; the CLI makes both variables absolute before any child."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "ALFWORLD_DATA": "../data", "TWINRUN_CACHE": "c"}
    code = ("import os, twinrun.cli as c; c.absolute_path_variables(); "
            "print(os.environ['ALFWORLD_DATA']); print(os.environ['TWINRUN_CACHE'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path.parent / "data"), str(tmp_path / "c")]
