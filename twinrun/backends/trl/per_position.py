"""TRL 1.16 with ``curator.context: per_position``: one training row per (rollout, position) through
GRPOTrainer's stock ``rollout_func``.

Layout. One dataset row per task group and ``num_generations = N x |G|``: TRL's RepeatSampler hands each process
contiguous copies of a group, and slot ``r*|G| + (p-1)`` of the group's block is (rollout r, position p)
(:func:`slot_layout`). A process's slice of the generation batch holds whole rollouts (compile.py checks the
arithmetic; :class:`PositionStepper` refuses a slice that splits one).

One generation batch (:class:`PerPositionGRPOTrainer`):

1. ``_generate_and_score_completions`` notes each local slot's (task group, rollout, position): TRL hands the
   ``rollout_func`` only the prompts.
2. TRL calls the ``rollout_func`` = :meth:`PositionStepper.run`: every local rollout starts (position 1 played
   concurrently); whenever a rollout's episode at position p has ended, its prompt is rendered by core
   (:func:`~twinrun.core.curation.context_shape.session_messages`: chi_p and a window of ``curator.history`` earlier
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

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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
from twinrun.core.curation import CurationResult, CurationRuntime, CurationSession, TaskGroup
from twinrun.core.errors import TwinrunError
from twinrun.core.curation.context_shape import ids_digest, prompt_token_ids, session_messages
from twinrun.core.curation.toolcalls import CURATE_TOOL
from twinrun.core.advantages.training_rows import RowScore, TrainingRowRecord, rollout_rows, row_advantages

TOTAL_FIELD = "twinrun_total"  # rollout_func extra field: the slot's rollout reward (TRL hands it to the reward)

Generate = Callable[[list[list[int]]], tuple[list[list[int]], list[list[float]] | None]]


@dataclass(frozen=True)
class Slot:
    """One local generation slot: a (rollout, position) of a task group."""

    group: TaskGroup
    rollout_index: int
    position: int

    @property
    def rollout_key(self) -> tuple[str, int]:
        return (self.group.group_id, self.rollout_index)


def slot_layout(global_index: int, num_generations: int, group_size: int) -> tuple[int, int]:
    """(rollout index, position 1..|G|) of a generation-batch slot: slot ``r*|G| + (p-1)`` of its group's block."""
    j = global_index % num_generations
    return j // group_size, j % group_size + 1


def slots_of(inputs: Sequence[dict[str, Any]], offset: int, num_generations: int, group_size: int) -> list[Slot]:
    from twinrun.backends.trl.environment import group_of

    out = []
    for i, row in enumerate(inputs):
        r, p = slot_layout(offset + i, num_generations, group_size)
        out.append(Slot(group_of(row), r, p))
    return out


