"""The shape verdict for one pair of curves: a pre-registered criterion, the checks it consists of, and one
sentence that says why (pure; the numbers come from `curves`).

The criterion (alpha, CI level, rho0 and delta from the settings; the band is 90% simultaneous):
- "shapes agree" needs all of: the lower CI bound of Pearson r of the per-checkpoint lifts above rho0; no
  significant run x checkpoint interaction; the 90% simultaneous bootstrap band of the difference of the
  centred curves (L^A_k - mean L^A) - (L^B_k - mean L^B) inside +-delta at every checkpoint.
- "shapes differ" when r's CI lies below 0 (opposite directions), or the interaction is significant and is not
  one amplitude: the one-scale model (one run's profile = s x the other's) is rejected against the saturated
  interaction, or s is negative beyond its CI.
- "co-move, profiles differ" when such an interaction comes with r's CI above 0: a shared trend, different ups
  and downs. r on linearly detrended lifts is reported beside r.
- otherwise "no evidence either way at this sample size", with the games that would decide for a pre-specified
  alternative (identical shapes shown within +-delta; a profile difference of delta detected), never from the
  observed noise. An interaction that one amplitude explains is said so there, with s and its profile-likelihood
  interval: that amplitude statement is the only one made, and only where it was tested.
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
    """What the verdict reads for one pair (None where not computed)."""

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
    amplitude: dict[str, Any] | None = None  # the one-scale model (clogit.one_scale_model)
    band_half_width: float | None = None  # max_k of the band's reach from 0
    confounded: bool = False  # one run per framework: framework and seed cannot be told apart


def _finite(v: float | None) -> bool:
    return v is not None and bool(np.isfinite(v))


def criterion(settings: CompareSettings) -> str:
    lvl = f"{settings.level:.0%}"
    return (f"agree: the lower {lvl} bound of r above {settings.rho0:g}, no run x checkpoint interaction at "
            f"alpha {settings.alpha:g}, and the {BAND_LEVEL:.0%} simultaneous band of the difference of the centred "
            f"curves within +-{100 * settings.delta:g} pp; differ: r's CI below 0, or a significant interaction "
            "that one common amplitude does not explain; co-move, profiles differ: such an interaction while r's CI "
            "lies above 0; otherwise no evidence.")


def _pp(v: float) -> str:
    return f"{100 * v:.1f} pp"


def amplitude_only(amp: dict[str, Any] | None, alpha: float) -> bool:
    """The interaction is one amplitude: the one-scale model stands against the saturated interaction and s is
    not negative beyond its interval (a negative s is an opposite profile)."""
    if not amp or amp.get("shape_p") is None or amp["shape_p"] < alpha:
        return False
    hi = (amp.get("scale_ci") or [None, None])[1]
    return not (hi is not None and hi < 0)


def amplitude_sentence(e: ShapeEvidence) -> str:
    amp = e.amplitude or {}
    ref = e.a if amp.get("reference", 0) == 0 else e.b
    other = e.b if ref == e.a else e.a
    lo, hi = (amp.get("scale_ci") or [None, None])
    ci = f"[{'-inf' if lo is None else f'{lo:.2f}'}, {'inf' if hi is None else f'{hi:.2f}'}]"
    flat = " (its interval includes 0: it may have no profile at all)" if (lo is None or lo <= 0) and (hi is None or hi >= 0) else ""
    return (f"One amplitude explains the interaction (one-scale vs saturated p = {amp['shape_p']:.3g}): {other}'s "
            f"checkpoint profile is {amp['scale']:.2f} x {ref}'s {ci}{flat}.")


def decide(e: ShapeEvidence, settings: CompareSettings) -> dict[str, Any]:
    """The verdict, its reason code, the checks, the criterion and one explaining sentence."""
    crit = criterion(settings)
    if e.n_checkpoints < 3:
        return {"verdict": NO_EVIDENCE, "reason": "too-few-checkpoints", "criterion": crit, "checks": {},
                "explanation": f"Only {e.n_checkpoints} shared checkpoint(s): a shape needs at least 3."}
    lo, hi = e.pearson_ci
    inter = e.interaction_p is not None and e.interaction_p < settings.alpha
    amp_only = inter and amplitude_only(e.amplitude, settings.alpha)
    checks = {
        "r_lower_above_rho0": _finite(lo) and lo > settings.rho0,  # type: ignore[operator]
        "r_ci_above_0": _finite(lo) and lo > 0,  # type: ignore[operator]
        "r_ci_below_0": _finite(hi) and hi < 0,  # type: ignore[operator]
        "interaction_significant": inter,
        "interaction_is_one_amplitude": amp_only,
        "band_within_delta": e.band_half_width is not None and e.band_half_width <= settings.delta,
    }
    r_txt = (f"r = {e.pearson:.2f} [{lo:.2f}, {hi:.2f}]" if _finite(e.pearson) and _finite(lo) and _finite(hi)
             else "r undefined (a flat curve)")
    d_txt = f", {e.detrended:.2f} after removing each curve's linear trend" if _finite(e.detrended) else ""
    p_txt = "not computed" if e.interaction_p is None else f"{e.interaction_p:.2g}"
    n_txt = f" at {e.n_games} games" if e.n_games else ""
    conf = " (one run per framework: framework and RL seed are confounded)" if e.confounded else ""
    if checks["r_ci_below_0"]:
        verdict, reason = DIFFER, "opposite"
        why = f"The curves move in opposite directions: {r_txt}{conf}."
    elif inter and not amp_only:
        beyond = ""
        if e.amplitude and e.amplitude.get("shape_p") is not None:
            beyond = ("; one common amplitude does not explain it" if e.amplitude["shape_p"] < settings.alpha
                      else "; as one amplitude its scale is negative (an opposite profile)")
        if checks["r_ci_above_0"]:
            verdict, reason = CO_MOVE, "shared-trend"
            why = (f"The curves share a trend but not their ups and downs: {r_txt}{d_txt}, while their checkpoint "
                   f"profiles differ beyond sampling noise ({e.interaction_what} p = {p_txt}{beyond}){conf}.")
        else:
            verdict, reason = DIFFER, "profiles"
            why = (f"The checkpoint profiles differ beyond sampling noise ({e.interaction_what} p = {p_txt}"
                   f"{beyond}); {r_txt}{d_txt}{conf}.")
    elif checks["r_lower_above_rho0"] and not inter and checks["band_within_delta"]:
        verdict, reason = AGREE, "agree"
        why = (f"The curves agree: {r_txt} lies above {settings.rho0:g}, the {e.interaction_what} is not significant "
               f"(p = {p_txt}), and their centred curves stay within {_pp(e.band_half_width or 0.0)} of each other "
               f"at every checkpoint ({BAND_LEVEL:.0%} simultaneous band, margin +-{_pp(settings.delta)}){conf}.")
    else:
        verdict, reason = NO_EVIDENCE, "undecided"
        missing = []
        if not checks["r_lower_above_rho0"]:
            missing.append(f"{r_txt} does not lie above {settings.rho0:g}")
        if e.band_half_width is not None and not checks["band_within_delta"]:
            missing.append(f"the centred curves are only known to within {_pp(e.band_half_width)}, not "
                           f"+-{_pp(settings.delta)}")
        if inter:
            missing.append(f"the {e.interaction_what} is significant (p = {p_txt}) but is one amplitude")
        why = f"Neither agreement nor a difference of shape is shown{n_txt}: {'; '.join(missing) or r_txt}{conf}."
        if amp_only:
            why += " " + amplitude_sentence(e)
    return {"verdict": verdict, "reason": reason, "criterion": crit, "checks": checks, "explanation": why}
