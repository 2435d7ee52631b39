"""docs/commands.md, generated from the CLI itself: every command (a group's subcommands included), every
argument and option with its type, default and help. Hand-kept tables fell behind the code (3 of `sweep`'s 18
options, no `design` or `preflight`); tests/test_docs_commands.py checks the file is current.

    python -m twinrun.commands._reference --write docs/commands.md     # after changing a command's options
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

INTRO = """\
# Commands

Generated from the CLI by `python -m twinrun.commands._reference --write docs/commands.md`; a test fails when it
is not current, so this page lists every command and every option the installed `twinrun` has. Every command also
prints its options with `--help`. A spec field is overridden with `--set optimizer.lr=1e-5`, one field per `--set`
(repeat the option for several). Any refusal is one line on stderr and exit code 2; an endpoint or simulator that
fails mid-run is exit code 3 (rows written so far are kept).
"""


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(p: Any) -> str:
    d = p.default
    if callable(d) or d is None or d == [] or d == () or (getattr(p, "is_flag", False) and d is False
                                                          and not p.secondary_opts):
        return ""
    if getattr(p, "is_flag", False) and p.secondary_opts:
        return p.opts[0] if d else p.secondary_opts[0]
    if isinstance(d, (list, tuple)):  # a repeatable option's default values, as they would be typed
        return ", ".join(f"`{v}`" for v in d)
    return f"`{d}`"


NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "Path": "PATH", "bool": "BOOLEAN"}


def _type_name(p: Any) -> str:
    """The value's type from the annotation typer read (its click types are built lazily, after parsing)."""
    import typing

    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (list, tuple) and args:
        ann = args[0]
    elif args:  # Optional[X] / X | None
        ann = args[0]
    return NAMES.get(getattr(ann, "__name__", ""), "TEXT")


def _kind(p: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    return _type_name(p) + (", repeatable" if getattr(p, "multiple", False) else "")


def _arg_name(p: Any) -> str:
    name = p.metavar or p.name.upper()
    return name + ("..." if p.nargs == -1 and not name.endswith("...") else "")


def _param_row(p: Any) -> str:
    if p.param_type_name == "argument":
        name = f"`{_arg_name(p)}`"
        req = "required" if p.required else ""
        return f"| {name} (argument) | {_kind(p)} | {req} | {_cell(getattr(p, 'help', '') or '')} |"
    opts = " / ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
    return f"| {opts} | {_kind(p)} | {'required' if p.required else _default(p)} | {_cell(p.help or '')} |"


def _usage(path: list[str], cmd: Any) -> str:
    words = ["twinrun", *path]
    for p in cmd.params:
        if p.param_type_name == "argument":
            words.append(_arg_name(p))
        elif p.required:
            words.append(f"{p.opts[0]} {p.metavar or _type_name(p)}")
    return " ".join(words) + " [OPTIONS]"


def _commands(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    if hasattr(cmd, "commands"):  # a group: its subcommands (typer's own click classes, so no isinstance)
        out: list[tuple[list[str], Any]] = []
        for name in sorted(cmd.commands):
            out += _commands(cmd.commands[name], [*path, name])
        return out
    return [(path, cmd)]


def render() -> str:
    import typer

    from twinrun.cli import app

    root = typer.main.get_command(app)
    commands = _commands(root, [])
    lines = [INTRO, "| command | what it does |", "|---|---|"]
    for path, cmd in commands:
        first = (cmd.help or "").strip().split("\n\n")[0]
        lines.append(f"| [`twinrun {' '.join(path)}`](#twinrun-{'-'.join(path)}) | {_cell(first)} |")
    for path, cmd in commands:
        lines += ["", f"## twinrun {' '.join(path)}", "", " ".join((cmd.help or "").split()), "",
                  "```", _usage(path, cmd), "```", "",
                  "| argument / option | value | default | meaning |", "|---|---|---|---|"]
        lines += [_param_row(p) for p in cmd.params if p.name != "help"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="write docs/commands.md from the CLI")
    ap.add_argument("--write", type=Path, help="the file to write (default: print)")
    args = ap.parse_args(argv)
    text = render()
    if args.write:
        args.write.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
