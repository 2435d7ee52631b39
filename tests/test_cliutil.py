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