@dataclass
class StepperOutput:
    """What :meth:`PositionStepper.run` produced, in slot order (results keyed by rollout)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]] | None
    messages: list[list[dict[str, str]]]
    results: dict[tuple[str, int], CurationResult]
    wall_s: dict[str, float] = field(default_factory=dict)


SCHEDULES = ("ready", "barrier")


class PositionStepper:
    """Steps every local rollout of a generation batch through its positions.

    schedule ``ready`` (what :class:`PerPositionGRPOTrainer` uses wherever each process's generation is its own): a
    rollout's next position starts as soon as its own curator turn is generated; the main thread generates for
    whichever rollouts are waiting, in one call per wake-up (a micro-batch). ``barrier`` (this class's default, the
    earlier schedule): one generation call per position for all rollouts, the reference the tests and
    bench/train_concurrency.py compare against. Both produce the same rows for the same turns."""

    def __init__(self, runtime: CurationRuntime, tokenizer: Any, *, history: int, max_prompt_tokens: int | None,
                 tools: Sequence[dict[str, Any]] = (CURATE_TOOL,), schedule: str = "barrier"):
        if schedule not in SCHEDULES:
            raise TwinrunError(f"trl per_position: schedule {schedule!r} is unknown (fix: one of {', '.join(SCHEDULES)})")
        self.schedule = schedule
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.history = history
        self.max_prompt_tokens = max_prompt_tokens
        self.tools = list(tools)

    def _ids(self, messages: list[dict[str, str]]) -> list[int]:
        return prompt_token_ids(self.tokenizer, messages, self.tools)

    def messages(self, session: CurationSession) -> list[dict[str, str]]:
        return session_messages(session, self.runtime.curator_system_prompt, self.history,
                                measure=lambda m: len(self._ids(m)), limit=self.max_prompt_tokens)

    def run(self, slots: Sequence[Slot], generate: Generate) -> StepperOutput:
        g = self.runtime.group_size
        order: dict[tuple[str, int], dict[int, int]] = {}  # rollout -> position -> slot index
        for i, s in enumerate(slots):
            order.setdefault(s.rollout_key, {})[s.position] = i
        for key, positions in order.items():
            if sorted(positions) != list(range(1, g + 1)):
                raise TwinrunError(
                    f"trl per_position: rollout {key} has positions {sorted(positions)} in this process, not 1..{g} "
                    "(fix: a process's share of the generation batch must hold whole rollouts; see twinrun plan)"
                )
        keys = list(order)
        groups = {s.rollout_key: s.group for s in slots}
        sessions = [self.runtime.session(groups[k], k[1]) for k in keys]
        out = StepperOutput([[] for _ in slots], [[] for _ in slots], [[] for _ in slots], [[] for _ in slots], {},
                            {"executor": 0.0, "generate": 0.0})
        if self.schedule == "barrier":
            self._run_barrier(sessions, keys, order, generate, out)
        else:
            self._run_ready(sessions, keys, order, generate, out)
        return out

    def _generate(self, batch: list[int], sessions: list[CurationSession], keys: list[tuple[str, int]],
                  order: dict[tuple[str, int], dict[int, int]], positions: list[int], generate: Generate,
                  out: StepperOutput) -> list[str]:
        """One generation call for the rollouts in `batch` (indices into `sessions`), each at its own position:
        fills their slots of `out` and returns the decoded turns."""
        msgs = [self.messages(sessions[j]) for j in batch]
        ids = [self._ids(m) for m in msgs]
        t0 = time.perf_counter()
        comp, lps = generate(ids)
        out.wall_s["generate"] += time.perf_counter() - t0
        if len(comp) != len(ids):
            raise TwinrunError(f"trl per_position: {len(comp)} completions for {len(ids)} prompts")
        for n, j in enumerate(batch):
            i = order[keys[j]][positions[j]]
            out.prompt_ids[i], out.completion_ids[i], out.messages[i] = ids[n], list(comp[n]), msgs[n]
            if out.logprobs is not None:
                if lps is None:
                    out.logprobs = None
                else:
                    out.logprobs[i] = list(lps[n])
        return [self.tokenizer.decode(c, skip_special_tokens=True) for c in comp]

    def _run_barrier(self, sessions: list[CurationSession], keys: list[tuple[str, int]],
                     order: dict[tuple[str, int], dict[int, int]], generate: Generate, out: StepperOutput) -> None:
        """Every rollout's turn p in one generation call: position p+1 of all rollouts waits for the slowest
        episode of position p (the earlier schedule; bench/train_concurrency.py measures it as the before)."""
        loop = self.runtime.loop

        async def gather(coros: list[Any]) -> list[Any]:
            return list(await asyncio.gather(*coros))

        t0 = time.perf_counter()
        loop.run(gather([s.astart() for s in sessions]))
        out.wall_s["executor"] += time.perf_counter() - t0
        everyone = list(range(len(sessions)))
        for p in range(1, self.runtime.group_size + 1):
            texts = self._generate(everyone, sessions, keys, order, [p] * len(sessions), generate, out)
            t0 = time.perf_counter()
            loop.run(gather([s.asubmit(t) for s, t in zip(sessions, texts, strict=True)]))
            out.wall_s["executor"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        results = loop.run(gather([s.afinish() for s in sessions]))
        out.wall_s["executor"] += time.perf_counter() - t0
        out.results = dict(zip(keys, results, strict=True))

    def _run_ready(self, sessions: list[CurationSession], keys: list[tuple[str, int]],
                   order: dict[tuple[str, int], dict[int, int]], generate: Generate, out: StepperOutput) -> None:
        """No barrier between positions: whenever the main thread is free it generates one call for every rollout
        whose episode has ended (each at its own position), and hands each turn to its session at once; episodes
        keep running on the rollout loop meanwhile. A rollout's prompt at p is a function of its own session
        only, so the rows are the barrier schedule's whenever the curator's turns are (scripted or forced)."""
        loop, g = self.runtime.loop, self.runtime.group_size
        pending: dict[concurrent.futures.Future[Any], int] = {loop.submit(s.astart()): j
                                                               for j, s in enumerate(sessions)}
        position = [1] * len(sessions)  # the position whose turn each rollout needs next (g + 1: finishing)
        results: dict[int, CurationResult] = {}
        try:
            while pending:
                t0 = time.perf_counter()
                done, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                out.wall_s["executor"] += time.perf_counter() - t0
                ready = []
                for f in sorted(done, key=lambda f: pending[f]):  # rollout order: a fixed order within a call
                    j = pending.pop(f)
                    res = f.result()  # an infrastructure error here fails the step as the barrier schedule does
                    if position[j] > g:
                        results[j] = res
                    else:
                        ready.append(j)
                if not ready:
                    continue
                texts = self._generate(ready, sessions, keys, order, position, generate, out)
                for j, text in zip(ready, texts, strict=True):
                    pending[loop.submit(_advance(sessions[j], text, last=position[j] == g))] = j
                    position[j] += 1
        finally:
            for f in pending:
                f.cancel()
        out.results = {keys[j]: results[j] for j in range(len(sessions))}


async def _advance(session: CurationSession, turn: str, *, last: bool) -> str | CurationResult | None:
    """Hand a rollout its turn (core applies the operations and plays the next position); after its last turn,
    finish it (rewards) in the same task, so a finished rollout costs the main thread no extra wake-up."""
    nxt = await session.asubmit(turn)
    return await session.afinish() if last else nxt


def slot_scores(slots: Sequence[Slot], results: dict[tuple[str, int], CurationResult]) -> list[RowScore]:
    """Core's facts about each slot's row (slot order)."""
    rows: dict[tuple[str, int], list[RowScore]] = {}
    for key, res in results.items():
        rows[key] = rollout_rows(
            key[0], f"{key[0]}#{key[1]}", total=res.total,
            step_rewards=res.step_rewards if res.total is not None else [],
            anchors=res.anchors, position_valid=[not p.no_valid_call for p in res.record.positions],
        )
    return [rows[s.rollout_key][s.position - 1] for s in slots]


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
