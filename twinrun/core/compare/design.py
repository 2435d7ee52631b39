"""Design before spending GPUs: how many streams decide a difference at the protocol's games per stream, given the
intra-stream correlation; and that correlation estimated from a pilot sweep's replicate streams (docs/streams.md).

**The protocol fixes the games per stream.** A stream is the protocol's held-out games played in order through
one repository, so its length is part of what is measured: a shorter stream measures an immature repository, a
longer one does not exist (ALFWorld's held-out splits hold 140 and 134 games, :mod:`twinrun.core.envs.splits`). A
design keeps m at the protocol's (a spec's eval_games, a pilot's games, or stated) and varies the streams, up to a
stated cap; where none up to the cap decides it says so.

**The model.** A stream plays m games through one skill repository, so its games are correlated: outcome
y_sg (stream s, game g) has variance sigma2 = p (1 - p) and any two games of one stream correlate rho. The success
rate of one stream then has variance (Kish)

    v(m) = sigma2 / m * DEFF,   DEFF = 1 + (m - 1) rho        (= sigma2 (rho + (1 - rho) / m))

and a cell (one run's checkpoint, or the baseline) measured as R independent streams has mean variance v / R.
More games would shrink only the second term (the variance stays above sigma2 rho / R), so streams buy precision
once m rho >> 1; and the games are the protocol's anyway.

**The tests it plans for** (stream-level analysis: each stream's success rate is one observation; the cells'
between-stream variances are pooled, as a two-way layout run x checkpoint with R streams per cell):

- ``lift``: one checkpoint's lift over the baseline, delta = p_arm - p_base.
  Var = 2 v / R; error df = (K + 1)(R - 1) (the run's K checkpoint cells and the baseline cell).
  The baseline writes no skills, so its true stream variance is at most v: treating it as v is conservative.
- ``shape``: a difference between two runs' curves after each is centred on its own mean, at one checkpoint:
  delta = (a_k - mean a) - (b_k - mean b). Var = 2 v (1 - 1/K) / R; error df = 2 K (R - 1). K >= 2.
  With crossed streams (``blocked``: `sweep --streams` plays stream r of every arm with one plan, so stream r is a
  block of each run, :mod:`.blocks`) the block cancels in the centred difference: v is then the variance of a
  stream's rate *after* the blocks (rho the ICC of the cell-specific stream part, :attr:`Pilot.blocked`) and the
  error df are the randomized-block residual's, 2 (K - 1)(R - 1). A lift keeps the block (nested v and df).

Power of the two-sided level-alpha t-test: with ncp = delta / sqrt(Var) and t* = t_{1-alpha/2, df},
power = P(|T| > t*) for T ~ noncentral t(df, ncp) (scipy ``nct``): the small-sample t for few streams. With one
stream per cell (R = 1) no between-stream variance can be estimated (df = 0): the variance must come from a stated
rho, and the test is the normal one, power = Phi(ncp - z*) + Phi(-ncp - z*), z* = z_{1-alpha/2}.
Cost: executor episodes = (checkpoints x runs + 1 baseline) x R x m.

**The estimator** (:func:`stream_icc_games`, :func:`stream_icc_counts`): one-way ANOVA of streams within cells
(each cell's streams share its true rate), ICC = (MSB - MSW) / (MSB + (m0 - 1) MSW), with the F-based interval
(Searle): F = MSB / MSW, F_L = F / F_{1-a/2}(df_B, df_W), F_U = F x F_{1-a/2}(df_W, df_B),
rho in [(F_L - 1) / (F_L + m0 - 1), (F_U - 1) / (F_U + m0 - 1)] (exact for normal outcomes, approximate for 0/1).
Every stream of a sweep plays the same games, so a game's difficulty is shared by all streams: from per-game
outcomes (:func:`stream_icc_games`) the game effect is removed first (two-way streams x games within each cell,
residual as the within-stream error; the same layout as :func:`twinrun.core.compare.streams.stream_icc`, which
`compare` reports); from success counts alone (:func:`stream_icc_counts`) it cannot be, and game-difficulty
variance inflates MSW: that estimate is biased low when games differ in difficulty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy import stats

from twinrun.core.compare.model import CompareError

Kind = Literal["lift", "shape"]


# ------------------------------------------------------------------------------------------------------------
# Power of a streams x games design


def design_effect(games: int, rho: float) -> float:
    """Kish's DEFF = 1 + (m - 1) rho of a stream of m games with intra-stream correlation rho."""
    return 1.0 + (games - 1) * rho


