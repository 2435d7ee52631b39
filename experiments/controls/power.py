"""What the real-training controls can decide, and what it would take (issue 40): the seed spread, what a sweep
shaped like the paper's detects at the measured noise, and the verdict budget (Monte Carlo through compare's own
framework decision). experiments/controls/analyse.py reports these for each control; every function reads one
control's findings (analyse._control_findings), computed from the committed rows."""

from __future__ import annotations

from typing import Any

PAPER = {"games": 140, "streams": 1, "checkpoints": 12, "seeds": (1, 2, 3)}  # the paper's protocol (Table 4)


def _framework_mde(seed_var: float, stream_var: float, n: int, k: int, target: float = 0.8, alpha: float = 0.05
                   ) -> float | None:
    """Smallest difference between two frameworks' centred curves at one checkpoint (success-rate scale) that the
    seeds-as-replicates test detects with n seeds per framework, one stream each: each framework mean has variance
    (seed_var + stream_var) (1 - 1/K) / n (centring), the difference twice that, error df 2 (n - 1)(K - 1) (the
    framework x checkpoint layout with seeds as replicates); None with one seed (no seed variance can be
    estimated)."""
    from twinrun.core.compare.design import smallest_detected, two_sided_power

    if n < 2:
        return None
    var = 2 * (seed_var + stream_var) * (1 - 1 / k) / n
    return smallest_detected(lambda d: two_sided_power(d, var, 2 * (n - 1) * (k - 1), alpha), target)


def _centred_cell_noise(c: dict[str, Any], streams: float) -> float | None:
    """Variance a cell of `streams` crossed streams adds to a run's lift at one checkpoint, on the scale of the
    ANOVA's seed SD (per checkpoint, before centring): the error after the stream blocks, s2_e / streams. A run's
    stream-r block is shared by all its checkpoints and cancels when its curve is centred, as does the baseline."""
    blocks = c.get("blocks") or {}
    if not blocks:
        return None
    return blocks["sd_blocked"] ** 2 / streams


def _anova(c: dict[str, Any]) -> dict[str, Any] | None:
    """The control's split-plot ANOVA, seeds nested in groups (analyse.readings' independent reading; else its
    framework comparison's), or None with one framework. Its seed SD is a run's whole seed spread, which is what the
    paper-shaped sizing and the first budget's draw take; a paired reading's seed SD leaves out what a seed's two
    runs share."""
    rd = (c.get("readings") or {}).get("independent")
    if rd:
        return rd
    return next((x.get("anova") for x in c.get("frameworks", []) if x.get("anova")), None)


def _less_stream_noise(sd: float, c: dict[str, Any]) -> float | None:
    """A seed SD of a run's centred lift with this sweep's stream noise in a cell taken out: the seeds' own variance
    (floored at 0); None without blocks or streams."""
    noise = _centred_cell_noise(c, c["streams"]) if c.get("streams") else None
    return None if noise is None else max(0.0, sd ** 2 - noise)


def own_seed_var(c: dict[str, Any]) -> float | None:
    """The seeds' own variance of a run's centred lift: the seeds-as-replicates ANOVA's seed SD squared, less what
    this sweep's streams put into a cell (floored at 0); None without an ANOVA or blocks."""
    an = _anova(c)
    return None if an is None else _less_stream_noise(an["seed_sd"], c)


def seed_spread(c: dict[str, Any]) -> dict[str, Any] | None:
    """The spread between seeds of one framework, from the runs' curves alone (the seed control has no second
    framework, so no ANOVA): the seed SD of a run's centred lift as the ANOVA's error term computes it for one group
    (shape.seed_profile_ss), and the seeds' own SD once a cell's stream noise is taken out. None with fewer than 2
    runs."""
    import numpy as np

    from twinrun.core.compare.shape import seed_profile_ss

    lifts = np.array([cv["lifts"] for cv in c.get("curves", {}).values()], dtype=np.float64)
    if lifts.ndim != 2 or lifts.shape[0] < 2 or lifts.shape[1] < 2:
        return None
    ss, df = seed_profile_ss({"one": lifts})
    sd = (ss / df) ** 0.5
    own = _less_stream_noise(sd, c)
    noise = _centred_cell_noise(c, c["streams"]) if c.get("streams") else None
    return {"runs": lifts.shape[0], "sd": sd, "sd_own": None if own is None else own ** 0.5,
            "cell_noise_sd": None if noise is None else noise ** 0.5}


