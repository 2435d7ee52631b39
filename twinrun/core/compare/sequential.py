"""Group-sequential looks at a streamed sweep (issue 41): how much of each claim's error rate a look may spend, and
what a look decides (pure; no I/O).

A sweep played in batches of streams is looked at after each batch (look j: the first n_j streams of every arm).
Looking J times at a fixed-level test would claim "differ" far more often than alpha under flat truth, so each
claim's error rate is **spent** across the looks with a Lan-DeMets spending function (Lan & DeMets 1983,
Biometrika 70:659; Jennison & Turnbull 2000, Group Sequential Methods, ch. 7), by default the Hwang-Shih-DeCani
family (Hwang, Shih & DeCani 1990, Stat Med 9:1439) with gamma -2:

    alpha(t) = alpha (1 - e^(-gamma t)) / (1 - e^(-gamma))   (gamma -2; "hsd:G" another gamma; "obf" the
                                                           O'Brien-Fleming type 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)),
                                                           "pocock" alpha ln(1 + (e - 1) t))

at the information fraction t_j = n_j / n_J (a cell mean's variance falls as 1 / streams). Gamma -2 lies between
Pocock (~1: spends early, the last look at ~0.015) and OBF (~-4: almost nothing before half the streams): on the
planted sweeps of bench/sequential_calibration.py it stops a decided sweep at ~0.6x the streams of a fixed design of
the same power where OBF took ~0.7x, and keeps a last-look level of ~0.03 (OBF ~0.04) for effects that need every
stream. The cumulative error alpha(t_j) - alpha(t_{j-1}) that look j may add is turned into a **nominal level** a_j
for that look's test:

- the run x checkpoint **interaction** ("differ" / "co-move"): an F with K - 1 and error df that grow with the
  streams, its looks correlated through the shared streams. Its nominal levels are set **by simulation** of the
  exact layout (2 runs x K checkpoints x n_J streams, normal errors; the stream blocks cancel in the blocked F so
  they need not be drawn): a_j is the quantile of look j's null p-values, among draws that crossed no earlier
  look, that spends exactly alpha(t_j) - alpha(t_{j-1}). The first look's p is exactly uniform, so a_1 =
  alpha(t_1). Each look's compare runs at ``alpha = a_j`` and ``level = 1 - a_j`` (every checkpoint's lift against
  the baseline at a_j, Holm within its family as usual). "differ" and "co-move" are claimed **only where the
  interaction crosses a_j**: r's "opposite" check (a bootstrap interval from n_boot draws, whose tail at
  1 - a_j is Monte Carlo noise, and a second test the spending does not cover) only names the kind of difference.
- **"agree"** (an intersection-union TOST, each side at alpha): its one-sided levels b_j come from the same
  spending function for a z statistic with independent increments (simulated Brownian motion); look j's band is
  the pointwise (1 - 2 b_j) interval, recomputed from the look's 90% band, and must lie within +-delta.

**Futility** (non-binding, so it never raises the error rate; the boundaries above ignore it): from the look at
which at least half of the planned streams are in, a look stops with "no evidence" when every undecided pair shows
neither a difference (interaction p above ``futility_p``, default 0.5) nor a sign of agreement (r below rho0).
**Stopping**: a look stops when every pair's verdict is decided under its levels, for futility, or at the last
look (then "no evidence", with compare's games and streams that would decide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from twinrun.core.compare.model import CompareError
from twinrun.core.compare.verdict import AGREE, BAND_LEVEL, CO_MOVE, DIFFER, NO_EVIDENCE  # noqa: F401 (re-exported)

SPENDINGS = ("hsd", "obf", "pocock")
HSD_GAMMA = -2.0  # the default spending: Hwang-Shih-DeCani with gamma -2 (between Pocock, gamma 1, and OBF, ~ -4)
SIMS = 100_000  # null draws behind the interaction's nominal levels (a_j's Monte Carlo error ~1e-4 at alpha 0.05)


def spending_kind(kind: str) -> tuple[str, float | None]:
    """"hsd" (gamma -2), "hsd:G" (gamma G), "obf" or "pocock" -> (family, gamma)."""
    name, _, g = str(kind).partition(":")
    if name == "hsd":
        try:
            gamma = float(g) if g else HSD_GAMMA
        except ValueError:
            gamma = float("nan")
        if np.isfinite(gamma):
            return "hsd", gamma
    elif name in SPENDINGS and not g:
        return name, None
    raise CompareError(f"spending: {kind!r} (fix: one of hsd (gamma {HSD_GAMMA:g}), hsd:GAMMA, obf, pocock)")


def spend(t: np.ndarray | Sequence[float], alpha: float, *, kind: str = "hsd") -> np.ndarray:
    """Cumulative error alpha(t) at information fractions t in (0, 1] (Lan-DeMets). kind "hsd" / "hsd:G":
    Hwang-Shih-DeCani alpha (1 - e^(-G t)) / (1 - e^(-G)) (G -2 unless given; G 0: alpha t); "obf": the
    O'Brien-Fleming type 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)); "pocock": alpha ln(1 + (e - 1) t). t[J] -> alpha(t)[J];
    alpha(1) = alpha."""
    t = np.asarray(t, dtype=float)
    if np.any(t <= 0) or np.any(t > 1 + 1e-12):
        raise CompareError(f"information fractions {t.tolist()} must lie in (0, 1] (fix: looks up to the last one)")
    family, gamma = spending_kind(kind)
    if family == "hsd":
        if abs(gamma) < 1e-12:
            return alpha * np.minimum(t, 1.0)
        return alpha * np.expm1(-gamma * np.minimum(t, 1.0)) / np.expm1(-gamma)
    if family == "obf":  # the same function for one- and two-sided tests (gsDesign's sfLDOF)
        return np.minimum(2 * stats.norm.sf(stats.norm.ppf(1 - alpha / 2) / np.sqrt(t)), alpha)
    return alpha * np.log1p((np.e - 1) * t)


def check_looks(looks: Sequence[int]) -> tuple[int, ...]:
    """Looks are stream counts, increasing, each >= 2 (a blocked or nested test needs two streams)."""
    lk = tuple(int(n) for n in looks)
    if not lk:
        raise CompareError("looks: none given (fix: e.g. --looks 2,4,8)")
    if lk[0] < 2 or any(b <= a for a, b in zip(lk, lk[1:])):
        raise CompareError(f"looks: {','.join(map(str, lk))} must increase and start at >= 2 streams (fix: e.g. 2,4,8)")
    return lk


def _crossing_levels(p: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """p[S, J] null p-values of J looks, targets[J] cumulative error -> nominal levels a[J] with
    P(some look <= j has p_i < a_i) = targets[j] (estimated on the S draws)."""
    s, j_n = p.shape
    alive = np.ones(s, dtype=bool)
    levels = np.zeros(j_n)
    spent = 0.0
    for j in range(j_n):
        want = max(targets[j] - spent, 0.0) * s  # draws this look may add
        pj = np.sort(p[alive, j])
        k = int(np.floor(want))
        if k <= 0:
            a = 0.0
        elif k >= pj.size:
            a = 1.0
        else:
            a = float(0.5 * (pj[k - 1] + pj[k]))  # crosses exactly the k smallest
        if j == 0:
            a = float(targets[0])  # exact: the first look's p is uniform
        levels[j] = a
        alive &= ~(p[:, j] < a)
        spent = 1.0 - alive.mean()
    return levels


@lru_cache(maxsize=64)
def interaction_levels(looks: tuple[int, ...], n_checkpoints: int, alpha: float = 0.05, design: str = "crossed",
                       kind: str = "hsd", sims: int = SIMS, seed: int = 0) -> tuple[float, ...]:
    """Nominal levels a_j of the run x checkpoint interaction F at each look (looks: streams at each look).

    Simulated layout: 2 runs x K checkpoints x n_J streams of N(0, 1) stream lifts (the null, flat truth). Look j
    uses streams [0, n_j): the interaction mean square against the residual after each run's stream blocks, df
    (K - 1, 2 (K - 1)(n_j - 1)) ("crossed"), or against the within-cell variance, df (K - 1, 2 K (n_j - 1))
    ("nested"), as compare's tests do."""
    lk = check_looks(looks)
    k = int(n_checkpoints)
    if k < 2:
        raise CompareError(f"checkpoints: {k} (fix: a curve needs at least 2 shared checkpoints)")
    rng = np.random.default_rng([seed, k, *lk])
    chunk = max(1, 2_000_000 // (2 * k * lk[-1]))
    ps = []
    for start in range(0, sims, chunk):
        m = min(chunk, sims - start)
        y = rng.standard_normal((m, 2, k, lk[-1]))
        cols = []
        for n in lk:
            z = y[..., :n]
            cell = z.mean(axis=3)  # [m, 2, K]
            inter = cell - cell.mean(axis=2, keepdims=True)  # centred per run
            inter = inter - inter.mean(axis=1, keepdims=True)  # minus the checkpoint means: run x checkpoint part
            ss_int = n * (inter ** 2).sum(axis=(1, 2))
            if design == "crossed":
                res = z - cell[..., None] - z.mean(axis=2, keepdims=True) + z.mean(axis=(2, 3), keepdims=True)
                df2 = 2 * (k - 1) * (n - 1)
            elif design == "nested":
                res = z - cell[..., None]
                df2 = 2 * k * (n - 1)
            else:
                raise CompareError(f"design: {design!r} (fix: crossed or nested)")
            f = (ss_int / (k - 1)) / ((res ** 2).sum(axis=(1, 2, 3)) / df2)
            cols.append(stats.f.sf(f, k - 1, df2))
        ps.append(np.stack(cols, axis=1))
    p = np.concatenate(ps)
    return tuple(float(a) for a in _crossing_levels(p, spend(np.array(lk) / lk[-1], alpha, kind=kind)))


@lru_cache(maxsize=64)
def z_levels(looks: tuple[int, ...], alpha: float = 0.05, sides: int = 1, kind: str = "hsd", sims: int = SIMS,
             seed: int = 0) -> tuple[float, ...]:
    """Nominal levels of a z statistic with independent increments (information proportional to the streams) at
    each look, spending `alpha` with `sides` sides: the one-sided levels b_j of each TOST side."""
    lk = check_looks(looks)
    rng = np.random.default_rng([seed, 7, *lk])
    inc = np.diff(np.concatenate([[0], lk]))
    w = np.cumsum(rng.standard_normal((sims, len(lk))) * np.sqrt(inc), axis=1)  # Brownian motion at the looks
    z = w / np.sqrt(np.array(lk))
    p = sides * stats.norm.sf(np.abs(z) if sides == 2 else z)
    return tuple(float(a) for a in _crossing_levels(p, spend(np.array(lk) / lk[-1], alpha, kind=kind)))


@dataclass(frozen=True)
class SequentialRule:
    """The stated rule: the looks (streams at each), the error rate alpha of each claim, the spending function,
    the futility rule. `levels(k, design)` gives each look's nominal levels for K checkpoints."""

    looks: tuple[int, ...]
    alpha: float = 0.05
    kind: str = "hsd"
    futility_p: float = 0.5  # 1.0: no futility stop
    futility_from: float = 0.5  # the share of the planned streams from which futility may stop a sweep

    def __post_init__(self) -> None:
        object.__setattr__(self, "looks", check_looks(self.looks))
        spending_kind(self.kind)  # refused in one line when unknown
        if not 0 < self.alpha < 1:
            raise CompareError(f"alpha: {self.alpha} must be in (0, 1) (fix: e.g. 0.05)")

    def levels(self, n_checkpoints: int, design: str = "crossed") -> dict[str, list[float]]:
        """{"interaction": a_j (two-sided claims: differ/co-move, r's opposite check, lifts), "tost": b_j (each
        side of agree's band), "band_level": 1 - 2 b_j} per look."""
        a = interaction_levels(self.looks, n_checkpoints, self.alpha, design, self.kind)
        b = z_levels(self.looks, self.alpha, 1, self.kind)
        return {"interaction": list(a), "tost": list(b), "band_level": [1 - 2 * x for x in b]}

    def describe(self) -> str:
        family, gamma = spending_kind(self.kind)
        shape = {"obf": "O'Brien-Fleming-type", "pocock": "Pocock-type"}.get(family, f"Hwang-Shih-DeCani (gamma {gamma:g})")
        fut = (f"; futility (non-binding) from {self.futility_from:.0%} of the streams: interaction p > "
               f"{self.futility_p:g} and r below rho0 in every undecided pair" if self.futility_p < 1 else "")
        return (f"group-sequential looks at {','.join(map(str, self.looks))} streams, alpha {self.alpha:g} per claim "
                f"spent by Lan-DeMets {shape} spending (Jennison & Turnbull 2000); differ/co-move only where the run x "
                f"checkpoint interaction crosses its boundary{fut}")


@dataclass
class Look:
    """What one look decided."""

    index: int
    streams: int
    alpha: float  # the interaction's (and every two-sided claim's) nominal level at this look
    band_level: float
    pairs: list[dict[str, Any]] = field(default_factory=list)  # per pair: a, b, verdict, reason, p, band
    decided: bool = False
    stop: str | None = None  # "decided" | "futility" | "last look" | None (go on)

    def to_dict(self) -> dict[str, Any]:
        return {"look": self.index, "streams": self.streams, "alpha": self.alpha, "band_level": self.band_level,
                "pairs": self.pairs, "decided": self.decided, "stop": self.stop}


def band_at(equivalence: dict[str, Any] | None, df: float | None, level: float) -> float | None:
    """The largest reach from 0 of the pointwise `level` band, recomputed from compare's BAND_LEVEL band
    (each interval d_k +- q sd_k with the same df)."""
    if not equivalence:
        return None
    d = np.asarray(equivalence["difference"], dtype=float)
    lo, hi = (np.asarray(x, dtype=float) for x in zip(*equivalence["band"]))
    q0 = stats.norm.ppf(0.5 + BAND_LEVEL / 2) if df is None else stats.t.ppf(0.5 + BAND_LEVEL / 2, df)
    q1 = stats.norm.ppf(0.5 + level / 2) if df is None else stats.t.ppf(0.5 + level / 2, df)
    sd = (hi - lo) / (2 * q0)
    return float(np.max(np.abs(d) + q1 * sd))


def f_boundary(alpha: float, df1: float | None, df2: float | None) -> float | None:
    """The interaction statistic's critical value at level `alpha` (F(df1, df2); chi-square(df1) when df2 is None)."""
    if not df1 or not 0 < alpha < 1:
        return None
    return float(stats.chi2.isf(alpha, df1) if df2 is None else stats.f.isf(alpha, df1, df2))


def take_look(doc: dict[str, Any], rule: SequentialRule, j: int, levels: dict[str, list[float]], *,
              rho0: float, delta: float) -> Look:
    """Look j (0-based) at a compare result `doc` computed on the first rule.looks[j] streams at alpha = a_j and
    level = 1 - a_j: each pair's verdict under the spending, and whether the sweep stops here.

    "differ" and "co-move" are claimed only where the run x checkpoint interaction crosses its boundary (p < a_j):
    the one test whose error the spending keeps. r's "opposite" check (a bootstrap interval, not spent) names the
    kind of difference and claims nothing alone: an "opposite" verdict without the interaction is withheld
    ("opposite-not-spent"). "agree" also needs the (1 - 2 b_j) band within delta. Each pair carries its statistics
    beside their boundaries (report.md's per-look table)."""
    n = rule.looks[j]
    a_j = levels["interaction"][j]
    look = Look(j + 1, n, a_j, levels["band_level"][j])
    undecided_futile = []
    for pair in doc.get("pairs", []):
        inter = pair.get("interaction") or {}
        p = inter.get("p_holm_pairs", inter.get("p_value"))
        crossed = p is not None and bool(np.isfinite(p)) and p < a_j
        verdict, reason = pair["verdict"], pair.get("reason")
        if verdict in (DIFFER, CO_MOVE) and not crossed:
            verdict, reason = NO_EVIDENCE, "opposite-not-spent"
        reach = band_at(pair.get("equivalence"), inter.get("df2"), look.band_level)
        if verdict == AGREE and (reach is None or reach > delta):
            verdict, reason = NO_EVIDENCE, "agree-not-yet-spent"
        look.pairs.append({"a": pair["a"], "b": pair["b"], "verdict": verdict, "reason": reason,
                           "interaction_p": p, "interaction_f": inter.get("statistic"),
                           "interaction_df": [inter.get("df"), inter.get("df2")],
                           "f_boundary": f_boundary(a_j, inter.get("df"), inter.get("df2")),
                           "pearson": pair.get("pearson"), "pearson_ci": pair.get("pearson_ci_family"),
                           "band_reach": reach, "delta": delta, "rho0": rho0,
                           "n_to_decide": pair.get("n_to_decide") if verdict == NO_EVIDENCE else None})
        if verdict == NO_EVIDENCE:
            r = pair.get("pearson")
            undecided_futile.append(p is not None and p > rule.futility_p and (r is None or not np.isfinite(r) or r < rho0))
    look.decided = bool(look.pairs) and not undecided_futile
    last = j == len(rule.looks) - 1
    if look.decided:
        look.stop = "decided"
    elif (rule.futility_p < 1 and not last and n >= rule.futility_from * rule.looks[-1] and undecided_futile
          and all(undecided_futile)):
        look.stop = "futility"
    elif last:
        look.stop = "last look"
    return look


def stopped(looks: Sequence[Look]) -> Look | None:
    """The look at which the rule stopped (None: it goes on)."""
    return next((lk for lk in looks if lk.stop), None)