def stream_variance(games: int, rho: float, rate: float = 0.5) -> float:
    """Variance of one stream's success rate: p (1 - p) / m x DEFF."""
    return rate * (1.0 - rate) / games * design_effect(games, rho)


def contrast(kind: Kind, streams: int, games: int | float, rho: float, rate: float, checkpoints: int,
             blocked: bool = False) -> tuple[float, int]:
    """(variance of the estimated difference, error df) of the planned test (module docstring). games may be
    math.inf (the limit of unlimited games: v = p (1 - p) rho). blocked: crossed streams, a shape contrast
    tested against the residual after the stream blocks (rho is then the blocked ICC)."""
    if kind not in ("lift", "shape"):
        raise CompareError(f"--kind: {kind!r} is not a planned difference (fix: lift or shape)")
    if checkpoints < 1 or (kind == "shape" and checkpoints < 2):
        raise CompareError(f"--checkpoints: {checkpoints} (fix: >= 1 for a lift, >= 2 for a shape difference)")
    sigma2 = rate * (1.0 - rate)
    v = sigma2 * rho if math.isinf(games) else stream_variance(int(games), rho, rate)
    if kind == "lift":
        return 2.0 * v / streams, (checkpoints + 1) * (streams - 1)
    df = 2 * (checkpoints - 1) * (streams - 1) if blocked else 2 * checkpoints * (streams - 1)
    return 2.0 * v * (1.0 - 1.0 / checkpoints) / streams, df


def power(delta: float, rho: float, streams: int, games: int | float, *, rate: float = 0.5, alpha: float = 0.05,
          kind: Kind = "lift", checkpoints: int = 1, blocked: bool = False) -> float:
    """Power of the two-sided level-alpha test of a difference `delta` (success-rate scale, e.g. 0.10) with
    `streams` streams of `games` games per cell: noncentral t with the pooled error df, normal when R = 1.
    blocked (shape only): crossed streams, rho the blocked ICC and the randomized-block df."""
    var, df = contrast(kind, streams, games, rho, rate, checkpoints, blocked and kind == "shape")
    return two_sided_power(delta, var, df, alpha)


def two_sided_power(delta: float, var: float, df: int, alpha: float = 0.05) -> float:
    """Power of the two-sided level-alpha test of `delta` whose estimate has variance `var`: noncentral t on `df`
    error df, the normal test when df = 0 (variance stated, not estimated)."""
    if var <= 0:
        return 1.0 if delta != 0 else alpha
    ncp = abs(delta) / math.sqrt(var)
    if df == 0:
        z = stats.norm.ppf(1 - alpha / 2)
        return float(stats.norm.cdf(ncp - z) + stats.norm.cdf(-ncp - z))
    t = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(t, df, ncp) + stats.nct.cdf(-t, df, ncp))


def smallest_detected(power_of: Any, target: float = 0.8) -> float:
    """The smallest difference in [0, 1] (success-rate scale) whose power `power_of(delta)` reaches `target` (power
    rises with |delta|), by bisection; 1.0 when even a difference of the whole scale falls short."""
    if power_of(1.0) < target:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_of(mid) >= target else (mid, hi)
    return hi


def detectable(rho: float, streams: int, games: int | float, *, target: float = 0.8, **kw: Any) -> float:
    """The smallest difference the planned test detects with power `target`: the inverse of :func:`power` in
    delta; 1.0 when even a difference of the whole scale falls short (nothing the sweep could see is decided)."""
    return smallest_detected(lambda d: power(d, rho, streams, games, **kw), target)


def check_games_per_stream(games: int, split_games: int | None, split: str, source: str) -> None:
    """Refuse games per stream that no stream of the protocol can have: fewer than 1, or more than the held-out
    split holds (a stream is the split played in order through one repository: a longer one does not exist).
    split_games None: the split's size is not known here, and only the lower bound is checked."""
    if games < 1:
        raise CompareError(f"{source}: {games} games per stream (fix: 1 or more)")
    if split_games is not None and games > split_games:
        raise CompareError(f"{source}: {games} games per stream, but {split} holds {split_games} held-out games (a "
                           f"stream is the split played in order through one repository; fix: {split_games} or "
                           "fewer, and more streams for precision)")


