"""The permutation check of a control's framework verdict (issue 50): where the true split of its runs into the two
groups ranks among every other way of labelling the same runs, by the statistic the verdict tests.

* independent design (seeds nested in groups, the split-plot F of shape.profile_anova): every way of splitting the
  runs into two groups of the control's sizes (3 + 3: C(6, 3) / 2 = 10 splits; a split and its mirror give one F);
* paired design (seed i of the two groups pairs, shape.paired_profile_anova on the within-seed difference
  profiles): every set of seeds whose two runs swap labels (3 seeds: 2^3 / 2 = 4; swapping every seed only flips
  the difference's sign).

The rank counts the labellings whose F is at least the true one's (1: the true split is the most extreme; n: the
least), so rank / n is the permutation p-value, and 1 / n the smallest one the control can show (0.1 at 3 + 3
independent, 0.25 paired): with so few seeds this is a check of where the truth sits, not a test at 5%. A same-truth
control whose true split ranks last (the negative control's, independent) is one whose test could not have failed
on it: its seeds' shared profile sits on both sides and inflates the error term.

`python experiments/controls/analyse.py permutations NAME` prints every labelling and its F.
"""

from __future__ import annotations

from itertools import combinations, product
from typing import Any

import numpy as np

# relative tolerance for "at least the true F": a relabelling that is the true split's mirror computes the same F
# up to float rounding
TIE = 1e-9


def _splits(n_a: int, n_b: int) -> list[tuple[int, ...]]:
    """The rows of the stacked [a; b] matrix that go to group a, one per distinct split (with equal sizes a split
    and its mirror are one: only those that keep row 0 in group a)."""
    out = list(combinations(range(n_a + n_b), n_a))
    return [s for s in out if 0 in s] if n_a == n_b else out


def _swaps(n: int) -> list[tuple[int, ...]]:
    """The sets of seeds whose two runs swap groups, one per distinct labelling (seed 0 never swaps: swapping a
    set or its complement gives the same F)."""
    return [tuple(i for i, s in enumerate(bits) if s) for bits in product((0, 1), repeat=n) if not bits[0]]


def labellings(a: np.ndarray, b: np.ndarray, design: str) -> list[dict[str, Any]]:
    """Every distinct labelling of the runs a[n_a, K], b[n_b, K] (rows: runs; paired: row i of a and of b are seed
    i) with its statistic, the true one first: [{"moved": rows that changed group, "statistic": F}]."""
    from twinrun.core.compare import shape

    if design == "paired":
        out = []
        for sw in _swaps(a.shape[0]):
            a2, b2 = a.copy(), b.copy()
            a2[list(sw)], b2[list(sw)] = b[list(sw)], a[list(sw)]
            res = shape.paired_profile_anova(a2, b2)
            out.append({"moved": list(sw), "statistic": None if res is None else float(res["statistic"])})
        return out
    runs = np.vstack([a, b])
    n = runs.shape[0]
    out = []
    for s in _splits(a.shape[0], b.shape[0]):
        rest = [i for i in range(n) if i not in s]
        res = shape.profile_anova({"a": runs[list(s)], "b": runs[rest]})
        moved = [i for i in s if i >= a.shape[0]] + [i for i in rest if i < a.shape[0]]
        out.append({"moved": sorted(moved), "statistic": None if res is None else float(res["statistic"])})
    return out


def check(a: np.ndarray, b: np.ndarray, design: str) -> dict[str, Any] | None:
    """The true split's rank among every labelling (see the module's doc): {"design", "n", "rank", "p", "min_p",
    "statistic" (the true F), "all" (every F, largest first)}; None when a labelling has no F (too few seeds)."""
    rows = labellings(a, b, design)
    fs = [r["statistic"] for r in rows]
    if any(f is None for f in fs):
        return None
    true = fs[0]
    rank = sum(f >= true * (1 - TIE) for f in fs)
    return {"design": design, "n": len(fs), "rank": rank, "p": rank / len(fs), "min_p": 1 / len(fs),
            "statistic": true, "all": sorted(fs, reverse=True)}
