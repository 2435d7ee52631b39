"""TRL 1.16 with ``curator.context: per_position``: one training row per (rollout, position) through
GRPOTrainer's stock ``rollout_func``.

Layout. One dataset row per task group and ``num_generations = N x |G|``: TRL's RepeatSampler hands each process
contiguous copies of a group, and slot ``r*|G| + (p-1)`` of the group's block is (rollout r, position p)
(core's :func:`~twinrun.core.curation.positions.slot_layout`). A process's slice of the generation batch holds
whole rollouts (compile.py checks the arithmetic; core's ``PositionStepper`` refuses a slice that splits one).

One generation batch (:class:`PerPositionGRPOTrainer`):

1. ``_generate_and_score_completions`` notes each local slot's (task group, rollout, position): TRL hands the
   ``rollout_func`` only the prompts.
2. TRL calls the ``rollout_func`` = core's position schedule
   (:class:`~twinrun.core.curation.positions.PositionStepper`, each rollout core's ``walk_positions``, verl's walk
   too): every local rollout starts (position 1 played concurrently); whenever a rollout's episode at position p
   has ended, its prompt is rendered by core (:func:`~twinrun.core.curation.context_shape.session_messages`: chi_p and a window of ``curator.history`` earlier
   (input, turn) pairs), tokenised with the tokenizer's own chat template and the ``curate`` tool, and generated
   with the trainer's own generation path (``_generate_single_turn``: transformers or vLLM) together with every
   other rollout waiting at that moment, each at its own position (no barrier between positions: the executor
   keeps the other rollouts' episodes running meanwhile); its turn goes straight to its session (core applies the
   operations and plays position p+1), and after its last turn the session finishes. One row = one turn:
   ``max_completion_length`` is the per-turn cap. (``position_schedule="barrier"``, the earlier schedule, generates
   every rollout's turn p as one batch; it is also what runs when several processes share each generation call:
   vLLM, ZeRO-3 or FSDP, see :meth:`PerPositionGRPOTrainer.generation_is_collective`.)
   Under vLLM colocate with sleep mode, vLLM stays awake for the whole position loop (:func:`vllm_awake_for_step`):
   one weight sync per step, not one per generation call; ``weight_syncs`` per step are in trl_log.jsonl.
3. Extra fields reach the one reward function per slot: a slot's reward is its rollout's composite reward.
4. After TRL's scoring, core's per-row advantages (:func:`~twinrun.core.advantages.training_rows.row_advantages` over the
   batch gathered from every process) replace TRL's; rows.jsonl records each trained row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from twinrun.backends.trl.trainer import (
    DecayEveryParameter,
    batch_sequences,
    check_health,
    check_step,
    gathered_advantages,
)
from twinrun.core.advantages.training_rows import RowScore, TrainingRowRecord, row_advantages
from twinrun.core.curation import CurationRuntime
from twinrun.core.curation.context_shape import ids_digest
from twinrun.core.curation.positions import PositionStepper, Slot, StepperOutput, slot_layout, slot_scores
from twinrun.core.errors import TwinrunError

TOTAL_FIELD = "twinrun_total"  # rollout_func extra field: the slot's rollout reward (TRL hands it to the reward)


def slots_of(inputs: Sequence[dict[str, Any]], offset: int, num_generations: int, group_size: int) -> list[Slot]:
    from twinrun.backends.trl.environment import group_of

    out = []
    for i, row in enumerate(inputs):
        r, p = slot_layout(offset + i, num_generations, group_size)
        out.append(Slot(group_of(row), r, p))
    return out


@contextmanager
def vllm_awake_for_step(generation: Any) -> Iterator[None]:
    """Keep TRL's colocated vLLM awake for one step's position loop, then put it to sleep once.

    TRL 1.16's ``VLLMGeneration.generate`` (colocate, ``vllm_enable_sleep_mode``) wakes the KV cache, generates,
    then sleeps at level 2, which discards the weights, and the next call re-syncs the whole policy into vLLM
    (``sync_weights``) before generating. per_position generates once per position: |G| full weight syncs per step
    (10 for the paper arm) where the weights change once. Here the step's one sync is TRL's own (``_generate``,
    before the rollout_func); the KV cache is woken once, generate() is told not to sleep, and on exit (also on
    error) vLLM sleeps at level 2 as TRL would, so ZeRO-3 gets the memory back for the update. A no-op without
    vLLM, in server mode, or without sleep mode."""
    if generation is None or getattr(generation, "mode", None) != "colocate" or not generation.enable_sleep_mode:
        yield
        return
    if generation._llm_weights_sleeping:  # TRL did not sync this step (it does before every rollout_func)
        generation.sync_weights()
    generation.llm.wake_up(tags=["kv_cache"])
    generation.enable_sleep_mode = False
    try:
        yield
    finally:
        generation.enable_sleep_mode = True
        generation.llm.sleep(level=2)
        generation._llm_weights_sleeping = True


class SyncCounter:
    """Counts ``sync_weights`` calls on TRL's vLLM generation object (wrapped once per object)."""

    def __init__(self) -> None:
        self.count = 0

    def watch(self, generation: Any) -> None:
        if generation is None or getattr(generation, "_twinrun_sync_counter", None) is self:
            return
        sync = generation.sync_weights

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return sync(*args, **kwargs)

        generation.sync_weights = counted
        generation._twinrun_sync_counter = self


