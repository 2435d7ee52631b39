"""Multiplicity families: which hypotheses are corrected together, and at what per-arm level.

- ``run``: one family per run (its checkpoints), the default;
- ``all``: every checkpoint arm of the comparison in one family (the earlier reproduction's honest statement:
  Bonferroni over all 50 arms);
- ``custom``: named families by glob on arm names (``--family-of NAME=GLOB``); every checkpoint arm must match one.
The hypotheses are (run, checkpoint) cells, whatever their number of streams; baselines belong to no family.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings


def assign(arms: list[ArmInfo], settings: CompareSettings) -> list[str | None]:
    out: list[str | None] = []
    for a in arms:
        if a.role != "checkpoint":
            out.append(None)
        elif settings.family == "all":
            out.append("all")
        elif settings.family == "run":
            out.append(f"run:{a.run}")
        else:
            name = next((n for n, pattern in settings.family_map if fnmatchcase(a.name, pattern)), None)
            if name is None:
                globs = ", ".join(p for _, p in settings.family_map)
                raise CompareError(f"--family-of: arm {a.name!r} matches none of {globs} (fix: add a family whose "
                                   "glob matches it, e.g. --family-of rest='*')")
            out.append(name)
    return out


def sizes(families: list[str | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in families:
        if f is not None:
            counts[f] = counts.get(f, 0) + 1
    return counts


def per_arm_alpha(families: list[str | None], settings: CompareSettings) -> np.ndarray:
    """alpha / m for an arm of a family of m (Bonferroni; Holm's first step), alpha for an arm in no family."""
    m = sizes(families)
    return np.array([settings.alpha / m[f] if f is not None else settings.alpha for f in families])


def summary(arms: list[ArmInfo], families: list[str | None], adjusted: dict[str, np.ndarray],
            settings: CompareSettings) -> dict[str, Any]:
    """name -> {"size", "arms", "alpha_per_arm", "significant_holm", "significant_bh", "significant_bonferroni"}."""
    out: dict[str, Any] = {}
    for name, m in sizes(families).items():
        idx = [j for j, f in enumerate(families) if f == name]
        sig = {key: [arms[j].name for j in idx if adjusted[key][j] < settings.alpha] for key in ("holm", "bh", "bonferroni")}
        out[name] = {"size": m, "arms": [arms[j].name for j in idx], "alpha_per_arm": settings.alpha / m,
                     "significant_holm": sig["holm"], "significant_bh": sig["bh"],
                     "significant_bonferroni": sig["bonferroni"]}
    return out