def streams_needed(delta: float, rho: float, games: int, *, target: float = 0.8, max_streams: int = 64,
                   **kw: Any) -> int | None:
    """The fewest streams per cell whose power with `games` games per stream reaches `target`, or None when no
    number up to `max_streams` does. One stream is the normal test with the stated rho (it may out-power two
    streams' t with few df), so it is tried alone; from two on power rises with the streams (ncp ~ sqrt(R), df
    grow), so the rest is a bisection on whole streams."""
    if power(delta, rho, 1, games, **kw) >= target:
        return 1
    if max_streams < 2 or power(delta, rho, max_streams, games, **kw) < target:
        return None
    lo, hi = 2, max_streams
    while lo < hi:
        mid = (lo + hi) // 2
        if power(delta, rho, mid, games, **kw) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def episodes(checkpoints: int, runs: int, streams: int, games: int) -> int:
    """Executor episodes a sweep costs: every checkpoint arm of every run and the baseline, R streams of m games."""
    return (checkpoints * runs + 1) * streams * games


STREAMS_TABULATED = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass
class DesignRow:
    streams: int
    games: int  # per stream: the protocol's, the same in every row
    power: float
    deff: float
    episodes: int
    decides: bool  # power >= the target


@dataclass
class StreamsDesign:
    """Streams at the protocol's games per stream: the fewest that decide (None: none up to the cap), the power
    the cap reaches, and a row per tabulated number of streams (the fewest that decide among them)."""

    games: int
    max_streams: int
    streams: int | None
    power_at_cap: float
    rows: list[DesignRow]


def design_table(delta: float, rho: float, games: int, *, rate: float = 0.5, alpha: float = 0.05,
                 target: float = 0.8, kind: Kind = "lift", checkpoints: int = 1, runs: int = 1,
                 streams: Sequence[int] = STREAMS_TABULATED, max_streams: int = 64, split_games: int | None = None,
                 split: str = "the held-out split", games_source: str = "--games-per-stream",
                 blocked: bool = False) -> StreamsDesign:
    """The streams that decide a difference of `delta` with `games` games per stream, the protocol's (a stream's
    length is part of what is measured: a design varies streams, never the games per stream beyond the split,
    `split_games`). Rows: the tabulated `streams` up to `max_streams`, and the fewest that decide."""
    _check_inputs(delta, rho, rate, alpha, target)
    check_games_per_stream(games, split_games, split, games_source)
    if max_streams < 1:
        raise CompareError(f"--max-streams: {max_streams} (fix: 1 or more, e.g. 64)")
    for r in streams:
        if r < 1:
            raise CompareError(f"--streams: {r} (fix: 1 or more streams)")
    kw: dict[str, Any] = dict(rate=rate, alpha=alpha, kind=kind, checkpoints=checkpoints, blocked=blocked)
    need = streams_needed(delta, rho, games, target=target, max_streams=max_streams, **kw)
    rows = []
    for r in sorted({*(r for r in streams if r <= max_streams), *([need] if need else [])}):
        pw = power(delta, rho, r, games, **kw)
        rows.append(DesignRow(streams=r, games=games, power=pw, deff=design_effect(games, rho),
                              episodes=episodes(checkpoints, runs, r, games), decides=pw >= target))
    return StreamsDesign(games=games, max_streams=max_streams, streams=need,
                  power_at_cap=power(delta, rho, max_streams, games, **kw), rows=rows)


def _check_inputs(delta: float, rho: float, rate: float, alpha: float, target: float) -> None:
    if not 0 < abs(delta) < 1:
        raise CompareError(f"--delta: {delta} (fix: a difference in success-rate points between 0 and 100, e.g. 10)")
    if not 0 <= rho < 1:
        raise CompareError(f"--rho: {rho} (fix: an intra-stream correlation in [0, 1), e.g. 0.02)")
    if not 0 < rate < 1:
        raise CompareError(f"--rate: {rate} (fix: a success rate strictly between 0 and 1)")
    if not 0 < alpha < 1 or not 0 < target < 1:
        raise CompareError(f"--alpha/--power: {alpha}/{target} (fix: both strictly between 0 and 1)")


# ------------------------------------------------------------------------------------------------------------
# The intra-stream correlation, estimated from replicate streams


@dataclass
class StreamICC:
    icc: float | None  # the ANOVA estimate (may be negative: true rho 0 gives negative estimates half the time)
    ci: tuple[float | None, float | None]
    level: float
    method: str
    f_statistic: float | None
    df_between: int
    df_within: int
    m0: float | None  # the effective games per stream
    cells: int  # cells with >= 2 streams (the ones that carry information)
    streams: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci"] = list(self.ci)
        return d


