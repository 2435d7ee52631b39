"""The machine a command stands on, checked before its first write (issue 43): GPUs and compute dtype, the
optional packages the spec uses, every model id, every endpoint, a Ray address, the environment's data and Java,
disk for the checkpoints, a writable ``--out``.

Each check returns :class:`Check` rows (``ok`` / ``fail`` / ``skip``); `twinrun doctor --gpu` prints them all,
every other command calls :func:`check_environment`, which raises the first failure as one line (what, where, the
fix) before anything is written. No network but the addresses the spec or the user named, each asked once with a
short timeout: the checks run at the start of every command.

Modules: ``rows`` (the row and the error), ``machine`` (GPUs, dtype, disk, --out, Java), ``packages``, ``data``
(ALFWorld games), ``network`` (models on the hub, endpoints, Ray), ``command`` (which checks a command needs).
"""

from twinrun.app.environment.command import check_environment, environment_rows
from twinrun.app.environment.rows import Check, EnvironmentFault

__all__ = ["Check", "EnvironmentFault", "check_environment", "environment_rows"]
