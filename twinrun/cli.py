"""The `twinrun` command line: plan, train, sweep, compare, advdiff, sft, eval-agent, run, doctor.

Commands live in `twinrun/commands/<name>.py` and are discovered here. Any `TwinrunError` becomes one line on
stderr and exit code 2; nothing written before the error is lost (writers are append-only and atomic).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

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
        module = importlib.import_module(f"twinrun.commands.{mod.name}")
        module.register(app)


_register_commands()


def main() -> None:
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
