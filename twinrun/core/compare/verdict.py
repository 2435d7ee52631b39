"""The shape verdict for one pair of curves: a pre-registered criterion, the checks it consists of, and one
sentence that says why (pure; the numbers come from `curves`).

Every number the rule reads is on the success-rate scale and, with replicate streams, judged against the variance
between streams (see :mod:`.streams`). The criterion (alpha, CI level, rho0 and delta from the settings):
- "shapes agree" needs all of: the lower CI bound of Pearson r of the per-checkpoint lifts above rho0; no
  significant run x checkpoint interaction; every pointwise 90% interval of the difference of the centred curves
  (L^A_k - mean L^A) - (L^B_k - mean L^B) inside +-delta (an intersection-union test of equivalence at 5%).
- "shapes differ" when r's CI lies below 0 (opposite directions), or the interaction is significant: the centred
  curves differ, which includes one curve being a scaled copy (amplitude other than 1) or flat against a shaped one.
- "co-move, profiles differ" when such an interaction comes with r's CI above 0: a shared trend, different ups
  and downs (or amplitudes). r on linearly detrended lifts is reported beside r.
- otherwise "no evidence either way at this sample size", with the games per stream (and the streams) that would
  decide for a pre-specified alternative under this rule, never from the observed noise.
The claims "differ" and "co-move" are a family over the pairs of a comparison: the interaction p-values are Holm
adjusted across pairs and r's "opposite" check uses a Bonferroni interval.
With one stream per arm the data cannot separate stream luck from a shape difference: unless the user states the
intra-stream correlation (``--stream-icc``, which inflates every variance by the design effect), the verdict is
"no evidence" and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from twinrun.core.compare.model import CompareSettings

AGREE = "shapes agree"
DIFFER = "shapes differ"
CO_MOVE = "co-move, profiles differ"
NO_EVIDENCE = "no evidence either way at this sample size"
VERDICTS = (AGREE, DIFFER, CO_MOVE, NO_EVIDENCE)
BAND_LEVEL = 0.90


@dataclass(frozen=True)
class ShapeEvidence:
    """What the verdict reads for one pair (None where not computed). interaction_p is the p-value the rule uses
    (Holm adjusted over the comparison's pairs); pearson_ci the interval its "opposite" check uses."""

    a: str
    b: str
    n_checkpoints: int
    n_games: int | None
    pearson: float | None = None
    pearson_ci: tuple[float | None, float | None] = (None, None)
    detrended: float | None = None
    detrended_ci: tuple[float | None, float | None] = (None, None)
    interaction_p: float | None = None
    interaction_what: str = "run x checkpoint interaction"
    band_half_width: float | None = None  # max_k of the pointwise band's reach from 0
    confounded: bool = False  # one run per framework: framework and seed cannot be told apart
    streams: int | None = None  # fewest streams in a cell of the pair (None: not per-stream evidence, e.g. seeds)
    stated_icc: float | None = None  # --stream-icc: the intra-stream correlation the user stated
    n_pairs: int = 1  # the family of pair verdicts the p-value was adjusted over


def _finite(v: float | None) -> bool:
    return v is not None and bool(np.isfinite(v))


def one_stream_blind(e: ShapeEvidence) -> bool:
    """One stream per arm and no stated correlation: stream luck and a shape difference cannot be told apart."""
    return e.streams is not None and e.streams < 2 and e.stated_icc is None


def criterion(settings: CompareSettings) -> str:
    lvl = f"{settings.level:.0%}"
    return (f"agree: the lower {lvl} bound of r above {settings.rho0:g}, no run x checkpoint interaction at "
            f"alpha {settings.alpha:g}, and every pointwise {BAND_LEVEL:.0%} interval of the difference of the centred "
            f"curves within +-{100 * settings.delta:g} pp; differ: r's CI below 0, or a significant interaction (the "
            "centred curves differ on the success-rate scale, an amplitude other than 1 included); co-move, profiles "
            "differ: such an interaction while r's CI lies above 0; otherwise no evidence. Every test is against the "
            "variance between streams; interaction p-values are Holm adjusted over the pairs; one stream per arm "
            "without a stated --stream-icc decides nothing.")


def _pp(v: float) -> str:
    return f"{100 * v:.1f} pp"


ONE_STREAM = ("one stream per arm: the data cannot separate stream luck (the first skills a stream writes lift or "
              "sink all its later games) from a difference of shape")


def decide(e: ShapeEvidence, settings: CompareSettings) -> dict[str, Any]:
    """The verdict, its reason code, the checks, the criterion and one explaining sentence."""
    crit = criterion(settings)
    if e.n_checkpoints < 3:
        return {"verdict": NO_EVIDENCE, "reason": "too-few-checkpoints", "criterion": crit, "checks": {},
                "explanation": f"Only {e.n_checkpoints} shared checkpoint(s): a shape needs at least 3."}
    lo, hi = e.pearson_ci
    inter = e.interaction_p is not None and e.interaction_p < settings.alpha
    # r's interval counts only where r itself is defined: with a flat curve the draws' r is rounding noise (the demo
    # of 2026-12-03 had [-0.00, -0.00] beside "r undefined", and read it as "opposite directions")
    r_ok = _finite(e.pearson)
    checks = {
        "r_lower_above_rho0": r_ok and _finite(lo) and lo > settings.rho0,  # type: ignore[operator]
        "r_ci_above_0": r_ok and _finite(lo) and lo > 0,  # type: ignore[operator]
        "r_ci_below_0": r_ok and _finite(hi) and hi < 0,  # type: ignore[operator]
        "interaction_significant": inter,
        "band_within_delta": e.band_half_width is not None and e.band_half_width <= settings.delta,
        "streams_separate_luck": not one_stream_blind(e),
    }
    r_txt = (f"r = {e.pearson:.2f} [{lo:.2f}, {hi:.2f}]" if _finite(e.pearson) and _finite(lo) and _finite(hi)
             else "r undefined (a flat curve)")
    d_txt = f", {e.detrended:.2f} after removing each curve's linear trend" if _finite(e.detrended) else ""
    fam = f", Holm over {e.n_pairs} pairs" if e.n_pairs > 1 else ""
    p_txt = "not computed" if e.interaction_p is None else f"{e.interaction_p:.2g}{fam}"
    n_txt = f" at {e.n_games} games" if e.n_games else ""
    conf = " (one run per framework: framework and RL seed are confounded)" if e.confounded else ""
    icc = (f" (intra-stream correlation {e.stated_icc:g} as stated: every variance inflated by the design effect)"
           if e.stated_icc is not None and e.streams is not None and e.streams < 2 else "")
    if one_stream_blind(e):
        verdict, reason = NO_EVIDENCE, "one-stream"
        why = (f"Nothing is decided: {ONE_STREAM}; conditional on the streams played, {r_txt} and the "
               f"{e.interaction_what} p = {p_txt}. Play >= 2 streams per arm (sweep --streams), or state a pilot's "
               f"intra-stream correlation with --stream-icc{conf}.")
    elif checks["r_ci_below_0"]:
        verdict, reason = DIFFER, "opposite"
        why = f"The curves move in opposite directions: {r_txt}{icc}{conf}."
    elif inter:
        if checks["r_ci_above_0"]:
            verdict, reason = CO_MOVE, "shared-trend"
            why = (f"The curves share a trend but not their ups and downs (or amplitudes): {r_txt}{d_txt}, while "
                   f"their centred curves differ beyond stream noise ({e.interaction_what} p = {p_txt}){icc}{conf}.")
        else:
            verdict, reason = DIFFER, "profiles"
            why = (f"The centred curves differ beyond stream noise ({e.interaction_what} p = {p_txt}); "
                   f"{r_txt}{d_txt}{icc}{conf}.")
    elif checks["r_lower_above_rho0"] and checks["band_within_delta"]:
        verdict, reason = AGREE, "agree"
        why = (f"The curves agree: {r_txt} lies above {settings.rho0:g}, the {e.interaction_what} is not significant "
               f"(p = {p_txt}), and their centred curves stay within {_pp(e.band_half_width or 0.0)} of each other "
               f"at every checkpoint (pointwise {BAND_LEVEL:.0%} intervals, margin +-{_pp(settings.delta)}){icc}{conf}.")
    else:
        verdict, reason = NO_EVIDENCE, "undecided"
        missing = []
        if not checks["r_lower_above_rho0"]:
            missing.append(f"{r_txt} does not lie above {settings.rho0:g}")
        if e.band_half_width is not None and not checks["band_within_delta"]:
            missing.append(f"the centred curves are only known to within {_pp(e.band_half_width)}, not "
                           f"+-{_pp(settings.delta)}")
        why = (f"Neither agreement nor a difference of shape is shown{n_txt}: {'; '.join(missing) or r_txt}"
               f"{icc}{conf}.")
    return {"verdict": verdict, "reason": reason, "criterion": crit, "checks": checks, "explanation": why}
