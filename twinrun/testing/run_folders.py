"""Test helpers for issue 30's guarantees: a folder's content digest (every file's bytes, by path) to show a
refusal changed nothing, and the `twinrun` entry point run in this process (the one-line error and exit code
exactly as a user gets them, without a subprocess's start-up)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path

from twinrun.core.records.lock import LOCK_NAME


def folder_digest(root: str | Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``root`` ("<dir>" for a folder); the lock file is left out
    (it holds the pid of the folder's last writer, not the run)."""
    root = Path(root)
    if not root.exists():
        return {}
    if root.is_file():
        return {".": hashlib.sha256(root.read_bytes()).hexdigest()}
    out = {}
    for p in sorted(root.rglob("*")):
        if p.name == LOCK_NAME:
            continue
        rel = str(p.relative_to(root))
        out[rel] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_twinrun(args: Sequence[str], capsys: object) -> tuple[int, str, str]:
    """``twinrun ARGS`` through :func:`twinrun.cli.main` in this process: (exit code, stdout, stderr). ``capsys``:
    pytest's fixture (read and reset here)."""
    from twinrun.cli import main

    old = sys.argv
    sys.argv = ["twinrun", *map(str, args)]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    captured = capsys.readouterr()  # type: ignore[attr-defined]
    return code, captured.out, captured.err
