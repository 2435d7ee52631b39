"""verl's FSDP actor shards -> an HF checkpoint at the master weights' dtype, with verl 0.9.1's own merger (less its
cast to bf16). Shards written as verl's checkpoint manager lays them out (``model_world_size_W_rank_R.pt``,
``fsdp_config.json``, ``huggingface/``), here from one process, so the merge runs in seconds; the end-to-end check
is tests/backends/test_verl_train.py::test_checkpoints_hold_the_master_weights_dtype."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl")

pytestmark = pytest.mark.verl


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_merged_checkpoint_keeps_the_shards_dtype(cache_dir, tmp_path, weight_dtypes, dtype):
    """Red before the fix for float32: verl's FSDPModelMerger casts every shard to bf16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from twinrun.backends.verl.checkpoints import is_complete, merge_to_hf
    from twinrun.models.tiny import build_tiny_qwen3

    tiny = build_tiny_qwen3(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=getattr(torch, dtype))
    actor = tmp_path / "global_step_2" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    model.config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(tiny).save_pretrained(actor / "huggingface")
    state = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save(state, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))

    out = merge_to_hf(actor, tmp_path / "checkpoints" / "step-000002", global_step=2)
    assert is_complete(out)
    assert weight_dtypes(out) == {"F32" if dtype == "float32" else "BF16"}
    assert json.loads((out / "config.json").read_text())["dtype"] == dtype
    merged = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert merged.dtype == getattr(torch, dtype)
    for k, v in merged.state_dict().items():
        assert torch.equal(v, state[k]), k  # bit for bit: no rounding on the way
