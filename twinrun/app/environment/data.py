"""The environment's games: ALFWorld's data folder holds the splits a command plays, each with game files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from twinrun.app.environment.rows import Check

# where `alfworld-download` writes when ALFWORLD_DATA is unset: alfworld/info.py, `~/.cache/alfworld`
ALFWORLD_DEFAULT = "~/.cache/alfworld"
FIX_DATA = ("fix: export ALFWORLD_DATA=<folder holding json_2.1.1/>, or run `alfworld-download` "
            f"(it writes {ALFWORLD_DEFAULT})")


def alfworld_data_folder(environ: Mapping[str, str]) -> str | None:
    """ALFWORLD_DATA, else alfworld's own download folder when it holds the games (the CLI maps this once)."""
    if environ.get("ALFWORLD_DATA"):
        return environ["ALFWORLD_DATA"]
    default = Path(ALFWORLD_DEFAULT).expanduser()
    return str(default) if (default / "json_2.1.1").is_dir() else None


def alfworld(environ: Mapping[str, str], splits: Sequence[tuple[str, str]]) -> list[Check]:
    """Each (field, split) the command plays has at least one game (a trial with traj_data.json and
    game.tw-pddl). Only the first game is looked for: counting a split reads every game file (doctor does that)."""
    root = alfworld_data_folder(environ)
    if not root:
        return [Check("ALFWorld data", "-", "fail", f"ALFWORLD_DATA is not set and {ALFWORLD_DEFAULT} has no "
                      f"json_2.1.1/ ({FIX_DATA})")]
    base = Path(root).expanduser() / "json_2.1.1"
    if not base.is_dir():
        return [Check("ALFWorld data", repr(root), "fail", f"has no json_2.1.1/ folder ({FIX_DATA})")]
    rows = []
    for field, split in dict.fromkeys(splits):
        folder = base / split
        if not folder.is_dir():
            have = sorted(p.name for p in base.iterdir() if p.is_dir())
            rows.append(Check(f"{field} {split}", repr(str(folder)), "fail",
                              f"is missing: the data is incomplete (splits here: {have}) (fix: the full "
                              f"`alfworld-download`, or --set {field}=<one of {have}>)"))
            continue
        game = next(folder.glob("*/*/game.tw-pddl"), None)
        if game is None:
            rows.append(Check(f"{field} {split}", repr(str(folder)), "fail",
                              "holds no game (no */*/game.tw-pddl): the download is incomplete (fix: rerun "
                              "`alfworld-download`, or point ALFWORLD_DATA at a complete copy)"))
            continue
        rows.append(Check(f"{field} {split}", str(folder), "ok"))
    return rows
