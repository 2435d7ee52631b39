"""GiGPO similarity anchors: twinrun's clusters equal verl-agent's greedy SequenceMatcher loop, row for row.

The reference below is verl-agent's ``build_step_group`` similarity branch written out (stdlib difflib, every row
against every cluster's first member, no shortcuts). twinrun deduplicates texts, prunes with a character-bag bound
and computes the ratio with cydifflib; none of that may change a single cluster. Inputs vary what the shortcuts
touch: texts under and over difflib's 200-character autojunk limit, near-duplicates (one character inserted,
deleted or replaced), anagram-like texts whose bound passes but whose ratio fails, empty and non-ASCII texts,
repeats within and across groups, several thresholds.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np
import pytest

from twinrun.core.advantages import anchor_groups

WORDS = ["apple", "bread", "cabinet", "countertop", "drawer", "fridge", "knife", "mug", "plate", "shelf", "sink",
         "towel", "é", "ß", "杯子"]


def reference_clusters(texts: list[str], groups: list[str], thresh: float) -> list[tuple[str, int]]:
    """verl-agent (gigpo/core_gigpo.py build_step_group, similarity mode): per row, the first cluster of its group
    whose first member has ratio >= thresh, else a new cluster."""
    clusters: dict[str, list[str]] = {}
    out = []
    for text, g in zip(texts, groups, strict=True):
        reps = clusters.setdefault(g, [])
        for c, rep in enumerate(reps):
            if SequenceMatcher(None, text, rep).ratio() >= thresh:
                out.append((g, c))
                break
        else:
            reps.append(text)
            out.append((g, len(reps) - 1))
    return out


def canonical(labels) -> list[int]:
    """Relabel clusters by first appearance, so two partitions compare as lists."""
    seen: dict = {}
    return [seen.setdefault(x if not isinstance(x, np.generic) else x.item(), len(seen)) for x in labels]


def edit(rng: np.random.Generator, text: str, n: int) -> str:
    chars = list(text)
    for _ in range(n):
        op = rng.integers(3)
        k = int(rng.integers(len(chars) + 1))
        if op == 0 or not chars:
            chars.insert(k, str(rng.choice(list("abcdefghij0123456789 ,."))))
        elif op == 1:
            del chars[min(k, len(chars) - 1)]
        else:
            chars[min(k, len(chars) - 1)] = str(rng.choice(list("xyz789")))
    return "".join(chars)


def workload(seed: int, n_groups: int = 6, rows: int = 60) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    texts, groups = [], []
    for gi in range(n_groups):
        base = []
        for k in range(int(rng.integers(2, 6))):  # a few states per group: the first short, the others any length
            words = rng.choice(WORDS, size=int(rng.integers(3, 12 if k == 0 else 90)))
            base.append(" ".join(f"a {w} {rng.integers(1, 4)}" for w in words) + ".")
        for _ in range(rows):
            kind = rng.random()
            b = base[int(rng.integers(len(base)))]
            if kind < 0.3:
                t = b  # a revisited state
            elif kind < 0.7:
                t = edit(rng, b, int(rng.integers(1, 4)))  # near-duplicate
            elif kind < 0.8:
                t = "".join(rng.permutation(list(b)))  # same characters, different order: bound passes, ratio not
            elif kind < 0.85:
                t = ""
            else:
                t = edit(rng, b, int(rng.integers(5, 40)))
            texts.append(t)
            groups.append(f"g{gi % 4}")  # groups share base texts by index but never clusters
    return texts, groups


@pytest.mark.parametrize("seed,thresh,rows", [(0, 0.5, 40), (1, 0.8, 40), (2, 0.95, 40), (3, 0.95, 60),
                                              (4, 0.99, 40), (5, 1.0, 12)])
def test_similarity_clusters_equal_verl_agent_reference(seed, thresh, rows):
    # (threshold 1.0 with few rows: every distinct text is its own cluster, so the reference compares all pairs)
    texts, groups = workload(seed, rows=rows)
    assert any(len(t) >= 200 for t in texts) and any(0 < len(t) < 200 for t in texts)  # both sides of autojunk
    ours = anchor_groups(texts, groups, anchor_match="similarity", similarity=thresh)
    want = reference_clusters(texts, groups, thresh)
    assert canonical(ours) == canonical(want)


def test_similarity_clusters_with_rows_left_out_equal_reference_on_the_rest():
    texts, groups = workload(11)
    take = np.random.default_rng(3).random(len(texts)) > 0.3
    ours = anchor_groups(texts, groups, anchor_match="similarity", similarity=0.9, rows=take)
    assert (ours[~take] == -1).all()
    kept = [i for i in range(len(texts)) if take[i]]
    want = reference_clusters([texts[i] for i in kept], [groups[i] for i in kept], 0.9)
    assert canonical(ours[take]) == canonical(want)


def test_bound_passes_but_ratio_refuses():
    # same characters in another order: the character-bag bound is 1.0, difflib's ratio is far below
    a, b = "abcdefghij" * 3, "jihgfedcba" * 3
    assert SequenceMatcher(None, b, a).quick_ratio() == 1.0 > 0.95 > SequenceMatcher(None, b, a).ratio()
    codes = anchor_groups([a, b], ["g", "g"], anchor_match="similarity", similarity=0.95)
    assert codes[0] != codes[1]
