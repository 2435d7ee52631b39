"""bench/learning.py's rise statistic as rates over seeded draws with known truth (issue 17)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _learning():
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "bench" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rise_claims_rarely_under_a_flat_truth_and_usually_under_a_rise():
    rise = _learning().rise
    rng = np.random.default_rng(0)
    draws = 400
    # 20 steps of 8 binary outcomes each, r_task's shape in `make learn`
    flat = sum(rise(list(rng.binomial(8, 0.3, 20) / 8), 5)["rises"] for _ in range(draws)) / draws
    up = sum(rise(list(rng.binomial(8, np.linspace(0.2, 0.7, 20)) / 8), 5)["rises"] for _ in range(draws)) / draws
    down = sum(rise(list(rng.binomial(8, np.linspace(0.6, 0.2, 20)) / 8), 5)["rises"] for _ in range(draws)) / draws
    assert flat <= 0.05 and up >= 0.8 and down == 0.0, (flat, up, down)
    r = rise([0.0] * 5 + [0.5] * 5, 5)
    assert r["rise"] == 0.5 and r["ci"] == [0.5, 0.5] and r["rises"]
