"""One evaluation precision: every checkpoint of a sweep is loaded at one stated dtype (sweep.curator_dtype), whatever
dtype its export saved (verl's merge fp32, TRL's ZeRO-3 export bf16: DIVERGENCES B19).

Real pieces: the tiny Qwen3 built locally, saved once as a bf16 export and once as an fp32 export of the *same*
weights (the bf16 values, which fp32 holds exactly), real ALFWorld games, core's sessions, the scripted executor.
At one evaluation dtype the two checkpoints are the same model: their logits are bitwise equal and greedy
decoding writes the same turns. Loaded at their config dtypes (the wiring cut) they are not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw

FAST = ["executor.max_turns=3", "sweep.streams=1", "curator.max_response_tokens=12"]


def _exports(tiny: Path, root: Path) -> tuple[Path, Path]:
    """The same weights exported at bf16 (step 1) and at fp32 (step 2), each with its config's dtype."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).to(torch.bfloat16)
    bf16 = root / "checkpoints" / "step-000001"
    fp32 = root / "checkpoints" / "step-000002"
    model.save_pretrained(bf16)
    tok.save_pretrained(bf16)
    model.to(torch.float32).save_pretrained(fp32)
    tok.save_pretrained(fp32)
    for path, want in ((bf16, "bfloat16"), (fp32, "float32")):
        assert json.loads((path / "config.json").read_text())["dtype"] == want
    return bf16, fp32


def test_eval_dtype_is_stated_else_compute_dtype_on_gpu_and_fp32_on_cpu(smoke_spec_path: Path) -> None:
    bf16_spec = load_spec(smoke_spec_path, ["curator.precision=bf16"])
    assert sw.eval_dtype(bf16_spec, gpu=True) == "bf16"  # one vocabulary, the short names shown (issue 53)
    assert sw.eval_dtype(bf16_spec, gpu=False) == "fp32"
    assert sw.eval_dtype(load_spec(smoke_spec_path), gpu=True) == "fp32"  # curator.precision: fp32
    stated = load_spec(smoke_spec_path, ["sweep.curator_dtype=bfloat16"])
    assert sw.eval_dtype(stated, gpu=False) == "bf16" and sw.eval_dtype(stated, gpu=True) == "bf16"
    assert sw.on_gpu("cuda:3") and sw.on_gpu("cuda") and not sw.on_gpu("cpu")
    # the section is how checkpoints are measured, not what is trained: the spec hash does not move
    assert stated.spec_hash() == load_spec(smoke_spec_path).spec_hash()


@pytest.mark.alfworld
@pytest.mark.slow
@pytest.mark.sampling  # the two arms sample from bitwise-equal logits with the same seeds: equal on any CPU
def test_a_sweep_of_bf16_and_fp32_exports_evaluates_both_at_the_stated_dtype(
        tmp_path: Path, smoke_spec_path: Path, alfworld_data: Path, cache_dir: Path) -> None:
    import torch

    from twinrun.models import build_tiny_qwen3
    from twinrun.models.curator_policy import hf_policy_factory

    run = tmp_path / "mixed"
    _exports(build_tiny_qwen3(cache_dir), run)
    spec = load_spec(smoke_spec_path, FAST)
    policies: dict[str, object] = {}
    turns: dict[str, list[str]] = {}

    def factory(arm: sw.ArmPlan, spec_: object) -> sw.CuratorPolicy:
        policy = hf_policy_factory(arm, spec_, cache_dir=cache_dir)
        policies[arm.arm] = policy

        def recording(curator_input: str) -> str:
            text = policy(curator_input)
            turns.setdefault(arm.arm, []).append(text)
            return text

        return recording

    out = tmp_path / "sweep"
    sw.sweep(spec, {"mixed": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
             policy_factory=factory)
    # the manifest and every checkpoint row state the one dtype (CPU default: fp32)
    assert json.loads((out / "sweep.json").read_text())["curator_dtype"] == "fp32"
    for arm in ("mixed@1", "mixed@2"):
        rows = [json.loads(x) for x in (out / "arms" / f"{arm}.jsonl").read_text().splitlines()]
        assert [r["curator_dtype"] for r in rows] == ["fp32", "fp32"]
    assert all(json.loads(x)["curator_dtype"] is None for x in (out / "arms" / "baseline.jsonl").read_text().splitlines())
    # both exports were loaded at it, and at it they are one model: equal logits, the same sampled turns
    assert {a: p.loaded_dtype for a, p in policies.items()} == {"mixed@1": "float32", "mixed@2": "float32"}
    ids = torch.tensor([[5, 17, 300, 42, 9]])
    with torch.no_grad():
        a, b = (policies[x]._model(ids).logits for x in ("mixed@1", "mixed@2"))
    assert torch.equal(a, b)
    assert turns["mixed@1"] == turns["mixed@2"] and len(turns["mixed@1"]) == 2
    # the report says it
    from twinrun.core.compare.report import sweep_notes

    assert "evaluated at `fp32`" in sweep_notes([out])[0]

    # a stated dtype loads both exports at it; resuming the folder at another dtype is refused before any write
    stated = load_spec(smoke_spec_path, FAST + ["sweep.curator_dtype=bfloat16"])
    arm = sw.load_plan(out).arm("mixed@2")
    p = hf_policy_factory(arm, stated, cache_dir=cache_dir)
    p._load()
    assert p.loaded_dtype == "bfloat16"
    before = {f: f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()}
    with pytest.raises(sw.SweepError, match=r"^sweep.curator_dtype: bf16, but .* evaluated at fp32 "
                                            r"\(sweep.json\) \(fix: --set sweep.curator_dtype=fp32 .*\)$"):
        sw.sweep(stated, {"mixed": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
                 policy_factory=factory)
    assert {f: f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()} == before
