"""Which epsilon the seeds' split-plot F should carry (docs/compare.md, "Seeds and frameworks").

compare's framework x checkpoint test (compare.shape.profile_anova) multiplies its degrees of freedom by a
sphericity epsilon. With fewer seeds than checkpoints the seeds' covariance has rank N - F < K - 1, and the
Greenhouse-Geisser estimate cannot exceed (N - F) / (K - 1): the test is then far below alpha under sphericity
and loses power. This bench measures, at 8 checkpoints, the rejection rate at alpha 5% of the F with GG's, HF's
(Lecoutre-corrected) and their mean's degrees of freedom, over seeded draws of planted truths:

* same truth, iid noise (sphericity);
* same truth, seed curves a random walk (3 pp steps, 1 pp noise: the slow test's hardest case);
* a linear difference of 16 pp from first to last checkpoint, noise 4.8 pp (the controls' seed SD).

    python bench/sphericity_correction.py [--draws 3000]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from twinrun.core.compare import shape

K = 8
TREND = np.linspace(-0.5, 0.5, K)
CASES = {
    "same, iid noise 4 pp": lambda rng, n, f: rng.normal(0, 0.04, (n, K)) + rng.normal(0, 0.02, (n, 1)),
    "same, random walk 3 pp + noise 1 pp": lambda rng, n, f: (np.cumsum(rng.normal(0, 0.03, (n, K)), axis=1)
                                                              + rng.normal(0, 0.01, (n, K))),
    "16 pp linear difference, noise 4.8 pp": lambda rng, n, f: (rng.normal(0, 0.048, (n, K))
                                                                + (0.16 * TREND if f == "b" else 0.0)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=3000)
    a = ap.parse_args()
    print("| truth | seeds per framework | GG | HF | mean of GG and HF |")
    print("|---|---|---|---|---|")
    for name, draw in CASES.items():
        for n in (2, 3, 4):
            rng = np.random.default_rng(n)
            hits = {"greenhouse_geisser": 0, "huynh_feldt": 0, "mean_gg_hf": 0}
            for _ in range(a.draws):
                r = shape.profile_anova({"a": draw(rng, n, "a"), "b": draw(rng, n, "b")})
                for key in hits:
                    e = r["epsilons"][key]
                    hits[key] += stats.f.sf(r["statistic"], r["df1"] * e, r["df2"] * e) < 0.05
            print(f"| {name} | {n} | " + " | ".join(f"{100 * h / a.draws:.1f}%" for h in hits.values()) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
