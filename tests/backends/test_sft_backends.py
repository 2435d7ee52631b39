"""Trajectory SFT under both frameworks from one spec (issue 9 "done when"): TRL's SFTTrainer and verl's
sft_trainer each train a small ScienceWorld gold-path set on the tiny model (CPU) for two epochs (one HF
checkpoint per epoch), and realise the same steps: same sequences in the same order (reshuffled per epoch),
same tokens, same learning rates, and (fp32, same init) the same losses and weights up to float noise."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("verl")

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.verl]

REPO = Path(__file__).parents[2]
SPEC = REPO / "experiments" / "sft-sciworld-cpu.yaml"
GOLD = Path(__file__).parent / "data" / "sciworld-gold-mini.jsonl"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from twinrun.backends.trl.sft import train_sft as trl_train
    from twinrun.backends.verl.sft import train_sft as verl_train
    from twinrun.core.spec import load_spec
    from twinrun.sft_plan import prepare_sft

    root = tmp_path_factory.mktemp("sft")
    spec = load_spec(SPEC, [f"sft.data={GOLD}", "sft.max_length=1536", "sft.epochs=2"])
    prepared = prepare_sft(spec, cache_dir=root / "models")
    out = {
        "spec": spec,
        "prepared": prepared,
        "trl": trl_train(spec, root / "trl", prepared=prepared),
        "verl": verl_train(spec, root / "verl", prepared=prepared, timeout_s=900),
        "root": root,
    }
    return out


def _metrics(path):
    from twinrun.core.records import read_jsonl

    return sorted(read_jsonl(path), key=lambda r: r["step"])


@pytest.mark.parametrize("backend", ["trl", "verl"])
def test_each_epoch_writes_hf_checkpoint_and_neutral_metrics(runs, backend):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    plan = runs["prepared"].plan
    res = runs[backend]
    assert res["steps"] == plan.schedule.total_steps == 4
    assert [Path(c).name for c in res["checkpoints"]] == ["step-000002", "step-000004"]  # one per epoch
    ck = res["checkpoints"][0]
    model = AutoModelForCausalLM.from_pretrained(ck)
    tok = AutoTokenizer.from_pretrained(ck)
    assert model.config.num_hidden_layers == 2 and tok.eos_token == "<|im_end|>"
    rows = _metrics(res["metrics"])
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and [r["epoch"] for r in rows] == [0, 0, 1, 1]
    for row, st in zip(rows, plan.steps, strict=True):
        assert row["backend"] == backend and row["kind"] == "sft_step"
        assert tuple(row["example_ids"]) == st.example_ids
        assert row["tokens"] == st.tokens and row["trained_tokens"] == st.trained_tokens
        assert row["lr"] == pytest.approx(st.lr, abs=1e-12)
        assert row["loss"] > 0 and row["grad_norm"] > 0


def test_backends_realise_the_same_training(runs):
    import torch
    from safetensors.torch import load_file

    trl_rows, verl_rows = _metrics(runs["trl"]["metrics"]), _metrics(runs["verl"]["metrics"])
    for a, b in zip(trl_rows, verl_rows, strict=True):
        assert a["example_ids"] == b["example_ids"] and a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3)
    wa = load_file(Path(runs["trl"]["checkpoints"][-1]) / "model.safetensors")
    wb = load_file(Path(runs["verl"]["checkpoints"][-1]) / "model.safetensors")
    assert set(wa) == set(wb)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) < 1e-5
    assert any(not torch.equal(wa[k], w) for k, w in load_file(
        Path(runs["prepared"].model_path) / "model.safetensors").items() if k in wa)  # it did train


def test_trl_resume_does_not_repeat_steps(runs):
    from twinrun.backends.trl.sft import train_sft

    spec = runs["spec"]
    again = train_sft(spec, runs["root"] / "trl", resume=True, prepared=runs["prepared"])
    assert [r["step"] for r in _metrics(again["metrics"])] == [1, 2, 3, 4]


def test_refuses_to_overwrite_a_run(runs):
    from twinrun.backends.trl.sft import train_sft
    from twinrun.core.errors import TwinrunError

    with pytest.raises(TwinrunError, match="not empty"):
        train_sft(runs["spec"], runs["root"] / "trl", prepared=runs["prepared"])