def _icc_from_anova(ssb: float, dfb: int, ssw: float, dfw: int, m0: float, level: float, method: str,
                    cells: int, streams: int) -> StreamICC:
    if dfb <= 0 or dfw <= 0 or m0 <= 1:
        return StreamICC(None, (None, None), level, method + " (no cell has 2 streams: rho cannot be estimated)",
                         None, dfb, dfw, None, cells, streams)
    msb, msw = ssb / dfb, ssw / dfw
    if msw <= 0:  # every stream's games agree inside their cell: all the variation is between streams
        return StreamICC(1.0 if msb > 0 else None, (None, None), level, method, None, dfb, dfw, m0, cells, streams)
    f = msb / msw
    a = 1 - level
    icc = (msb - msw) / (msb + (m0 - 1) * msw)
    f_lo = f / stats.f.ppf(1 - a / 2, dfb, dfw)
    f_hi = f * stats.f.ppf(1 - a / 2, dfw, dfb)
    floor = -1.0 / (m0 - 1)
    lo = max(floor, (f_lo - 1) / (f_lo + m0 - 1))
    hi = min(1.0, (f_hi - 1) / (f_hi + m0 - 1))
    return StreamICC(float(icc), (float(lo), float(hi)), level, method, float(f), dfb, dfw, float(m0), cells, streams)


def stream_icc_counts(cells: Sequence[Sequence[tuple[int, int]]], level: float = 0.95) -> StreamICC:
    """One-way ANOVA ICC of streams within cells from counts: cells[c] = [(measured games, successes) per
    stream]. For 0/1 outcomes the sums of squares need only the counts: SSW = sum y - y^2 / n, SSB = sum n
    (p_s - p_cell)^2. m0 = (N - sum_c sum_s n_cs^2 / N_c) / (S - C) for unequal stream sizes. Game difficulty
    is not removed (counts cannot): biased low when games differ (module docstring)."""
    ssb = ssw = 0.0
    dfb = dfw = 0
    n_total = 0
    sq = 0.0
    used = streams = 0
    for cell in cells:
        ns = np.array([n for n, _ in cell if n > 0], float)
        ys = np.array([y for n, y in cell if n > 0], float)
        streams += len(ns)
        if len(ns) < 2:
            continue
        used += 1
        p = ys / ns
        pc = ys.sum() / ns.sum()
        ssb += float((ns * (p - pc) ** 2).sum())
        ssw += float((ys - ys ** 2 / ns).sum())
        dfb += len(ns) - 1
        dfw += int(ns.sum()) - len(ns)
        n_total += int(ns.sum())
        sq += float((ns ** 2).sum() / ns.sum())
    m0 = (n_total - sq) / dfb if dfb else 0.0
    return _icc_from_anova(ssb, dfb, ssw, dfw, m0, level, "one-way ANOVA of stream success counts within cells "
                           "(game difficulty not removed), F interval", used, streams)


def stream_icc_games(cells: Sequence[np.ndarray], level: float = 0.95) -> StreamICC:
    """ICC of streams within cells from per-game outcomes: cells[c] is a [streams, games] array of 0/1 (NaN:
    unmeasured). Every stream of a cell plays the same games, so each cell is a two-way table without
    replication: the game effect is removed (games measured in every stream of the cell only), the stream mean
    square MSB = m x var(stream means) has R - 1 df, the residual MSW has (R - 1)(m - 1) df; pooled over cells,
    ICC = (MSB - MSW) / (MSB + (m0 - 1) MSW) with m0 the df-weighted games per stream."""
    ssb = ssw = 0.0
    dfb = dfw = 0
    m_weighted = 0.0
    used = streams = 0
    for y in cells:
        y = np.asarray(y, float)
        streams += y.shape[0]
        y = y[:, ~np.isnan(y).any(axis=0)]
        r, m = y.shape
        if r < 2 or m < 2:
            continue
        used += 1
        row = y.mean(axis=1, keepdims=True)
        col = y.mean(axis=0, keepdims=True)
        grand = y.mean()
        ssb += float(m * ((row - grand) ** 2).sum())
        ssw += float(((y - row - col + grand) ** 2).sum())
        dfb += r - 1
        dfw += (r - 1) * (m - 1)
        m_weighted += (r - 1) * m
    m0 = m_weighted / dfb if dfb else 0.0
    return _icc_from_anova(ssb, dfb, ssw, dfw, m0, level, "streams x games ANOVA within cells (game effects "
                           "removed), F interval", used, streams)


@dataclass
class Pilot:
    """What a pilot sweep says for a design: its ICC, overall success rate and shape."""

    icc: StreamICC
    rate: float
    streams: int
    games: int
    checkpoints: int  # per run (the most any run has)
    runs: int
    blocked: dict[str, Any] | None = None  # crossed streams: the ICC left after the stream blocks (blocked_icc)


