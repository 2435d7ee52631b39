"""The protocol's statistics: pure, vectorised functions of score arrays, per-arm summaries, paired
comparisons, and the re-evaluation-noise flag.

Shapes: ``scores[P, V]`` holds final scores of P passes over V variations (NaN = unmeasured or not played).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twinrun.core.sft.agent_eval.episode import SUCCESS_SCORE
from twinrun.core.sft.agent_eval.protocol import AgentEpisodeRow
from twinrun.core.errors import TwinrunError

def avg_at_1(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] final scores (NaN = unmeasured) -> Avg@1[P] = mean over measured variations of score / 100.

    Never clamped: a pass of -100 scores has Avg@1 -1."""
    with warnings.catch_warnings():  # an all-NaN pass (nothing measured) is NaN, which is what we want
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(scores, dtype=np.float64), axis=-1) / 100.0


def success_rate(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] -> success[P]: share of measured variations with final score 100."""
    s = np.asarray(scores, dtype=np.float64)
    measured = ~np.isnan(s)
    wins = (np.nan_to_num(s, nan=-np.inf) >= SUCCESS_SCORE) & measured
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(measured.sum(-1) > 0, wins.sum(-1) / np.maximum(measured.sum(-1), 1), np.nan)


def mean_std(values: np.ndarray) -> tuple[float | None, float | None]:
    """values[P] (one per pass; NaN passes ignored) -> (mean, sample std with ddof 1; None for one pass)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else None)


def per_variation_means(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] -> [V]: mean over measured passes of score / 100 (NaN where no pass was measured)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(scores, dtype=np.float64), axis=0) / 100.0


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, seed: int = 0, level: float = 0.95
                     ) -> dict[str, Any]:
    """Paired bootstrap over variations of mean(a - b).

    a[V], b[V]: per-variation values of two arms (NaN = unmeasured; only variations measured in both pair).
    Resamples the V' paired differences with replacement ``n_boot`` times (one index matrix [R, V']).
    Returns mean difference, percentile CI at ``level``, and the two-sided bootstrap p-value
    ``min(1, 2 * min(P(d* <= 0), P(d* >= 0)))`` (1.0 when every difference is 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise TwinrunError(f"paired bootstrap: arms have {a.shape} and {b.shape} variations (fix: the same list)")
    mask = ~np.isnan(a) & ~np.isnan(b)
    d = (a - b)[mask]
    n = int(d.size)
    if n == 0:
        return {"n_pairs": 0, "diff": None, "ci": [None, None], "p_value": None, "level": level, "n_boot": n_boot}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    boots = d[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(boots, [tail, 100.0 - tail])
    p = min(1.0, 2.0 * min(float((boots <= 0).mean()), float((boots >= 0).mean())))
    return {"n_pairs": n, "diff": float(d.mean()), "ci": [float(lo), float(hi)], "p_value": p, "level": level,
            "n_boot": n_boot}




@dataclass
class ArmScores:
    """Scores of one arm: scores[P, V] (NaN unmeasured or not played); copies[P] (any template), literal[P]
    (the configured literal list), replies[P]."""

    arm: str
    scores: np.ndarray
    copies: np.ndarray
    replies: np.ndarray
    unmeasured: int
    literal: np.ndarray | None = None


def arm_scores(rows: Sequence[AgentEpisodeRow], arm: str, passes: int, n_games: int) -> ArmScores:
    scores = np.full((passes, n_games), np.nan)
    copies = np.zeros(passes)
    literal = np.zeros(passes)
    replies = np.zeros(passes)
    unmeasured = 0
    for r in rows:
        if r.arm != arm or r.pass_index >= passes:
            continue
        if r.outcome == "unmeasured":
            unmeasured += 1
            continue
        scores[r.pass_index, r.game_index] = r.final_score
        copies[r.pass_index] += r.template_copies
        literal[r.pass_index] += r.literal_copies
        replies[r.pass_index] += len(r.actions)
    return ArmScores(arm, scores, copies, replies, unmeasured, literal)


def summarize_arm(s: ArmScores) -> dict[str, Any]:
    """Per-pass Avg@1, success, literal and any-template copy shares, and their mean ± std over passes."""
    a1 = avg_at_1(s.scores)
    sr = success_rate(s.scores)
    literal = s.literal if s.literal is not None else np.zeros_like(s.copies)
    share = _share(s.copies, s.replies)
    lshare = _share(literal, s.replies)
    m1, sd1 = mean_std(a1)
    ms, sds = mean_std(sr)
    mc, sdc = mean_std(share)
    ml, sdl = mean_std(lshare)
    return {
        "arm": s.arm,
        "passes": int(s.scores.shape[0]),
        "episodes_measured": int((~np.isnan(s.scores)).sum()),
        "episodes_unmeasured": s.unmeasured,
        "avg_at_1": {"mean": m1, "std": sd1, "per_pass": [None if np.isnan(x) else float(x) for x in a1]},
        "success": {"mean": ms, "std": sds, "per_pass": [None if np.isnan(x) else float(x) for x in sr]},
        "template_copy_share": {"mean": mc, "std": sdc,
                                "per_pass": [None if np.isnan(x) else float(x) for x in share]},
        "literal_copy_share": {"mean": ml, "std": sdl,
                               "per_pass": [None if np.isnan(x) else float(x) for x in lshare]},
        "replies": int(s.replies.sum()),
        "template_copies": int(s.copies.sum()),
        "literal_copies": int(literal.sum()),
    }


def _share(count: np.ndarray, replies: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(replies > 0, count / np.maximum(replies, 1), np.nan)


def compare_arms(a: ArmScores, b: ArmScores, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Paired bootstrap of arm a minus arm b over variations, on Avg@1 and on success."""
    va, vb = per_variation_means(a.scores), per_variation_means(b.scores)
    sa = _per_variation_success(a.scores)
    sb = _per_variation_success(b.scores)
    return {
        "a": a.arm, "b": b.arm,
        "avg_at_1": paired_bootstrap(va, vb, n_boot=n_boot, seed=seed),
        "success": paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed),
        "unit": "variation (mean over passes)",
    }


def _per_variation_success(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    measured = ~np.isnan(s)
    wins = ((np.nan_to_num(s, nan=-np.inf) >= SUCCESS_SCORE) & measured).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(measured.sum(0) > 0, wins / np.maximum(measured.sum(0), 1), np.nan)


def within_noise(a: dict[str, Any], b: dict[str, Any], comparison: dict[str, Any]) -> bool:
    """Whether two arms' success rates are indistinguishable under re-evaluation noise: the paired bootstrap CI
    of their success difference (over variations) contains 0, or the difference of their mean success is no
    larger than the larger of the two arms' pass-to-pass std (the spread of re-evaluating one checkpoint; the
    study saw 17.50% vs 15.38% on the same checkpoint). ``a``/``b``: :func:`summarize_arm` dicts."""
    ma, mb = a["success"]["mean"], b["success"]["mean"]
    if ma is None or mb is None:
        return True
    lo, hi = comparison["success"]["ci"]
    ci_has_zero = lo is None or (lo <= 0.0 <= hi)
    spread = max(a["success"]["std"] or 0.0, b["success"]["std"] or 0.0)
    return ci_has_zero or abs(ma - mb) <= spread
