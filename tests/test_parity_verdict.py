"""`twinrun parity`'s verdict on hand-made gradients (no framework): it judges the first update that moved the
weights, and a comparison in which no update moved (every replayed advantage 0, both gradients 0) fails with its
reason instead of passing as 0 == 0."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save_file

from twinrun.app.parity.run import DEFAULT_TOL, compare

NAMES = ("model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight")


def _spec():
    return SimpleNamespace(name="hand", spec_hash=lambda: "0" * 16)


def _arrays(scale: float, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (scale * rng.standard_normal((4, 3))).astype(np.float32) for n in NAMES}


def _results(tmp_path, grads_trl, grads_verl):
    model = tmp_path / "model"
    model.mkdir()
    save_file(_arrays(1.0, seed=9), str(model / "model.safetensors"))
    (model / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    results = {}
    for name, grads in (("trl", grads_trl), ("verl", grads_verl)):
        d = tmp_path / name
        d.mkdir()
        files = {}
        for u, g in enumerate(grads, start=1):
            files[str(u)] = str(d / f"grad-{u}.safetensors")
            save_file(g, files[str(u)])
        save_file(_arrays(1.0, seed=9), str(d / "w1.safetensors"))
        results[name] = {"grads": files, "weights": {"1": str(d / "w1.safetensors")}, "updates": []}
    return model, results


def test_all_zero_gradients_fail_with_the_reason(tmp_path):
    zero = _arrays(0.0)
    model, results = _results(tmp_path, [zero, zero], [zero, zero])
    report = compare(_spec(), model, results, [1], tol=DEFAULT_TOL)
    assert not report["passed"] and report["judged_update"] is None
    assert "no replayed update moved" in report["no_signal"] and "fix:" in report["no_signal"]


def test_the_first_update_that_moved_is_judged(tmp_path):
    zero, g = _arrays(0.0), _arrays(1e-2, seed=1)
    near = {n: v * (1 + 1e-5) for n, v in g.items()}
    model, results = _results(tmp_path, [zero, g], [zero, near])
    report = compare(_spec(), model, results, [1], tol=DEFAULT_TOL)
    assert report["judged_update"] == "2" and report["passed"] and report["no_signal"] is None
    assert report["rel_diff"] == pytest.approx(1e-5, rel=0.1)
    off = {n: v * 1.01 for n, v in g.items()}  # 1e-2 apart on the judged update: the verdict fails
    (tmp_path / "b").mkdir()
    model, results = _results(tmp_path / "b", [zero, g], [zero, off])
    report = compare(_spec(), model, results, [1], tol=DEFAULT_TOL)
    assert report["judged_update"] == "2" and not report["passed"] and report["rel_diff"] == pytest.approx(1e-2, rel=1e-2)