def paper_shaped(c: dict[str, Any]) -> dict[str, Any] | None:
    """What a sweep shaped like the paper's (140 games, one stream per checkpoint, 12 checkpoints, 1-3 seeds per
    framework) can decide at this control's measured rho and seed spread (design.detectable for a lift; the seeds'
    test for a framework difference). The seed spread measured here (seed SD of a run's centred lift) holds the
    noise of a cell of this sweep's streams; that part (the error SD after the stream blocks, which is what stays in
    a centred curve) is taken out to leave the seeds' own variance, and the paper-shaped stream's noise (rate 0.5:
    the largest; the whole stream variance, as the paper's streams need not be crossed) put in its place."""
    from twinrun.core.compare.design import detectable, stream_variance

    icc = c.get("icc") or {}
    an = _anova(c)
    seed_var = own_seed_var(c)
    if not icc or an is None or seed_var is None:
        return None
    m, k, rho = PAPER["games"], PAPER["checkpoints"], icc["estimate"]
    v = stream_variance(m, rho, 0.5)
    return {
        "lift": detectable(rho, 1, m), "lift_ci": [detectable(r, 1, m) for r in icc["ci"]],
        "lift_independent": detectable(0.0, 1, m), "seed_sd": an["seed_sd"], "seed_sd_own": seed_var ** 0.5,
        "framework": {n: _framework_mde(seed_var, v, n, k) for n in PAPER["seeds"]},
    }


BUDGET_SEEDS = (3, 4, 6, 8, 12)  # seeds per framework a verdict's budget is sized for
BUDGET_STREAMS = (4, 8, 16, 32, 64, 128)  # streams per checkpoint tried, at the control's games per stream
BUDGET_DRAWS = 100  # Monte Carlo draws per (seeds, streams); seeded: the budget is reproducible
BUDGET_POWER = 0.8
# what each budget asks the framework verdict for: the negative control's truth is one curve ("agree"); the positive
# control's is two (a difference of shape: "shapes differ", or "co-move, profiles differ" where the slower curve
# still rises: both claim that the centred curves differ)
WANTED = {"agree": ("shapes agree",), "differ": ("shapes differ", "co-move, profiles differ")}


def _truth(c: dict[str, Any], want: str) -> tuple[str, str, dict[str, Any], dict[str, list[str]]] | None:
    """The two groups of a control, the mean centred curve each follows in the budget's Monte Carlo ("agree": both
    follow the control's mean; "differ": each its own group's, as measured) and their runs (seed order)."""
    import numpy as np

    groups = c.get("groups") or {}
    if len(groups) != 2:
        return None
    fa, fb = sorted(groups)

    def centred_mean(runs: list[str]) -> np.ndarray:
        return np.mean([np.asarray(c["curves"][r]["lifts"]) - np.mean(c["curves"][r]["lifts"]) for r in runs], axis=0)

    runs_of = {f: [g["run"] for g in sorted(groups[f], key=lambda g: (g["seed"] is None, g["seed"]))]
               for f in (fa, fb)}
    if want == "agree":
        shared = centred_mean(runs_of[fa] + runs_of[fb])
        return fa, fb, {fa: shared, fb: shared}, runs_of
    return fa, fb, {f: centred_mean(runs_of[f]) for f in (fa, fb)}, runs_of