def blocked_icc(run_rates: Sequence[np.ndarray], icc: StreamICC, sigma2_game: float, level: float = 0.95
                ) -> dict[str, Any] | None:
    """The intra-stream correlation that a shape contrast still sees with crossed streams: each run's stream
    success rates y[K, R] (checkpoint x stream, complete) give the residual after the stream blocks, MS_E =
    s2_cell + sigma2_game / m (the cell-specific stream variance plus the games' binomial part); then
    rho_blocked = s2_cell / (s2_cell + sigma2_game), sigma2_game the ICC's within-stream residual (game effects
    removed). The interval carries MS_E's chi-square interval (sigma2_game, with far more df, taken as known).
    Also the block share (:func:`twinrun.core.compare.blocks.block_share`)."""
    from twinrun.core.compare import blocks as blk

    fits = [f for f in (blk.fit_run(y) for y in run_rates) if f is not None]
    share = blk.block_share(fits, level)
    if share is None or icc.m0 is None or sigma2_game <= 0:
        return None
    m, ss_e, df_e = icc.m0, sum(f.ss_e for f in fits), sum(f.df_e for f in fits)
    a = (1 - level) / 2

    def rho_of(ms_e: float) -> float:
        s2c = max(ms_e - sigma2_game / m, 0.0)
        return s2c / (s2c + sigma2_game)

    return {"icc": rho_of(ss_e / df_e), "ci": [rho_of(ss_e / stats.chi2.ppf(1 - a, df_e)),
                                               rho_of(ss_e / stats.chi2.ppf(a, df_e))],
            "level": level, "df_residual": df_e, "block_share": share["share"], "block_share_ci": share["ci"],
            "method": "residual after each run's stream blocks (checkpoint x stream layout of stream success rates), "
                      "less the games' binomial part; chi-square interval"}


def pilot_from_sweep(path: str | Path, level: float = 0.95) -> Pilot:
    """Estimate rho from a sweep folder with >= 2 streams (:func:`stream_icc_games` on each cell's streams x
    games outcomes); where its streams were crossed (sweep.json's stream plans), also the ICC left after the
    stream blocks, which sizes shape decisions (:func:`blocked_icc`)."""
    from twinrun.core.compare.load import load_game_table

    table = load_game_table([path])
    cells: dict[tuple[str | None, int | None], dict[int, np.ndarray]] = {}
    for i, a in enumerate(table.arms):
        key = (None, None) if a.role == "baseline" else (a.run, a.checkpoint)
        cells.setdefault(key, {})[a.replicate] = table.outcomes[i]
    streams = max(len(c) for c in cells.values())
    if streams < 2:
        raise CompareError(f"--pilot: {str(path)!r} plays one stream per arm: rho cannot be estimated from it "
                           "(fix: a pilot sweep with --streams 2 or more, or state --rho)")
    icc = stream_icc_games([np.stack([c[r] for r in sorted(c)]) for c in cells.values()], level)
    y = table.outcomes
    runs = {a.run for a in table.arms if a.role == "checkpoint"}
    per_run = max((len({a.checkpoint for a in table.arms if a.run == run}) for run in runs), default=1)
    blocked = None
    if table.crossed and icc.icc is not None and icc.df_within > 0:
        sigma2_game = _within_stream_ms(cells.values())
        grids = []
        for run in sorted(runs, key=str):
            steps = sorted({k[1] for k in cells if k[0] == run and k[1] is not None})
            reps = sorted({r for k in cells if k[0] == run for r in cells[k]})
            grids.append(np.array([[float(np.nanmean(cells[(run, s)][r])) if r in cells[(run, s)] else np.nan
                                    for r in reps] for s in steps]))
        blocked = blocked_icc(grids, icc, sigma2_game, level)
    return Pilot(icc=icc, rate=float(np.nanmean(y)), streams=streams, games=y.shape[1], checkpoints=per_run,
                 runs=max(len(runs), 1), blocked=blocked)


def _within_stream_ms(cells: Any) -> float:
    """The residual mean square of the streams x games layouts (the ICC's sigma2_game), pooled over cells."""
    ss = 0.0
    df = 0
    for c in cells:
        y = np.stack([c[r] for r in sorted(c)])
        y = y[:, ~np.isnan(y).any(axis=0)]
        r, m = y.shape
        if r < 2 or m < 2:
            continue
        res = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
        ss += float((res ** 2).sum())
        df += (r - 1) * (m - 1)
    return ss / df if df else 0.0

