"""A check's row and the error a failed row becomes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from twinrun.core.errors import TwinrunError


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` (what was checked), ``found`` (what is there), ``status`` ("ok" | "fail" | "skip"),
    ``why`` (for a failure: where and the fix, ending in ``(fix: ...)``; for a skip: why it was not checked)."""

    name: str
    found: str
    status: str
    why: str = ""


class EnvironmentFault(TwinrunError):
    """The machine cannot run the command as asked (no GPU, a dead endpoint, no data...): exit 2, one line."""


def raise_first_failure(rows: Iterable[Check]) -> None:
    """The first failed row as one line; rows are produced lazily, so a failure stops the later (slower) checks."""
    for row in rows:
        if row.status == "fail":
            found = f"{row.found} " if row.found and row.found != "-" else ""  # the why reads on from it
            raise EnvironmentFault(f"{row.name}: {found}{row.why}".replace("\n", " "))