def _rollout_func(prompts: list[Any], trainer: PerPositionGRPOTrainer) -> dict[str, Any]:
    return trainer.per_position_rollout(prompts)


class PerPositionGRPOTrainer(DecayEveryParameter, GRPOTrainer):
    """GRPOTrainer whose generation is :class:`PositionStepper` (a ``rollout_func``) and whose advantages are
    core's per-row advantages. ``on_batch(step, records, stats, rows)`` receives the step's curation records and
    training rows (every process's, gathered)."""

    def __init__(self, *args: Any, runtime: CurationRuntime, estimator: Any, updates_per_step: int, history: int,
                 max_prompt_tokens: int | None, on_batch: Callable[..., None] | None = None,
                 max_unmeasured_share: float = 1.0, max_missing_turn_share: float = 1.0,
                 keep_row_tokens: bool = False, position_schedule: str = "ready", **kwargs: Any):
        super().__init__(*args, rollout_func=_rollout_func, **kwargs)
        self.runtime = runtime
        self.estimator = estimator
        self.updates_per_step = updates_per_step
        self.on_batch = on_batch
        self.max_unmeasured_share = max_unmeasured_share
        self.max_missing_turn_share = max_missing_turn_share
        self.keep_row_tokens = keep_row_tokens
        self.position_schedule = position_schedule
        if position_schedule == "ready" and self.generation_is_collective():
            # every process must make the same generation calls: the ready schedule's count varies per process
            self.position_schedule = "barrier"
        self.stepper = PositionStepper(runtime, self.processing_class, history=history,
                                       max_prompt_tokens=max_prompt_tokens, schedule=self.position_schedule)
        self._slots: list[Slot] = []
        self._output: StepperOutput | None = None
        self.weight_syncs = SyncCounter()  # vLLM weight syncs of the step being generated (metrics: weight_syncs)
        self.last_trl_advantages: torch.Tensor | None = None
        self.last_core_advantages: torch.Tensor | None = None

    def generation_is_collective(self) -> bool:
        """Whether one generation call needs every process (TRL's vLLM paths gather the prompts to one engine;
        ZeRO-3 and FSDP gather the weights): then the processes' calls must pair up, which the ready schedule's
        per-process micro-batches do not, so the barrier schedule is used."""
        return self.accelerator.num_processes > 1 and bool(
            self.use_vllm or getattr(self, "is_deepspeed_enabled", False) or getattr(self, "is_fsdp_enabled", False))

    # -- the rollout_func (called by TRL's _generate with the local prompts)
    def per_position_rollout(self, prompts: list[Any]) -> dict[str, Any]:
        if len(prompts) != len(self._slots):
            raise TwinrunError(f"trl per_position: rollout_func got {len(prompts)} prompts for {len(self._slots)} "
                               "slots (fix: call it through _generate_and_score_completions)")
        with vllm_awake_for_step(self.vllm_generation if self.use_vllm else None):
            out = self.stepper.run(self._slots, self.generate_turns)
        self._output = out
        totals = [out.results[s.rollout_key].total for s in self._slots]
        return {"prompt_ids": out.prompt_ids, "completion_ids": out.completion_ids, "logprobs": out.logprobs,
                TOTAL_FIELD: totals}

    def generate_turns(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        """One curator turn per prompt with the trainer's own generation path (vLLM or transformers; n=1: the
        prompts are already one per row)."""
        return self._generate_single_turn(prompt_ids, None, {}, 1)

    # -- TRL hook
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        step = self.state.global_step // self.updates_per_step  # 0-based training step being generated
        check_step(inputs, step)
        offset = self.accelerator.process_index * len(inputs)
        self._slots = slots_of(inputs, offset, self.num_generations, self.runtime.group_size)
        self._output = None
        self.weight_syncs.count = 0
        if self.use_vllm:
            self.weight_syncs.watch(self.vllm_generation)
        out = super()._generate_and_score_completions(inputs)
        t_rollout = time.perf_counter() - t0
        stepper = self._output
        assert stepper is not None, "TRL did not call the rollout_func"

        t1 = time.perf_counter()
        local = slot_scores(self._slots, stepper.results)
        everyone: list[RowScore] = gather_object(local)
        adv = row_advantages(self.estimator, everyone)[offset:offset + len(inputs)]
        self.last_trl_advantages = out["advantages"].detach().clone()
        out["advantages"] = torch.tensor(adv, dtype=torch.float32, device=out["completion_ids"].device)
        self.last_core_advantages = out["advantages"].detach().clone()
        t_adv = time.perf_counter() - t1

        rows = gather_object(self._row_records(step + 1, out, stepper))
        keys = list(dict.fromkeys(s.rollout_key for s in self._slots))
        for k in keys:  # the tokens TRL trains on, one sequence per position (rollouts.jsonl; `twinrun parity`)
            stepper.results[k].record.sequences = []
        for s, seq in sorted(zip(self._slots, batch_sequences(out), strict=True), key=lambda x: x[0].position):
            stepper.results[s.rollout_key].record.sequences.append(seq)  # type: ignore[union-attr]
        records = gather_object([(stepper.results[k].record.model_dump(mode="json"),
                                  [e.model_dump(mode="json") for e in stepper.results[k].episodes]) for k in keys])
        if self.on_batch is not None:
            self.on_batch(step + 1, records, {
                "wall_s": {"rollout": t_rollout, "advantages": t_adv, **stepper.wall_s},
                "advantages": gathered_advantages(self.last_trl_advantages, out["advantages"], self.estimator),
                "weight_syncs": self.weight_syncs.count if self.use_vllm else 0,
            }, rows=rows)
        check_health([r for r, _ in records], step + 1, self.max_unmeasured_share, self.max_missing_turn_share)
        return out

    def _row_records(self, step: int, out: dict[str, Any], stepper: StepperOutput) -> list[dict[str, Any]]:
        """rows.jsonl lines of the local slots, read from the tensors the loss will see."""
        pid, pmask = out["prompt_ids"].cpu(), out["prompt_mask"].cpu().bool()
        cid, cmask = out["completion_ids"].cpu(), out["completion_mask"].cpu().bool()
        rows = []
        for i, s in enumerate(self._slots):
            prompt = pid[i][pmask[i]].tolist()
            completion = cid[i][cmask[i]].tolist()
            rec = TrainingRowRecord(
                backend="trl", step=step, context="per_position", group_id=s.group.group_id,
                rollout_index=s.rollout_index, position=s.position, prompt_tokens=len(prompt),
                completion_tokens=len(completion), prompt_digest=ids_digest(prompt),
                advantage=float(out["advantages"][i]),
                prompt_ids=prompt if self.keep_row_tokens else None,
                completion_ids=completion if self.keep_row_tokens else None,
                messages=stepper.messages[i] if self.keep_row_tokens else None,
            )
            rows.append(rec.model_dump(mode="json", exclude_none=True))
        return rows


def composite_reward_function() -> Callable[..., list[float | None]]:
    """TRL's one reward function in per_position: each slot's reward is its rollout's composite reward (None =
    unmeasured -> NaN in TRL's statistics; core's advantages replace TRL's anyway)."""

    def composite_reward(**kwargs: Any) -> list[float | None]:
        totals = kwargs.get(TOTAL_FIELD)
        if totals is None:
            raise TwinrunError(f"trl reward: no {TOTAL_FIELD!r} field reached the reward (fix: use the rollout_func)")
        return list(totals)

    return composite_reward
