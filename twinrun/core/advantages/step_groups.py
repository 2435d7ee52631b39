"""Step-level structure for GiGPO: discounted returns within a trajectory and anchor-state step groups.

The discounted return sweeps step *ranks* (max trajectory length iterations, each vectorised over trajectories);
similarity anchor matching compares distinct texts pairwise inside a group (difflib, O(n^2) per group)."""

from __future__ import annotations

from typing import Any

import numpy as np

from twinrun.core.advantages.arrays import AdvantageInputError, AnchorMatch, _as_float, _check, _codes


def _traj_order(t: np.ndarray, step_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by (trajectory, step) and a bool[B] 'same trajectory as the next sorted row'."""
    lo = int(step_index.min()) if len(t) else 0
    span = (int(step_index.max()) - lo + 1) if len(t) else 1
    if span * (int(t.max()) + 1 if len(t) else 1) < 2**62:  # one int64 key sorts faster than lexsort
        order = np.argsort(t.astype(np.int64) * span + (step_index - lo), kind="stable")
    else:  # pragma: no cover - absurd step numbers
        order = np.lexsort((step_index, t))
    ts, ss = t[order], step_index[order]
    same_next = np.zeros(len(order), dtype=bool)
    same_next[:-1] = ts[1:] == ts[:-1]
    dup = same_next[:-1] & (ss[1:] == ss[:-1])
    if dup.any():
        i = order[np.flatnonzero(dup)[0]]
        raise AdvantageInputError(
            f"step_index: row {i} repeats step {step_index[i]} of its trajectory (fix: one row per (trajectory, step))"
        )
    return order, same_next


def discounted_returns(step_rewards: Any, traj_ids: Any, step_index: Any, *, gamma: float) -> np.ndarray:
    """Per-row discounted return-to-go within each trajectory (GiGPO Eq. 5).

    Args:
        step_rewards: float[B] r_{j,t}. traj_ids: labels[B]. step_index: int[B] (only the order within a trajectory
            matters: steps are discounted by rank, so gaps in the numbering count as adjacent, as verl-agent's
            row-order loop does).
        gamma: discount in [0, 1].

    Returns:
        float64[B]: ``G_{j,t} = r_{j,t} + gamma * G_{j,t+1}`` (``G`` of a trajectory's last step = its reward).
        The loop runs over step *ranks* (at most max T iterations), each vectorised over all trajectories.
    """
    r = _as_float(step_rewards, "step_rewards")
    n = r.shape[0]
    t, _ = _codes(traj_ids, "traj_ids", n)
    return _discounted(r, t, _steps(step_index, n), gamma)


def _steps(step_index: Any, n: int) -> np.ndarray:
    si = np.asarray(step_index)
    if si.shape != (n,) or (n and si.dtype.kind not in "iu"):
        raise AdvantageInputError(f"step_index: shape {si.shape}, dtype {si.dtype} (fix: one integer step per row)")
    return si


def _discounted(r: np.ndarray, t: np.ndarray, si: np.ndarray, gamma: float) -> np.ndarray:
    n = r.shape[0]
    order, same_next = _traj_order(t, si)
    # rank of each sorted row inside its trajectory, to sweep all trajectories backwards in lock-step
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~same_next[:-1]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0)) if n else starts.astype(np.intp)
    rank = np.arange(n) - run_start
    sorted_r = r[order]
    ret = sorted_r.copy()
    has_next = np.flatnonzero(same_next)
    if has_next.size:
        by_rank = has_next[np.argsort(-rank[has_next], kind="stable")]
        bounds = np.flatnonzero(np.diff(rank[by_rank])) + 1
        for chunk in np.split(by_rank, bounds):  # latest rank first
            ret[chunk] = sorted_r[chunk] + gamma * ret[chunk + 1]
    out = np.empty(n)
    out[order] = ret
    return out


def _similarity_clusters(texts: list[str], threshold: float) -> np.ndarray:
    """Greedy single-pass clustering of distinct texts (verl-agent ``build_step_group``): each text joins the first
    cluster whose representative (its first member) has ``SequenceMatcher(None, text, rep).ratio() >= threshold``,
    else opens a new cluster. The decisions are verl-agent's exactly; three things make them cheaper:

    * the callers pass distinct texts (a repeat of a text joins the cluster its first copy joined: the clusters
      before that one refused the same ratio, so the loop would stop at the same one);
    * difflib's ``quick_ratio`` (the character-multiset intersection, an upper bound of ``ratio``, computed with
      the same ``2.0 * m / (la + lb)`` float formula) is evaluated for the text against every representative at
      once as one numpy minimum over character-count rows; a representative whose bound is below the threshold
      cannot match, so only the rest are compared, in cluster order;
    * ``ratio`` itself comes from cydifflib, a compiled port of CPython's difflib (same matching blocks, same
      autojunk rule), 5-6x faster (tests/core/advantages/test_anchor_similarity.py checks the clusters against the stdlib on
      varied texts, and bench/advantages.py against verl-agent's loop)."""
    from cydifflib import SequenceMatcher as FastMatcher

    alphabet: dict[str, int] = {}
    coded = [[alphabet.setdefault(ch, len(alphabet)) for ch in t] for t in texts]
    counts = np.zeros((len(texts), max(len(alphabet), 1)), dtype=np.int64)
    for i, codes in enumerate(coded):
        counts[i] = np.bincount(codes, minlength=counts.shape[1])
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    rep_rows: list[int] = []  # text index of each cluster's representative, in cluster order
    reps: list[Any] = []  # one matcher per cluster, seq2 = representative (its b-index is cached)
    out = np.empty(len(texts), dtype=np.intp)
    for i, text in enumerate(texts):
        out[i] = -1
        if rep_rows:
            rr = np.asarray(rep_rows)
            common = np.minimum(counts[rr], counts[i]).sum(axis=1)
            total = lengths[rr] + lengths[i]
            with np.errstate(invalid="ignore", divide="ignore"):  # two empty texts: difflib's ratio is 1.0
                bound = np.where(total > 0, 2.0 * common / np.maximum(total, 1), 1.0)
            for c in np.flatnonzero(bound >= threshold):
                sm = reps[c]
                sm.set_seq1(text)
                if sm.ratio() >= threshold:
                    out[i] = c
                    break
        if out[i] < 0:
            sm = FastMatcher(None)
            sm.set_seq2(text)
            reps.append(sm)
            rep_rows.append(i)
            out[i] = len(reps) - 1
    return out


def anchor_groups(
    anchors: Any, group_ids: Any, *, anchor_match: AnchorMatch = "exact", similarity: float = 0.95, rows: Any = None
) -> np.ndarray:
    """Step-level (anchor-state) group code per row (GiGPO Eq. 6).

    Args:
        anchors: labels[B] (str for similarity matching). None = no anchor: the row is its own step group.
        group_ids: labels[B]: only rows of the same episode group can share a step group.
        anchor_match: ``exact`` equal anchors (regardless of step or trajectory, so a state revisited inside one
            trajectory contributes several members); ``similarity`` greedy SequenceMatcher clusters with
            ratio >= ``similarity`` inside each group (identical anchors always share a cluster).
        rows: optional bool[B]: only these rows take part (unmeasured rows are left out, as if absent); the others
            get code -1.

    Returns:
        int[B] codes (equal code = same step group), -1 for rows not taking part.
    """
    _check(anchor_match, ("exact", "similarity"), "anchor_match")
    a_arr = anchors if isinstance(anchors, np.ndarray) else np.array(anchors, dtype=object)
    n = a_arr.shape[0]
    g, _ = _codes(group_ids, "group_ids", n)
    take = np.ones(n, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    return _anchor_codes(a_arr, g, take, anchor_match, similarity)


def _anchor_codes(
    a_arr: np.ndarray, g: np.ndarray, take: np.ndarray, anchor_match: str, similarity: float
) -> np.ndarray:
    import pandas as pd

    n = a_arr.shape[0]
    a_codes, na = _codes(a_arr, "anchors", n, long_strings=True)
    no_anchor = a_codes < 0
    # exact key = (group, anchor) as one int64; a missing anchor gets a key of its own
    key = np.where(no_anchor, na + np.arange(n), a_codes)
    combined = g.astype(np.int64) * (na + n) + key
    out = np.full(n, -1, dtype=np.intp)
    if not take.any():
        return out
    inv, _ = pd.factorize(combined[take])  # codes in first-appearance order
    if anchor_match == "exact":
        out[take] = inv
        return out
    if not 0.0 < similarity <= 1.0:
        raise AdvantageInputError(f"similarity: {similarity!r} must be in (0, 1] (fix: e.g. 0.95)")
    # cluster the distinct (group, anchor) keys of each group in first-appearance order, then map rows through
    _, first = np.unique(inv, return_index=True)
    key_rows = np.flatnonzero(take)[first]  # first row of each distinct key; keys are already in appearance order
    key_groups = g[key_rows]
    cluster_of_key = np.empty(len(first), dtype=np.intp)
    next_code = 0
    for grp in pd.unique(key_groups):  # a Python loop over groups and distinct anchors: the O(n^2) part is here
        ks = np.flatnonzero(key_groups == grp)
        texts: list[str] = []
        anchored: list[int] = []
        for kk in ks:  # keys without an anchor stay singletons
            if no_anchor[key_rows[kk]]:
                cluster_of_key[kk] = next_code
                next_code += 1
                continue
            a = a_arr[key_rows[kk]]
            if not isinstance(a, str):
                raise AdvantageInputError(
                    f"anchors: {type(a).__name__} anchor with anchor_match=similarity (fix: text anchors, or exact)"
                )
            texts.append(a)
            anchored.append(kk)
        if texts:
            local = _similarity_clusters(texts, similarity)
            cluster_of_key[np.asarray(anchored)] = local + next_code
            next_code += int(local.max()) + 1
    out[take] = cluster_of_key[inv]
    return out