def hit_rate(c: dict[str, Any], want: str, n: int, streams: int, *, model: dict[str, Any] | None = None,
             truth_paired: bool = False, design: str = "independent", draws: int = BUDGET_DRAWS,
             rng: Any = None) -> float:
    """Share of Monte Carlo draws in which compare's framework decision (frameworks._framework_pair, default
    settings but the seed design) says `want` (WANTED) with n seeds per group and `streams` crossed streams, the
    truth being this control's (:func:`_truth`). model None: the first budget's draw (a run's lift independent at
    each checkpoint around its group's curve, with this control's own split-plot seed variance and cell noise);
    else the seed-profile model (:func:`seed_model`), its shared part one per seed when truth_paired. design: the
    analysis's seed design (CompareSettings.seed_design)."""
    import numpy as np

    from twinrun.core.compare import CompareSettings
    from twinrun.core.compare.curves import Curve
    from twinrun.core.compare.frameworks import _framework_pair

    fa, fb, truth, runs_of = _truth(c, want)
    k = truth[fa].size
    steps = np.asarray(c["curves"][runs_of[fa][0]]["checkpoints"])
    settings = CompareSettings(seed_design=design)
    rng = np.random.default_rng(20261203) if rng is None else rng
    sd = None if model else (own_seed_var(c) + _centred_cell_noise(c, streams)) ** 0.5
    hits = 0
    for _ in range(draws):
        if model:
            lifts = draw_profiles(model, truth, n, streams, truth_paired, rng)
        else:
            lifts = {f: truth[f][None, :] + rng.normal(0, sd, (n, k)) for f in (fa, fb)}
        made = {f: [Curve(run=f"{f}{i}", steps=steps, arm_idx=np.arange(k), lifts=lifts[f][i], boot=np.zeros((1, k)),
                          reliability=1.0, framework=f, seed=i) for i in range(n)] for f in (fa, fb)}
        hits += _framework_pair(fa, made[fa], fb, made[fb], [], settings).get("verdict") in WANTED[want]
    return hits / draws


def _fewest_streams(p_of: Any) -> dict[str, Any]:
    """The fewest of BUDGET_STREAMS whose hit rate p_of(streams) reaches BUDGET_POWER, by bisection (the rate rises
    with the streams: the most streams first, and none when even they fall short), and its rate:
    {"streams": None | R, "p": None | rate}."""
    rates: dict[int, float] = {}

    def rate(i: int) -> float:
        if i not in rates:
            rates[i] = p_of(BUDGET_STREAMS[i])
        return rates[i]

    lo, hi = 0, len(BUDGET_STREAMS) - 1
    if rate(hi) < BUDGET_POWER:
        return {"streams": None, "p": None}
    while lo < hi:  # invariant: hi reaches
        mid = (lo + hi) // 2
        if rate(mid) >= BUDGET_POWER:
            hi = mid
        else:
            lo = mid + 1
    return {"streams": BUDGET_STREAMS[hi], "p": rate(hi)}


def verdict_budget(c: dict[str, Any], want: str, model: dict[str, Any] | None = None,
                   design: str = "independent") -> dict[str, Any] | None:
    """The budget at which compare's framework verdict says `want` ("agree" or "differ", WANTED) with probability
    BUDGET_POWER when the truth is this control's (:func:`_truth`): for each number of seeds per group, the fewest
    streams per checkpoint (at this control's games per stream) that reach it, by Monte Carlo through compare's own
    framework decision (:func:`hit_rate`) under the control's seed design (design "paired": the seeds pair, in the
    truth drawn and in the test). With a seed-profile model (:func:`seed_model`) a seed's deviation is drawn as a
    profile with the measured covariance; without one, independently per checkpoint (the first budget). None
    without two groups, or without an ANOVA or blocks for the first budget's draw."""
    import numpy as np

    if _truth(c, want) is None or (model is None and own_seed_var(c) is None):
        return None
    fa, fb, truth, runs_of = _truth(c, want)
    k = truth[fa].size
    rng = np.random.default_rng(20261203)
    kw = {"model": model, "truth_paired": design == "paired", "design": design, "rng": rng}
    games = c["games_per_stream"]
    rows = []
    for n in BUDGET_SEEDS:
        found = _fewest_streams(lambda r, n=n: hit_rate(c, want, n, r, **kw))
        episodes = None if found["streams"] is None else round((2 * n * k + 1) * found["streams"] * games)
        rows.append({"seeds": n, **found, "episodes": episodes})
    n_here, r_here = min(len(runs_of[fa]), len(runs_of[fb])), int(c["streams"])
    from twinrun.core.compare import CompareSettings

    own = (model["sd_own"] ** 2) if model else own_seed_var(c)
    return {"want": want, "delta": CompareSettings().delta, "power": BUDGET_POWER, "draws": BUDGET_DRAWS,
            "design": design, "model": "profile" if model else "independent checkpoints",
            "seed_sd_own": own ** 0.5, "rows": rows,
            "here": {"seeds": n_here, "streams": r_here, "p": hit_rate(c, want, n_here, r_here, **kw)}}


