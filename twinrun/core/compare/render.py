"""The result as JSON: settings, NaN-free cleaning, the schema version; the line naming the game lists seen; the
line naming a framework verdict's seed design."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from twinrun.core.compare.model import CompareSettings

COMPARE_SCHEMA_VERSION = 3


def settings_dict(s: CompareSettings) -> dict[str, Any]:
    return {"alpha": s.alpha, "power": s.power, "level": s.level, "n_boot": s.n_boot, "seed": s.seed,
            "max_unmeasured_share": s.max_unmeasured_share, "family": s.family,
            "family_map": [list(x) for x in s.family_map], "rho0": s.rho0, "delta": s.delta,
            "groups": [{"run": r, "framework": f, "seed": sd} for r, f, sd in s.groups], "across": s.across,
            "stream_icc": s.stream_icc, "stream_design": s.stream_design, "seed_design": s.seed_design,
            "max_streams": s.max_streams, "games_hash": s.games_hash}


def clean(obj: Any) -> Any:
    """JSON-able copy: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [clean(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False, allow_nan=False)


def game_lists_note(result: Mapping[str, Any]) -> str:
    """Every game list the sweep's arms carried, where there was more than one (compare --games-hash chose one):
    which was compared on and which arms were left out (issue 53)."""
    lists = result.get("game_lists") or []
    if len(lists) < 2:
        return ""
    parts = []
    for g in lists:
        arms = g.get("arms") or []
        names = ", ".join(f"`{a}`" for a in arms[:3]) + (f" and {len(arms) - 3} more" if len(arms) > 3 else "")
        what = "compared on" if g.get("used") else "left out"
        parts.append(f"`{g['games_hash']}`{' (sweep.json)' if g.get('in_manifest') else ''}: {len(arms)} arm(s)"
                     + (f" ({names})" if arms and not g.get("used") else "") + f", {what}")
    return f" Game lists seen: {'; '.join(parts)} (--games-hash {result['settings'].get('games_hash')})."


def seed_design_line(sd: Mapping[str, Any]) -> str:
    """One line for the report and the console: which seed design a framework verdict used, which seeds pair and how
    strongly their curves correlate (pair r of the two runs' centred curves)."""
    if sd.get("design") != "paired":
        return f"Seeds: independent (split-plot, seeds nested in groups): {sd.get('why', '')}."

    def r_txt(r: float | None) -> str:
        return f"{r:.2f}" if r is not None and math.isfinite(r) else "undefined (a flat curve)"

    rs = sd.get("pair_r") or [None] * len(sd.get("pairs") or [])
    pairs = ", ".join(f"{a}~{b} (seed {s}, r {r_txt(r)})" for (a, b, s), r in zip(sd.get("pairs") or [], rs))
    mean = sd.get("pair_r_mean")
    return (f"Seeds: paired (tested within seed; mean pair r {r_txt(mean) if mean is not None else '–'}): {pairs}; "
            f"{sd.get('why', '')}.")
