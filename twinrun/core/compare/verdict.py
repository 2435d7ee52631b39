"""The shape verdict for one pair of runs, with its criterion written out."""

from __future__ import annotations

from typing import Any

import numpy as np

from twinrun.core.compare.model import CompareSettings

AGREE = "shapes agree"
DIFFER = "shapes differ"
NO_EVIDENCE = "no evidence either way at this sample size"


def verdict(pearson: float | None, pearson_ci: tuple[Any, Any], interaction_p: float | None,
            settings: CompareSettings, *, n_checkpoints: int) -> dict[str, str]:
    """The shape verdict for one pair of runs, with its criterion written out.

    Criterion (alpha and CI level from `settings`):
      - "shapes agree"  if the bootstrap CI of Pearson r of per-checkpoint lifts lies entirely above 0
                         (the curves co-move beyond sampling noise);
      - "shapes differ" if that CI lies entirely below 0, or the run x checkpoint interaction has p < alpha
                         while the CI does not lie above 0;
      - otherwise "no evidence either way at this sample size".
    A significant interaction together with a CI above 0 is still "agree" (same ups and downs, different
    amplitude on the logit scale) and the criterion says so.
    """
    lvl = f"{settings.level:.0%}"
    rule = (f"agree if the {lvl} bootstrap CI of Pearson r of the per-checkpoint lifts lies above 0; differ if "
            f"it lies below 0, or if the run x checkpoint interaction has p < {settings.alpha} and the CI does not "
            f"lie above 0; otherwise no evidence.")
    if n_checkpoints < 3:
        return {"verdict": NO_EVIDENCE,
                "criterion": f"{rule} Only {n_checkpoints} shared checkpoint(s): a correlation needs at least 3."}
    lo, hi = pearson_ci
    p = interaction_p
    p_txt = f"{p:.3g}" if p is not None else "not computed"
    r_txt = (f"r = {pearson:.2f} [{lo:.2f}, {hi:.2f}]" if pearson is not None and lo is not None
             and np.isfinite(lo) and np.isfinite(hi) else "r undefined (a flat curve)")
    here = f" Here {r_txt}, interaction p = {p_txt}."
    above = lo is not None and np.isfinite(lo) and lo > 0
    below = hi is not None and np.isfinite(hi) and hi < 0
    inter = p is not None and p < settings.alpha
    if above:
        extra = " The interaction is significant: same ups and downs, different amplitude." if inter else ""
        return {"verdict": AGREE, "criterion": rule + here + extra}
    if below:
        return {"verdict": DIFFER, "criterion": rule + here + " The curves move in opposite directions."}
    if inter:
        return {"verdict": DIFFER, "criterion": rule + here + " The checkpoint profiles differ beyond noise."}
    return {"verdict": NO_EVIDENCE, "criterion": rule + here}