CHECK_DRAWS = 400  # draws per reading of the check below: its numbers are compared with single p-values


def design_check(c: dict[str, Any], want: str, model: dict[str, Any]) -> dict[str, Any] | None:
    """What each Monte Carlo predicts for this control's own design (its seeds and streams), the seeds pairing as
    they do here: the first budget's draw (independent checkpoints, split-plot test, what it predicted), and the
    seed-profile model under each analysis (split-plot, paired). Each with CHECK_DRAWS draws, its own seeded
    generator. {"seeds", "streams", "draws", "iid_independent", "profile_independent", "profile_paired"}."""
    import numpy as np

    t = _truth(c, want)
    if t is None or own_seed_var(c) is None:
        return None
    n, r = min(len(v) for v in t[3].values()), int(c["streams"])
    out: dict[str, Any] = {"seeds": n, "streams": r, "draws": CHECK_DRAWS}
    for key, m, design in (("iid_independent", None, "independent"), ("profile_independent", model, "independent"),
                           ("profile_paired", model, "paired")):
        out[key] = hit_rate(c, want, n, r, model=m, truth_paired=True, design=design, draws=CHECK_DRAWS,
                            rng=np.random.default_rng(20261204))
    return out


# ------------------------------------------------------------------------------------------------------------
# A seed's deviation as a profile (issue 50): the budget above draws a seed's own variation independently at each
# checkpoint, but real seeds differ by a profile (seed 1 starts ~20 pp low under both frameworks and catches up),
# which the test's sphericity correction pays for and an independent draw does not; and at paired seeds (seed i of
# both groups shares the warm start, task order and stream plans) part of that profile is shared by the two groups'
# runs at seed i, which the paired test cancels and the split-plot keeps in its error. The model, per run of group g
# at seed i, on its centred lift profile:
#     x_gi = truth_g + u_i + v_gi + e_gi,  u_i ~ N(0, S_u) shared at seed i (paired; one per run when unpaired),
#     v_gi ~ N(0, S_v) the run's own, e_gi ~ N(0, s2_e / R I) the cell noise of R crossed streams.
# S_u + S_v is the seeds' own covariance: the pooled within-group covariance of the runs' centred profiles (measured
# at the sweep's streams) less its cell noise; S_u the pooled within-seed cross-covariance of two groups' runs at the
# same seed on one machine (the shared part, measured noise included: at checkpoint 1 paired runs are the same model
# and play identical games). Estimated once from the controls' runs of the learning arm, pooled.

# disjoint views that hold every run of the learning arm at its rate and at lr / 10 once (the seeds of each group;
# the broken group's curves, which fall to the baseline, are not a seed profile of this arm): the pool. The unpaired
# negative control's runs (trlu, verlu) are left out so that the budgets docs/findings.md states do not move when
# they join the committed rows; they would add 4 df to the own covariance and nothing to the shared part (their
# seeds pair with no run): adding "negative-unpaired" here is the one change that pools them too
SEED_POOL = ("seeds", "positive-5", "positive-6")
# the machine each group was trained on: runs pair at a seed only on one machine (one warm-start cache; the machines
# control shows the rebuilt start is another model)
MACHINE = {"trl": 1, "verl": 1, "trlslow": 1, "trlhigh": 2, "verl2": 2, "trlslow2": 2, "trlu": 3, "verlu": 3}


def _psd(s: Any) -> Any:
    """The nearest positive semi-definite matrix (eigenvalues floored at 0): a difference of estimated covariances
    can have small negative directions."""
    import numpy as np

    w, v = np.linalg.eigh((s + s.T) / 2)
    return (v * np.clip(w, 0, None)) @ v.T


def _group_seed(run: str) -> tuple[str, int]:
    group, seed = run.rsplit("-s", 1)
    return group, int(seed)


