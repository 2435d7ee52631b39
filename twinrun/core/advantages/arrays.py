"""Input checks and vectorised group statistics every advantage estimator shares.

Labels (group, trajectory, anchor) are factorised to integer codes with ``pandas.factorize``; statistics are
``np.bincount`` reductions over those codes, so nothing here loops over rows in Python."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from twinrun.core.errors import TwinrunError

Scale = Literal["group", "batch", "none"]
Singleton = Literal["zero", "raw", "mean0_std1"]
Pool = Literal["trajectory", "rows"]
GigpoMode = Literal["mean_norm", "mean_std_norm"]
AnchorMatch = Literal["exact", "similarity"]


class AdvantageInputError(TwinrunError, ValueError):
    """Arrays that cannot be used (length mismatch, bad knob, duplicate (trajectory, step), ...). One line."""


# ------------------------------------------------------------------------------------------------------------
# Small vectorised helpers


def _codes(labels: Any, name: str, n: int | None = None, long_strings: bool = False) -> tuple[np.ndarray, int]:
    """Factorise labels[B] to int codes[B] in 0..K-1 (first-appearance order) and K.

    None / NaN labels get code -1 (callers decide what that means). pandas.factorize is a C hash table: O(B), any
    hashable labels, and no conversion of long strings to a fixed-width numpy dtype."""
    import pandas as pd  # base dependency; imported here so importing the module stays cheap

    arr = labels if isinstance(labels, np.ndarray) else np.array(labels, dtype=object)
    if arr.ndim != 1:
        raise AdvantageInputError(f"{name}: shape {arr.shape} is not one-dimensional (fix: pass one label per row)")
    if n is not None and arr.shape[0] != n:
        raise AdvantageInputError(f"{name}: {arr.shape[0]} labels for {n} rows (fix: one label per row)")
    if arr.dtype.kind in "iu":
        codes, uniq = pd.factorize(arr)
    elif long_strings and _object_hashtable() is not None:
        uniq, codes = _object_hashtable()(len(arr)).factorize(arr.astype(object, copy=False))
    else:
        codes, uniq = pd.factorize(arr.astype(object, copy=False), use_na_sentinel=True)
    return codes.astype(np.intp, copy=False), len(uniq)


@functools.cache
def _object_hashtable() -> Any:
    # pandas.factorize routes str labels through its UTF-8 StringHashTable, ~6x slower than the plain Python-hash
    # table on long texts (observation anchors of a few hundred characters; see bench/advantages.py). The class is
    # private pandas API, so fall back to pd.factorize if it ever moves.
    try:
        from pandas._libs.hashtable import PyObjectHashTable

        PyObjectHashTable(2).factorize(np.array(["a", None], dtype=object))
        return PyObjectHashTable
    except Exception:  # pragma: no cover - depends on the pandas version
        return None


def _as_float(x: Any, name: str, n: int | None = None) -> np.ndarray:
    """float64[B]; None becomes NaN (unmeasured)."""
    try:
        out = np.asarray(x, dtype=np.float64)  # numpy maps None to NaN here
    except (TypeError, ValueError):
        raise AdvantageInputError(f"{name}: not numeric (fix: floats, with None/NaN for unmeasured)") from None
    if out.ndim != 1:
        raise AdvantageInputError(f"{name}: shape {out.shape} is not one-dimensional (fix: one value per row)")
    if n is not None and out.shape[0] != n:
        raise AdvantageInputError(f"{name}: {out.shape[0]} values for {n} rows (fix: one value per row)")
    if np.isinf(out).any():
        raise AdvantageInputError(f"{name}: contains inf (fix: finite rewards, NaN/None only for unmeasured)")
    return out


def _check(value: Any, allowed: Sequence[str], name: str) -> None:
    if value not in allowed:
        raise AdvantageInputError(f"{name}: {value!r} is not allowed (fix: one of {', '.join(allowed)})")


def _group_stats(values: np.ndarray, codes: np.ndarray, k: int, ddof: int) -> tuple[np.ndarray, ...]:
    """Per-group count, mean and std (ddof) of values[M] with codes[M] in 0..k-1. std is NaN where count <= ddof."""
    count = np.bincount(codes, minlength=k).astype(np.float64)
    total = np.bincount(codes, weights=values, minlength=k)
    mean = np.divide(total, count, out=np.zeros(k), where=count > 0)
    # two-pass variance (as torch.std does) so ties and all-equal groups give exactly 0, not rounding noise
    sq = np.bincount(codes, weights=(values - mean[codes]) ** 2, minlength=k)
    dof = count - ddof
    std = np.full(k, np.nan)
    np.sqrt(np.divide(sq, dof, out=np.zeros(k), where=dof > 0), out=std, where=dof > 0)
    return count, mean, std


def _traj_codes(traj_ids: Any, g: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """Trajectory codes[B], K; refuses a trajectory whose rows sit in two groups (it would join two baselines)."""
    t, nt = _codes(traj_ids, "traj_ids", n)
    if (t < 0).any():
        raise AdvantageInputError("traj_ids: contains None (fix: every row needs a trajectory label)")
    group_of = np.full(nt, -1)
    group_of[t] = g
    split = group_of[t] != g
    if split.any():
        i = int(np.flatnonzero(split)[0])
        raise AdvantageInputError(
            f"traj_ids: trajectory of row {i} appears in two groups (fix: one group per trajectory)"
        )
    return t, nt


def _pool_members(measured: np.ndarray, pool: Pool, traj_ids: Any, g: np.ndarray) -> np.ndarray:
    """Row indices whose scores enter the statistics: every measured row (``rows``) or the first measured row of
    each trajectory (``trajectory``: verl-agent's ``compute_mean_std_cross_steps=False`` rule)."""
    rows = np.flatnonzero(measured)
    if pool == "rows" or traj_ids is None:  # without traj_ids each row is its own trajectory: the pools coincide
        return rows
    t, _ = _traj_codes(traj_ids, g, len(measured))
    _, first = np.unique(t[rows], return_index=True)
    return rows[np.sort(first)]

