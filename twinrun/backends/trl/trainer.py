"""``TwinrunGRPOTrainer``: TRL 1.16's GRPOTrainer with core's curation rollouts and core's advantages.

What it changes, and nothing else:

1. The prompt's tool list is core's :data:`~twinrun.core.curation.toolcalls.CURATE_TOOL` (the exact schema verl renders),
   not TRL's docstring-derived schema of ``CuratorEnvironment.curate``. Dispatch is TRL's own (by method name).
2. Before generation, every rollout of the batch gets its rollout index (its place in its group, from TRL's
   contiguous group layout) and its session is started (position 1 played concurrently). After TRL's tool loop and
   reward, core's ``compute_advantages`` replaces TRL's advantages: rewards, group ids and per-position data are
   gathered from every process first (TRL normalises over the gathered batch too), then the local slice is taken.
   grpo / dr_grpo / rloo give one advantage per rollout ``(B,)``; gigpo gives ``(B, T)``: each curator turn's
   tokens carry that position's ``A^E + omega A^S`` (spans from the tool mask, see
   :mod:`twinrun.core.advantages.token_advantages`).
3. The curation records of the batch (rollouts.jsonl, episodes.jsonl) and per-step rollout statistics are
   handed to a recorder callback.

TRL's own advantages are kept in ``last_trl_advantages`` so a test (and the ``trl`` preset check) can compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from twinrun.backends.trl.environment import SessionBroker
from twinrun.core.advantages.token_advantages import model_segments, spread_advantages
from twinrun.core.advantages import EstimatorConfig, compute_advantages
from twinrun.core.curation.context_shape import ids_digest, position_messages
from twinrun.core.curation import CurationResult
from twinrun.core.errors import TwinrunError
from twinrun.core.curation.policy_input import segment_positions
from twinrun.core.records import SequenceTokens
from twinrun.core.advantages.step_health import StepCounts, check_step_health
from twinrun.core.curation.toolcalls import CURATE_TOOL
from twinrun.core.advantages.training_rows import TrainingRowRecord


class DecayEveryParameter:
    """AdamW weight decay on every parameter, as verl's FSDP optimizer applies it (``model.parameters()``), instead
    of the HF Trainer's default that exempts biases and norm weights. Measured with `twinrun parity`: without it the
    norm weights of the two backends drift apart by ``lr * weight_decay * w`` per update (DIVERGENCES B14)."""

    def get_decay_parameter_names(self, model: Any) -> list[str]:
        return [name for name, _ in model.named_parameters()]


_CPU_INDEX_REGISTERED = False


def allow_indexed_cpu_locations() -> None:
    """Let torch.load restore storages to ``cpu:N``. Under several CPU processes the HF Trainer resumes the
    optimizer with ``map_location=args.device`` = ``cpu:0``, which torch 2.x refuses ("don't know how to restore
    data location ... cpu:0"): a 2-process CPU ``--resume`` failed there. Registered once, for CPU only."""
    global _CPU_INDEX_REGISTERED
    if _CPU_INDEX_REGISTERED:
        return
    torch.serialization.register_package(
        11, lambda storage: None, lambda storage, location: storage if location.startswith("cpu:") else None)
    _CPU_INDEX_REGISTERED = True


class TwinrunGRPOTrainer(DecayEveryParameter, GRPOTrainer):
    def __init__(
        self,
        *args: Any,
        broker: SessionBroker,
        estimator: EstimatorConfig,
        updates_per_step: int,
        on_batch: Callable[[int, list[dict[str, Any]], dict[str, Any]], None] | None = None,
        max_unmeasured_share: float = 1.0,
        max_missing_turn_share: float = 1.0,
        keep_row_tokens: bool = False,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.keep_row_tokens = keep_row_tokens
        self.broker = broker
        self.estimator = estimator
        self.updates_per_step = updates_per_step
        self.on_batch = on_batch
        self.max_unmeasured_share = max_unmeasured_share
        self.max_missing_turn_share = max_missing_turn_share
        self.last_trl_advantages: torch.Tensor | None = None
        self._last_completions: list[list[dict[str, Any]]] | None = None
        self.last_core_advantages: torch.Tensor | None = None
        # (1) render core's schema of the one tool; TRL dispatches by the environment's method names
        self._env_tools = {name: [CURATE_TOOL] for name in self._env_tools}

    # -- TRL hooks -------------------------------------------------------------------------------------------
    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, *rest):  # type: ignore[override]
        # hand TRL's in-flight completions to the broker so the first curate call of each iteration can submit
        # every sample's turn concurrently (environment.py, "Concurrency")
        self.broker.environments = self.environments
        self.broker.live_completions = completions
        self._last_completions = completions
        try:
            return super()._tool_call_loop(prompts, prompt_ids, completion_ids, completions, *rest)
        finally:
            self.broker.live_completions = None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        step = self.state.global_step // self.updates_per_step  # 0-based training step being generated
        offset = self.accelerator.process_index * len(inputs)
        check_step(inputs, step)
        for i, row in enumerate(inputs):
            row["rollout_index"] = (offset + i) % self.num_generations
        self.broker.begin_batch(inputs)
        self._last_completions = None
        out = super()._generate_and_score_completions(inputs)
        t_rollout = time.perf_counter() - t0

        results: list[CurationResult] = [env._result for env in self.environments]  # finished by the reward
        local = [_payload(row, env) for row, env in zip(inputs, self.environments, strict=True)]
        everyone = gather_object(local)  # process order = TRL's gathered order
        self._check_groups(everyone)

        t1 = time.perf_counter()
        self.last_trl_advantages = out["advantages"].detach().clone()
        adv = self._core_advantages(everyone, out, offset, len(inputs))
        out["advantages"] = adv
        self.last_core_advantages = adv.detach().clone()
        t_adv = time.perf_counter() - t1

        for r, seq in zip(results, batch_sequences(out), strict=True):
            r.record.sequences = [seq]  # the tokens TRL trains on (rollouts.jsonl; `twinrun parity` replays them)
        records = gather_object([(r.record.model_dump(mode="json"), [e.model_dump(mode="json") for e in r.episodes])
                                 for r in results])
        rows = gather_object(self._row_records(step + 1, inputs, out))
        if self.on_batch is not None:
            stats = self.broker.stats
            self.on_batch(step + 1, records, {
                "wall_s": {"rollout": t_rollout, "advantages": t_adv, **stats.wall_s},
                "prefetched_calls": stats.prefetched_calls, "direct_calls": stats.direct_calls,
                "prefetch_mismatches": stats.prefetch_mismatches,
                "turns": gather_object([_turn_summary(c) for c in (self._last_completions or [])]),
                "advantages": gathered_advantages(self.last_trl_advantages, adv, self.estimator),
            }, rows=rows)
        # the step gates, on the records of every process, before the update (the run resumes from its last
        # checkpoint once the cause is fixed)
        check_health([r for r, _ in records], step + 1, self.max_unmeasured_share, self.max_missing_turn_share)
        return out

    def _row_records(self, step: int, inputs: list[dict[str, Any]], out: dict[str, Any]) -> list[dict[str, Any]]:
        """rows.jsonl lines: one accumulated row per local rollout, read from the tensors the loss will see."""
        pid, pmask = out["prompt_ids"].cpu(), out["prompt_mask"].cpu().bool()
        mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
        mask = mask.cpu().bool()
        adv = out["advantages"].detach().cpu()
        rows = []
        for i, (row, env) in enumerate(zip(inputs, self.environments, strict=True)):
            prompt = pid[i][pmask[i]].tolist()
            if adv.dim() == 1:
                scalar, segments = float(adv[i]), None
            else:  # GiGPO: one value per curator turn (run of loss-carrying tokens)
                scalar = None
                segments = [float(adv[i, s]) for s, _ in model_segments(mask[i:i + 1].numpy())[0]]
            first = env._session.positions[0].curator_input if env._session is not None else ""
            rec = TrainingRowRecord(
                backend="trl", step=step, context="accumulated", group_id=str(row["group_id"]),
                rollout_index=int(row["rollout_index"]), position=None, prompt_tokens=len(prompt),
                completion_tokens=int(mask[i].sum()), prompt_digest=ids_digest(prompt), advantage=scalar,
                segment_advantages=segments,
                prompt_ids=prompt if self.keep_row_tokens else None,
                completion_ids=out["completion_ids"][i].cpu().tolist() if self.keep_row_tokens else None,
                messages=position_messages(self.broker.runtime.curator_system_prompt, first)
                if self.keep_row_tokens else None,
            )
            rows.append(rec.model_dump(mode="json", exclude_none=True))
        return rows

    # -- advantages ------------------------------------------------------------------------------------------
    def _check_groups(self, rows: list[dict[str, Any]]) -> None:
        """TRL normalises over contiguous blocks of num_generations rows; the task groups must coincide."""
        n = self.num_generations
        for start in range(0, len(rows), n):
            ids = {r["group_id"] for r in rows[start:start + n]}
            if len(ids) != 1 or len(rows[start:start + n]) != n:
                raise TwinrunError(f"trl: rows {start}..{start + n - 1} hold task groups {sorted(ids)}, not one "
                                   "group of num_generations rollouts (fix: keep TRL's RepeatSampler layout)")

    def _core_advantages(self, rows: list[dict[str, Any]], out: dict[str, Any], offset: int, n_local: int) -> torch.Tensor:
        like = out["completion_ids"]
        device = like.device
        group_ids = [r["group_id"] for r in rows]
        totals = [r["total"] for r in rows]
        if self.estimator.estimator != "gigpo":
            valid = [r["valid"] for r in rows]
            adv = compute_advantages(self.estimator, totals, group_ids, valid=valid)
            return torch.tensor(adv[offset:offset + n_local], dtype=torch.float32, device=device)

        g = max(len(r["step_rewards"]) or len(r["anchors"]) for r in rows)
        flat_rows = [(b, p) for b, r in enumerate(rows) for p in range(1, len(r["anchors"]) + 1)]
        step_rewards = [
            (rows[b]["step_rewards"][p - 1] if rows[b]["total"] is not None else None) for b, p in flat_rows
        ]
        adv_rows = compute_advantages(
            self.estimator,
            [rows[b]["total"] for b, _ in flat_rows],
            [rows[b]["group_id"] for b, _ in flat_rows],
            traj_ids=[b for b, _ in flat_rows],
            step_index=[p for _, p in flat_rows],
            anchors=[rows[b]["anchors"][p - 1] for b, p in flat_rows],
            step_rewards=step_rewards,
            valid=[rows[b]["position_valid"][p - 1] for b, p in flat_rows],
        )
        per_position = np.zeros((len(rows), g))
        for (b, p), a in zip(flat_rows, adv_rows, strict=True):
            per_position[b, p - 1] = a
        mask = out["completion_mask"]
        if "tool_mask" in out:
            mask = mask * out["tool_mask"]
        spans = model_segments(mask.detach().cpu().numpy())
        positions = [
            segment_positions(len(spans[i]), rows[offset + i]["turns"], len(rows[offset + i]["anchors"]))
            for i in range(n_local)
        ]
        token_adv = spread_advantages(spans, positions, per_position[offset:offset + n_local], mask.shape[1])
        return torch.tensor(token_adv, dtype=torch.float32, device=device)


def batch_sequences(out: dict[str, Any]) -> list[SequenceTokens]:
    """The local rows of TRL's scored batch as token sequences: the prompt without its left padding, the
    completion without its right padding, and the loss mask TRL applies inside it (``completion_mask * tool_mask``:
    0 on tool results)."""
    prompt_ids, prompt_mask = out["prompt_ids"].tolist(), out["prompt_mask"].tolist()
    completion_ids, completion_mask = out["completion_ids"].tolist(), out["completion_mask"].tolist()
    tool_mask = out["tool_mask"].tolist() if "tool_mask" in out else None
    rows = []
    for i in range(len(prompt_ids)):
        prompt = [t for t, m in zip(prompt_ids[i], prompt_mask[i], strict=True) if m]
        n = int(sum(completion_mask[i]))
        loss = [int(t) for t in (tool_mask[i][:n] if tool_mask is not None else [1] * n)]
        rows.append(SequenceTokens(prompt_ids=prompt, completion_ids=completion_ids[i][:n], completion_mask=loss))
    return rows


def gathered_advantages(trl: torch.Tensor, core: torch.Tensor, estimator: EstimatorConfig) -> dict[str, Any]:
    """trl_log.jsonl's advantages of a batch, from every process: TRL's own and core's (the ones the loss sees) in
    gathered order, and core's per process (``core_by_process[rank]``: that rank's slice; per-token GiGPO: None)."""
    per_rollout = core.dim() == 1
    mine = core.tolist() if per_rollout else None
    by_process = gather_object([mine])
    return {"trl": gather_object(trl.tolist()) if trl.dim() == 1 else None,
            "core": [a for p in by_process for a in p] if per_rollout else None,
            "core_by_process": by_process if per_rollout else None, "estimator": estimator.knobs()}


def check_step(inputs: list[dict[str, Any]], step: int) -> None:
    """Every dataset row TRL handed over belongs to the training step being generated (0-based ``step``)."""
    for row in inputs:
        if int(row["step"]) != step:
            raise TwinrunError(
                f"trl: training step {step} was handed task group {row['group_id']} of step {row['step']} "
                "(the sampler order drifted; fix: shuffle_dataset=False and an unchanged dataset)"
            )


def check_health(records: list[dict[str, Any]], step: int, max_unmeasured_share: float,
                 max_missing_turn_share: float) -> None:
    """The step gates (core.step_health) on the step's rollouts.jsonl rows of every process, before the update."""
    check_step_health(StepCounts.from_records(records), step=step, max_unmeasured_share=max_unmeasured_share,
                      max_missing_turn_share=max_missing_turn_share)


def _turn_summary(messages: list[dict[str, Any]]) -> list[str]:
    """Per assistant message of one rollout: its tool calls, or the start of its text (trl_log diagnostics)."""
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        calls = [c.get("function", {}).get("name", "?") for c in m.get("tool_calls") or []]
        out.append("calls:" + ",".join(calls) if calls else "text:" + str(m.get("content", ""))[:160])
    return out


def _payload(row: dict[str, Any], env: Any) -> dict[str, Any]:
    """What every process needs to know about one rollout to compute the batch's advantages."""
    result: CurationResult = env._result
    rec = result.record
    env_turns = [(t.segment, t.position) for t in env._turns]
    return {
        "group_id": str(row["group_id"]),
        "rollout_index": int(row["rollout_index"]),
        "total": result.total,
        "step_rewards": list(result.step_rewards),
        "anchors": list(result.anchors),
        "position_valid": [not p.no_valid_call for p in rec.positions],
        # a rollout is valid (for algorithm.invalid_penalty) when every turn applied a valid operation
        "valid": all(not p.no_valid_call for p in rec.positions),
        "turns": env_turns,
    }
