"""CLI helpers: the cache folder reaches child processes (verl's trainer, Ray workers) as an absolute path."""

from __future__ import annotations

from pathlib import Path

from twinrun.commands._common import cache_dir


def test_a_relative_cache_folder_is_made_absolute(monkeypatch, tmp_path):
    """docs/running.md's by-hand commands export TWINRUN_CACHE=.cache/twinrun; verl's child runs elsewhere, so a relative
    path reached it as a hub repo id and training failed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TWINRUN_CACHE", ".cache/twinrun")
    assert cache_dir(None) == tmp_path / ".cache" / "twinrun"
    assert cache_dir(Path("rel")) == tmp_path / "rel"
    monkeypatch.delenv("TWINRUN_CACHE")
    assert cache_dir(None) is None


def test_relative_path_variables_reach_children_absolute(tmp_path):
    """A relative ALFWORLD_DATA (e.g. data/alfworld beside the clone): verl's agent-loop workers run in
    another folder and failed with 'has no json_2.1.1/'; the CLI makes both variables absolute before any child."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "ALFWORLD_DATA": "../data", "TWINRUN_CACHE": "c"}
    code = ("import os, twinrun.cli as c; c.absolute_path_variables(); "
            "print(os.environ['ALFWORLD_DATA']); print(os.environ['TWINRUN_CACHE'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path.parent / "data"), str(tmp_path / "c")]


def test_a_local_model_folder_reaches_children_absolute(monkeypatch, tmp_path):
    """curator.model: a relative local folder loads here, but verl's child runs in <run>/verl, where it would be
    taken for a hub id: the name every backend resolves is absolute; hub ids stay as written."""
    from types import SimpleNamespace

    from twinrun.models import resolve_model
    from twinrun.models.warmstart import resolve_curator_model

    (tmp_path / "models" / "my-curator").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    want = str(tmp_path / "models" / "my-curator")
    assert resolve_model("models/my-curator", None) == want
    assert resolve_curator_model(SimpleNamespace(curator=SimpleNamespace(model="models/my-curator")), None) == want
    assert resolve_model("Qwen/Qwen3-8B", None) == "Qwen/Qwen3-8B"


def test_the_cli_spec_names_local_model_folders_absolutely(monkeypatch, tmp_path, smoke_spec_path):
    """Every model field the CLI reads (curator, SFT, an hf executor) that is a relative local folder is made
    absolute before any backend sees the spec; hub ids and the spec's prompts are as written / absolute."""
    from twinrun.commands._common import spec_from_cli

    (tmp_path / "m" / "cur").mkdir(parents=True)
    (tmp_path / "m" / "ex").mkdir()
    monkeypatch.chdir(tmp_path)
    spec = spec_from_cli(smoke_spec_path, ["curator.model=m/cur", "sft.model=m/cur", "executor.kind=hf",
                                           "executor.skill_effect=0", "executor.self_judge_error=0",
                                           "executor.model=m/ex"])
    assert (spec.curator.model, spec.sft.model, spec.executor.model) == (
        str(tmp_path / "m" / "cur"), str(tmp_path / "m" / "cur"), str(tmp_path / "m" / "ex"))
    assert spec.prompt_path("curator_system").is_absolute()
    assert spec_from_cli(smoke_spec_path, ["curator.model=Qwen/Qwen3-8B"]).curator.model == "Qwen/Qwen3-8B"
