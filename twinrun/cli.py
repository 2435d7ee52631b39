"""The `twinrun` command line: plan, train, sweep, compare, advdiff, sft, eval-agent, run, doctor.

Commands live in `twinrun/commands/<name>.py` and are discovered here. Any `TwinrunError` becomes one line on
stderr and exit code 2; nothing written before the error is lost (writers are append-only and atomic).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

import typer

import twinrun.commands
from twinrun.core.errors import InfrastructureError, TwinrunError

app = typer.Typer(
    name="twinrun",
    help="Train one skill-curator arm under TRL and verl from one spec; sweep checkpoints; compare the curves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """twinrun: one skill-curator arm, two RL frameworks, stated statistics."""


def _register_commands() -> None:
    for mod in sorted(pkgutil.iter_modules(twinrun.commands.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):  # shared option helpers (_common), not a command
            continue
        module = importlib.import_module(f"twinrun.commands.{mod.name}")
        module.register(app)


_register_commands()


# folders named by environment variables that child processes (verl's trainer, Ray workers) read again from their
# own working directory: made absolute once here, so a relative ALFWORLD_DATA=data/alfworld works there too
PATH_VARIABLES = ("ALFWORLD_DATA", "TWINRUN_CACHE")


def absolute_path_variables(environ: dict[str, str] | None = None) -> None:
    """Make the path variables absolute; an unset ALFWORLD_DATA becomes alfworld's own download folder when that
    holds the games (where `alfworld-download` writes without the variable), so core reads one variable."""
    from twinrun.app.environment.data import alfworld_data_folder

    environ = os.environ if environ is None else environ
    found = alfworld_data_folder(environ)
    if found and not environ.get("ALFWORLD_DATA"):
        environ["ALFWORLD_DATA"] = found
    for name in PATH_VARIABLES:
        if environ.get(name):
            environ[name] = str(Path(environ[name]).expanduser().resolve())


def main() -> None:
    absolute_path_variables()
    try:
        app()  # click's standalone mode handles usage errors (exit 2) and Ctrl-C
    except TwinrunError as e:
        print(f"twinrun: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except InfrastructureError as e:  # endpoints/simulators failed: not the user's input, and not a task failure
        print(f"twinrun: infrastructure failure: {e} (rows written so far are kept; rerun with --resume)", file=sys.stderr)
        raise SystemExit(3) from None


if __name__ == "__main__":
    main()
