"""README's by-hand commands, run verbatim (relative ALFWORLD_DATA and TWINRUN_CACHE, the README's working
directory layout) for both backends, one training step each: the user's first path must work as written.

The block is read from README.md, so an edit there is what gets tested. Three things are arranged around it, not
changed in it: a scratch folder laid out as a clone (`experiments/`, `../shared/data/alfworld`, `.cache/twinrun`
linked to this session's games and model cache), `.venv/bin/twinrun` as a shim that runs this checkout's CLI
(the venv's own entry point might import another checkout), and `--set` options appended to each `train`
line that shrink the run to one step.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# one step, one group of two rollouts, short episodes: the same counts under both backends
TINY = ("--set steps=1 --set checkpoint_every=1 --set batch.groups_per_step=1 --set batch.rollouts_per_group=2 "
        "--set executor.max_turns=3")


def readme_block(repo_root: Path) -> list[str]:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    after = text.split("One backend alone, by hand", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block, "README: the by-hand block (```bash after 'One backend alone, by hand') is missing"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def test_the_readme_block_exports_relative_paths_and_trains_both_backends(repo_root: Path) -> None:
    lines = readme_block(repo_root)
    assert lines[0].startswith("export ") and "ALFWORLD_DATA=../" in lines[0] and "TWINRUN_CACHE=.cache/" in lines[0]
    assert {b for ln in lines for b in re.findall(r"--backend (\w+)", ln)} == {"trl", "verl"}


@pytest.mark.alfworld
@pytest.mark.slow
def test_readme_by_hand_commands_run_verbatim(repo_root: Path, tmp_path: Path, alfworld_data: Path,
                                             cache_dir: Path) -> None:
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "alfworld").symlink_to(alfworld_data.resolve())
    (clone / "experiments").symlink_to(repo_root / "experiments")
    cache_dir.mkdir(parents=True, exist_ok=True)
    (clone / ".cache").mkdir()
    (clone / ".cache" / "twinrun").symlink_to(cache_dir.resolve())
    shim = clone / ".venv" / "bin" / "twinrun"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{repo_root}" exec "{sys.executable}" -m twinrun.cli "$@"\n')
    shim.chmod(0o755)
    lines = readme_block(repo_root)
    script = "\n".join(ln + (" " + TINY if " train " in ln else "") for ln in lines)
    env = {k: v for k, v in os.environ.items() if k not in ("ALFWORLD_DATA", "TWINRUN_CACHE", "PYTHONPATH")}
    got = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=1200)
    assert got.returncode == 0, f"{script}\n{got.stdout[-3000:]}\n{got.stderr[-3000:]}"
    for backend in ("trl", "verl"):
        run = clone / "runs" / f"smoke-{backend}"
        assert (run / "checkpoints" / "step-000001" / "config.json").is_file(), (backend, got.stderr[-3000:])
        assert (run / "metrics.jsonl").read_text().strip(), backend
