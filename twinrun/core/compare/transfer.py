"""Cross-executor transfer: the same checkpoints swept with two (or more) executors, one sweep per executor, each
against its own baseline. Per checkpoint the lift on executor A and on executor B; their Pearson and Spearman over
all shared checkpoints (pooled over runs, and per run) with a bootstrap over games: joint when the sweeps played
the same game list (the same resample rows pair the same games), independent otherwise.

This is how the earlier reproduction's cross-executor finding (8B vs 32B executor lifts, pooled Pearson r = -0.20
over 24 checkpoint pairs) is computed here: as a stated statistic with an interval, not an eyeballed plot.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from twinrun.core.compare import stats as cs
from twinrun.core.compare.games import Analysis
from twinrun.core.compare.model import CompareError, CompareSettings
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, clean, settings_dict


def compare_across(analyses: list[tuple[str, Analysis]], settings: CompareSettings) -> dict[str, Any]:
    """analyses: (executor name, its sweep's analysis) for >= 2 distinct executors -> the transfer result."""
    names = [n for n, _ in analyses]
    if len(analyses) < 2:
        raise CompareError(f"--across {settings.across}: {len(analyses)} sweep(s) given (fix: pass one sweep per "
                           "executor, at least two)")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CompareError(f"--across {settings.across}: two sweeps name the executor {dup[0]!r} (fix: sweep with "
                           "--executor NAME, or compare sweeps of different executors)")
    transfers = [_transfer(na, aa, nb, ab, settings) for (na, aa), (nb, ab) in combinations(analyses, 2)]
    return clean({
        "schema_version": COMPARE_SCHEMA_VERSION, "kind": "transfer", "axis": settings.across,
        "settings": settings_dict(settings),
        "sweeps": [{"executor": n, **a.result} for n, a in analyses],
        "transfer": transfers,
    })


def _primary(a: Analysis) -> dict[tuple[str, int], int]:
    return {(x.run, int(x.checkpoint)): j for j, x in enumerate(a.arms)
            if x.role == "checkpoint" and x.replicate == 0 and x.run is not None and x.checkpoint is not None
            and np.isfinite(a.lift[j])}


def _corr(la: np.ndarray, ba: np.ndarray, lb: np.ndarray, bb: np.ndarray, level: float) -> dict[str, Any]:
    if la.size < 3:
        return {"n": int(la.size), "pearson": None, "pearson_ci": [None, None], "spearman": None,
                "spearman_ci": [None, None]}
    return {"n": int(la.size), "pearson": float(cs.row_pearson(la, lb)),
            "pearson_ci": list(cs.percentile_ci(cs.row_pearson(ba, bb), level)),
            "spearman": float(cs.row_spearman(la, lb)),
            "spearman_ci": list(cs.percentile_ci(cs.row_spearman(ba, bb), level))}


def _transfer(na: str, aa: Analysis, nb: str, ab: Analysis, settings: CompareSettings) -> dict[str, Any]:
    pa, pb = _primary(aa), _primary(ab)
    keys = sorted(set(pa) & set(pb))
    for run, step in keys:
        ha, hb = aa.arms[pa[(run, step)]].checkpoint_hash, ab.arms[pb[(run, step)]].checkpoint_hash
        if ha and hb and ha != hb:
            raise CompareError(f"{run}@{step}: checkpoint {ha} in the {na} sweep but {hb} in the {nb} sweep (fix: sweep "
                               "the same checkpoints with both executors)")
    ja = np.array([pa[k] for k in keys], dtype=np.int64)
    jb = np.array([pb[k] for k in keys], dtype=np.int64)
    joint = aa.games_hash is not None and aa.games_hash == ab.games_hash
    la, lb = aa.lift[ja], ab.lift[jb]
    ba, bb = aa.boot_lift[:, ja], ab.boot_lift[:, jb]
    r = min(ba.shape[0], bb.shape[0])
    ba, bb = ba[:r], bb[:r]
    out: dict[str, Any] = {
        "a": na, "b": nb, "bootstrap": ("games resampled jointly (both sweeps played the same game list)" if joint
                                        else "each sweep resampled on its own (different game lists or summaries)"),
        "points": [{"run": run, "checkpoint": step, "lift_a": float(la[i]), "lift_b": float(lb[i]),
                    "lift_a_ci": list(cs.percentile_ci(ba[:, i], settings.level)),
                    "lift_b_ci": list(cs.percentile_ci(bb[:, i], settings.level))} for i, (run, step) in enumerate(keys)],
        "only_a": [f"{r_}@{s}" for r_, s in sorted(set(pa) - set(pb))],
        "only_b": [f"{r_}@{s}" for r_, s in sorted(set(pb) - set(pa))],
        "pooled": _corr(la, ba, lb, bb, settings.level),
        "per_run": {},
    }
    for run in sorted({k[0] for k in keys}):
        idx = np.array([i for i, k in enumerate(keys) if k[0] == run])
        out["per_run"][run] = _corr(la[idx], ba[:, idx], lb[idx], bb[:, idx], settings.level)
    pooled = out["pooled"]
    if pooled["pearson"] is None:
        out["explanation"] = f"Only {len(keys)} checkpoint(s) were swept with both executors: a correlation needs 3."
    else:
        lo, hi = pooled["pearson_ci"]
        says = ("lifts transfer: a checkpoint that helps one executor tends to help the other" if lo is not None and lo > 0
                else "lifts move in opposite directions across executors" if hi is not None and hi < 0
                else "no evidence either way that a checkpoint's lift on one executor predicts its lift on the other")
        out["explanation"] = (f"Over {pooled['n']} checkpoints, r = {pooled['pearson']:.2f} [{lo:.2f}, {hi:.2f}] "
                              f"between the lift on {na} and on {nb}: {says}.")
    return out
