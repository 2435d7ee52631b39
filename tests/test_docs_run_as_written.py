"""Issue 43: the docs run as written. Every `twinrun` command line in README.md, docs/ and DIVERGENCES.md is parsed
by the real CLI's parser (required arguments and options included, placeholders such as SPEC or DIR replaced by a
value of their option's type), every `--set FIELD=VALUE` names a spec field and loads through the spec loader, and
every relative link reaches a file and heading. docs/commands.md is generated from the CLI and must be current.

On the docs before this test (main at d05ed47) it reported 23 problems (tests/data/docs-test-on-main-d05ed47.txt),
among them README's `twinrun preflight SPEC --backend trl|verl` (Missing option '--out'), docs/spec.md's
`twinrun run SPEC --set curator.context=accumulated` (Missing option '--out'), measured.md's and DIVERGENCES.md's
`twinrun parity --set curator.context=accumulated --knobs` (Missing argument 'SPEC'), measured.md's
`--set executor.expert_prob=0.6 executor.skill_effect=0 ...` (one field per --set) and README's link
running.md#the-demo (no such heading).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from twinrun.testing.doc_commands import (
    broken_links, check_call, set_fragment_problems, shell_lines, twinrun_calls,
)


def pages(repo_root: Path) -> list[Path]:
    return [repo_root / "README.md", repo_root / "DIVERGENCES.md", *sorted((repo_root / "docs").glob("*.md"))]


def problems(repo_root: Path) -> list[str]:
    import typer

    from twinrun.cli import app

    root = typer.main.get_command(app)
    out: list[str] = []
    for page in pages(repo_root):
        where = page.relative_to(repo_root)
        text = page.read_text(encoding="utf-8")
        for line in shell_lines(text):
            if line.startswith("--set "):
                out += [f"{where}: `{line}`: {p}" for p in set_fragment_problems(line, repo_root)]
                continue
            for args in twinrun_calls(line):
                out += [f"{where}: `{line}`: {p}" for p in check_call(root, args, repo_root)]
        out += [f"{where}: {p}" for p in broken_links(page, text)]
    return out


def test_every_documented_command_line_parses_with_the_real_cli(repo_root):
    found = problems(repo_root)
    assert not found, f"{len(found)} problem(s):\n" + "\n".join(found)


def test_docs_commands_md_is_generated_from_the_cli(repo_root):
    from twinrun.commands._reference import render

    text = (repo_root / "docs" / "commands.md").read_text(encoding="utf-8")
    assert text == render(), "docs/commands.md is stale (fix: python -m twinrun.commands._reference --write " \
        "docs/commands.md)"


def test_the_checker_refuses_what_the_cli_refuses(repo_root):
    """Cut the parser out and these pass: each is a line the docs once had."""
    import typer

    from twinrun.cli import app

    root = typer.main.get_command(app)
    assert any("--out" in p for p in check_call(root, ["preflight", "SPEC", "--backend", "trl|verl"], repo_root))
    assert any("SPEC" in p for p in check_call(root, ["parity", "--knobs"], repo_root))
    assert any("one field per --set" in p for p in check_call(
        root, ["train", "experiments/smoke-cpu.yaml", "--backend", "trl", "--out", "D", "--set", "steps=1",
               "checkpoint_every=1"], repo_root))
    assert any("not a spec field" in p for p in check_call(
        root, ["plan", "experiments/smoke-cpu.yaml", "--set", "cache_games=true"], repo_root))
    assert check_call(root, ["train", "SPEC", "--backend", "trl", "--out", "DIR", "--set", "steps=2"], repo_root) == []
    assert check_call(root, ["design", "--delta", "10", "--rho", "0.02"], repo_root) == []
    page = repo_root / "README.md"
    assert broken_links(page, "[x](docs/running.md#no-such-heading)") == [
        "link docs/running.md#no-such-heading: no heading #no-such-heading in docs/running.md"]


@pytest.mark.parametrize("text, want", [("```bash\nS=spec.yaml\ntwinrun sft $S \\\n  --plan  # two\n```",
                                         ["twinrun sft spec.yaml    --plan"])])
def test_shell_lines(text, want):
    assert shell_lines(text) == want
