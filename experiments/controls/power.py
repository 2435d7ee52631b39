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
    """The control's seeds-as-replicates ANOVA (its framework comparison's), or None with one framework."""
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


def verdict_budget(c: dict[str, Any], want: str) -> dict[str, Any] | None:
    """The budget at which compare's framework verdict says `want` ("agree" or "differ", WANTED) with probability
    BUDGET_POWER when the truth is this control's: for "agree" both frameworks follow its mean centred curve; for
    "differ" each framework follows its own group's mean centred curve, as measured. For each number of seeds per
    framework, the fewest streams per checkpoint (at this control's games per stream) that reach it, by Monte Carlo
    through compare's own framework decision (frameworks._framework_pair, default settings). A run's lift at a
    checkpoint is drawn around its framework's curve with the seeds' own variance plus what its cell of streams adds
    (the blocked error / streams), both measured here. None without an ANOVA, blocks or two groups."""
    import numpy as np

    from twinrun.core.compare import CompareSettings
    from twinrun.core.compare.curves import Curve
    from twinrun.core.compare.frameworks import _framework_pair

    own = own_seed_var(c)
    groups = c.get("groups") or {}
    if own is None or len(groups) != 2:
        return None
    fa, fb = sorted(groups)

    def centred_mean(runs: list[str]) -> np.ndarray:
        return np.mean([np.asarray(c["curves"][r]["lifts"]) - np.mean(c["curves"][r]["lifts"]) for r in runs], axis=0)

    runs_of = {f: [g["run"] for g in groups[f]] for f in (fa, fb)}
    if want == "agree":
        shared = centred_mean(runs_of[fa] + runs_of[fb])
        truth = {fa: shared, fb: shared}
    else:
        truth = {f: centred_mean(runs_of[f]) for f in (fa, fb)}
    k = truth[fa].size
    steps = np.asarray(c["curves"][runs_of[fa][0]]["checkpoints"])
    settings = CompareSettings()
    rng = np.random.default_rng(20261203)

    def p_hit(n: int, streams: int) -> float:
        sd = (own + _centred_cell_noise(c, streams)) ** 0.5
        hits = 0
        for _ in range(BUDGET_DRAWS):
            made = {f: [Curve(run=f"{f}{i}", steps=steps, arm_idx=np.arange(k), lifts=truth[f] + rng.normal(0, sd, k),
                              boot=np.zeros((1, k)), reliability=1.0, framework=f, seed=i) for i in range(n)]
                    for f in (fa, fb)}
            hits += _framework_pair(fa, made[fa], fb, made[fb], [], settings).get("verdict") in WANTED[want]
        return hits / BUDGET_DRAWS

    games = c["games_per_stream"]
    rows = []
    for n in BUDGET_SEEDS:
        found: dict[str, Any] = {"streams": None, "p": None}
        for r in BUDGET_STREAMS:
            ph = p_hit(n, r)
            if ph >= BUDGET_POWER:
                found = {"streams": r, "p": ph}
                break
        episodes = None if found["streams"] is None else int(round((2 * n * k + 1) * found["streams"] * games))
        rows.append({"seeds": n, **found, "episodes": episodes})
    n_here, r_here = min(len(runs_of[fa]), len(runs_of[fb])), int(c["streams"])
    return {"want": want, "delta": settings.delta, "power": BUDGET_POWER, "draws": BUDGET_DRAWS,
            "seed_sd_own": own ** 0.5, "rows": rows,
            "here": {"seeds": n_here, "streams": r_here, "p": p_hit(n_here, r_here)}}