def seed_model(f: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The seed-profile model above, from the findings of the SEED_POOL views present (each a dict of
    analyse._control_findings). Returns {"own": S_u + S_v [K, K], "shared": S_u, "cell_var": s2_e (pooled blocked
    error), "streams", "df_own", "df_shared", "runs", "groups", "sd_own" (root of the mean diagonal of own: a seed's
    own SD per checkpoint), "sd_shared", "shared_share" (trace share of own that pairs share)} or None without the
    pool."""
    import numpy as np

    views = [f[n] for n in SEED_POOL if n in f and f[n].get("blocks")]
    if not views:
        return None
    curves = {r: np.asarray(cv["lifts"], dtype=np.float64) for v in views for r, cv in v["curves"].items()}
    k = {x.size for x in curves.values()}
    if len(k) != 1:
        return None
    k = k.pop()
    cen = {r: x - x.mean() for r, x in curves.items()}
    by: dict[str, dict[int, np.ndarray]] = {}
    for r, x in cen.items():
        g, s = _group_seed(r)
        by.setdefault(g, {})[s] = x
    total, df = np.zeros((k, k)), 0
    for seeds in by.values():
        m = np.array(list(seeds.values()))
        if m.shape[0] >= 2:
            res = m - m.mean(axis=0)
            total += res.T @ res
            df += m.shape[0] - 1
    cross, df_x = np.zeros((k, k)), 0
    for ga, gb in [(a, b) for a in sorted(by) for b in sorted(by) if a < b and MACHINE.get(a) == MACHINE.get(b)]:
        common = sorted(set(by[ga]) & set(by[gb]))
        if len(common) >= 2:
            xa, xb = (np.array([by[g][s] for s in common]) for g in (ga, gb))
            xa, xb = xa - xa.mean(axis=0), xb - xb.mean(axis=0)
            cross += (xa.T @ xb + xb.T @ xa) / 2
            df_x += len(common) - 1
    if df < 2:
        return None
    # the pooled blocked error of the pool's runs: the views are disjoint, so their residual sums of squares add
    ss = sum(v["blocks"]["sigma2_residual"] * v["blocks"]["df_residual"] for v in views)
    cell_var = ss / sum(v["blocks"]["df_residual"] for v in views)
    streams = min(int(v["streams"]) for v in views)
    centring = np.eye(k) - 1.0 / k
    own = _psd(total / df - cell_var / streams * centring)
    shared = _psd(cross / df_x) if df_x else np.zeros((k, k))
    shared = _psd(own - _psd(own - shared))  # S_v = own - S_u must be a covariance too
    tr = float(np.trace(own))
    return {"own": own, "shared": shared, "cell_var": cell_var, "streams": streams, "df_own": df,
            "df_shared": df_x, "runs": len(curves), "groups": sorted(by),
            "sd_own": (tr / k) ** 0.5, "sd_shared": (float(np.trace(shared)) / k) ** 0.5,
            "shared_share": float(np.trace(shared)) / tr if tr > 0 else 0.0}


def _factor(s: Any) -> Any:
    """F with F F' = s for a positive semi-definite s (its eigenvectors scaled by the roots of its eigenvalues, the
    negative ones of rounding floored at 0): a draw is z @ F.T, z standard normal."""
    import numpy as np

    w, v = np.linalg.eigh((s + s.T) / 2)
    return v * np.sqrt(np.clip(w, 0, None))


def draw_profiles(model: dict[str, Any], truth: dict[str, Any], n: int, streams: int, paired: bool,
                  rng: Any) -> dict[str, Any]:
    """One Monte Carlo draw of n runs per group under the seed-profile model: group -> lifts[n, K] (row i: seed i).
    paired: the shared part u_i is one draw per seed for both groups (seeds pair); else one per run."""
    k = model["own"].shape[0]
    fu, fv = model.setdefault("_factors", (_factor(model["shared"]), _factor(model["own"] - model["shared"])))
    u = rng.standard_normal((n, k)) @ fu.T
    out = {}
    for g, mean in truth.items():
        ui = u if paired else rng.standard_normal((n, k)) @ fu.T
        v = rng.standard_normal((n, k)) @ fv.T
        e = rng.normal(0.0, (model["cell_var"] / streams) ** 0.5, size=(n, k))
        out[g] = mean[None, :] + ui + v + e
    return out
