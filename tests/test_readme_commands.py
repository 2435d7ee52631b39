"""Every command the README and the docs/ pages show, checked against the code.

* The by-hand block of docs/running.md runs verbatim (a relative TWINRUN_CACHE, and a relative ALFWORLD_DATA from
  the user's environment) for both backends, one training step each: the user's first path must work as written.
* A ``python -c`` one-liner runs. Every other ``twinrun`` command line (in a ```bash block or an inline `code` span) names a command the CLI has
  (a group's subcommand spelled out: no implicit routing) and only options that command declares, and the command's
  ``--help`` runs; every ``make`` target exists in the Makefile; every ``python -m`` module exists.
* The README's quick start is exactly two commands, ``make demo`` and ``make test``.

The block is read from docs/running.md, so an edit there is what gets tested. Three things are arranged around it, not
changed in it: a scratch folder laid out as a clone (`experiments/`, `.cache/twinrun` linked to this session's model
cache, the games linked beside it and named by a relative ALFWORLD_DATA), `.venv/bin/twinrun` as a shim that runs this checkout's CLI
(the venv's own entry point might import another checkout), and `--set` options appended to each `train`
line that shrink the run to one step.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from twinrun.testing.doc_commands import shell_lines, twinrun_calls

# one step, one group of two rollouts, short episodes: the same counts under both backends
TINY = ("--set steps=1 --set checkpoint_every=1 --set batch.groups_per_step=1 --set batch.rollouts_per_group=2 "
        "--set executor.max_turns=3")


def readme_block(repo_root: Path) -> list[str]:
    text = (repo_root / "docs" / "running.md").read_text(encoding="utf-8")
    after = text.split("One backend alone, by hand", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block, "docs/running.md: the by-hand block (```bash after 'One backend alone, by hand') is missing"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def test_the_readme_block_exports_relative_paths_and_trains_both_backends(repo_root: Path) -> None:
    lines = readme_block(repo_root)
    assert lines[0].startswith("export ") and "TWINRUN_CACHE=.cache/" in lines[0]
    assert "shared" not in "\n".join(lines)  # the games come from the user's ALFWORLD_DATA or alfworld-download
    assert {b for ln in lines for b in re.findall(r"--backend (\w+)", ln)} == {"trl", "verl"}


@pytest.mark.alfworld
@pytest.mark.slow
@pytest.mark.sampling
def test_readme_by_hand_commands_run_verbatim(repo_root: Path, tmp_path: Path, alfworld_data: Path,
                                             cache_dir: Path) -> None:
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "data").mkdir(parents=True)
    (tmp_path / "data" / "alfworld").symlink_to(alfworld_data.resolve())
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
    env["ALFWORLD_DATA"] = "../data/alfworld"  # relative: the CLI makes it absolute for verl's workers
    got = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=1200)
    assert got.returncode == 0, f"{script}\n{got.stdout[-3000:]}\n{got.stderr[-3000:]}"
    for backend in ("trl", "verl"):
        run = clone / "runs" / f"smoke-{backend}"
        assert (run / "checkpoints" / "step-000001" / "config.json").is_file(), (backend, got.stderr[-3000:])
        assert (run / "metrics.jsonl").read_text().strip(), backend


# ------------------------------------------------------------------------------------------------------------
# Every command of the README and the docs pages


def doc_pages(repo_root: Path) -> list[Path]:
    return [repo_root / "README.md", *sorted((repo_root / "docs").glob("*.md"))]


def resolve(root, args: list[str]):
    """(command, its path, the remaining args) for a twinrun argument list; groups need their subcommand."""
    cmd, path, rest = root, [], list(args)
    while hasattr(cmd, "commands"):  # a group (typer's own click classes: no isinstance against click.Group)
        assert rest and rest[0] in cmd.commands, f"twinrun {' '.join(path)}: {rest[:1]} is not one of {sorted(cmd.commands)}"
        path.append(rest[0])
        cmd, rest = cmd.commands[rest[0]], rest[1:]
    return cmd, path, rest


def test_every_documented_command_exists_with_its_options(repo_root: Path, tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from twinrun.cli import app

    root = typer.main.get_command(app)
    makefile = (repo_root / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", makefile, re.M))
    helped: set[tuple[str, ...]] = set()
    checked = 0
    for page in doc_pages(repo_root):
        where = page.relative_to(repo_root)
        for line in shell_lines(page.read_text(encoding="utf-8")):
            if re.match(r"make [a-z]", line):
                for target in re.findall(r"(?<![\w.-])([a-z][a-z0-9-]*)", line.split("#")[0])[1:]:
                    if "=" not in target:
                        assert target in targets, f"{where}: `{line}`: make target {target!r} is not in the Makefile"
                checked += 1
                continue
            if line.startswith("python -c "):  # a one-liner runs as written (in a scratch folder)
                got = subprocess.run([sys.executable, "-c", shlex.split(line)[2]], cwd=tmp_path, capture_output=True,
                                     text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(repo_root)})
                assert got.returncode == 0, f"{where}: `{line}`: {got.stderr[-1000:]}"
                checked += 1
                continue
            m = re.match(r"python -m (twinrun[\w.]*)", line)
            if m:
                assert importlib.util.find_spec(m.group(1)), f"{where}: `{line}`: no module {m.group(1)}"
                checked += 1
                continue
            for args in twinrun_calls(line):
                cmd, path, rest = resolve(root, args)
                declared = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
                for opt in (w.split("=", 1)[0] for w in rest if w.startswith("--")):
                    assert opt in declared, f"{where}: `{line}`: twinrun {' '.join(path)} has no option {opt}"
                if tuple(path) not in helped:
                    res = CliRunner().invoke(app, [*path, "--help"])
                    assert res.exit_code == 0, f"{where}: twinrun {' '.join(path)} --help: {res.output[-500:]}"
                    helped.add(tuple(path))
                checked += 1
    assert checked >= 40 and len(helped) >= 12, (checked, sorted(helped))


def test_the_checker_refuses_what_the_cli_does_not_have() -> None:
    import typer

    from twinrun.cli import app

    root = typer.main.get_command(app)
    with pytest.raises(AssertionError, match="is not one of"):
        resolve(root, ["sft-data", "experiments/x.yaml", "--out", "f"])  # implicit routing is not documentation
    cmd, path, _ = resolve(root, ["sft-data", "build", "S", "--out", "f"])
    assert path == ["sft-data", "build"] and "--out" in {o for p in cmd.params for o in p.opts}
    lines = shell_lines("```bash\nS=spec.yaml\ntwinrun sft $S \\\n  --plan  # two lines\n```\nand `twinrun card A [--push R]`")
    assert lines == ["twinrun sft spec.yaml    --plan", "twinrun card A [--push R]"]
    assert twinrun_calls(lines[1]) == [["card", "A", "--push", "R"]]


def test_the_readme_quick_start_is_two_commands(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quick, re.S)
    assert len(blocks) == 1
    commands = [ln.split("#", 1)[0].strip() for ln in blocks[0].splitlines() if ln.split("#", 1)[0].strip()]
    assert commands == ["make demo", "make test"]
    assert len(text.splitlines()) <= 170, "README: a newcomer's page; the rest belongs in docs/"
