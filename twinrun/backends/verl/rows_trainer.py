"""verl 0.9.1's sync v1 trainer, counting mini-batches in training rows, and recording the rows it trains.

Selected with ``trainer.v1.trainer_mode=twinrun_rows`` (verl's trainer registry; plugin.py registers it).

Why. verl sizes an actor mini-batch as ``ppo_mini_batch_size x rollout.n`` rows, i.e. it assumes one row per
rollout. With ``curator.context: per_position`` the agent loop returns |G| rows per rollout (one per position), so
that arithmetic would give |G| times more, smaller updates than the spec asks for, and the seq-mean loss
normaliser (``global_batch_size``) would count a |G|-th of the rows. This trainer multiplies both by
``trainer.twinrun_rows_per_rollout`` (|G| for per_position, 1 for accumulated) for the span of the update, and
nothing else: the update is verl's own.

It also writes ``rows.jsonl`` (core's :class:`~twinrun.core.advantages.training_rows.TrainingRowRecord`): every row the actor is
about to train, read back from the TransferQueue after the advantage step (prompt token digest, the tagged
(rollout, position), the advantage on its tokens: the first token's, and every loss token's run-length encoded in
``token_advantages``), so a test can hold the trained rows against core's records token by token.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import transfer_queue as tq
from omegaconf import open_dict, read_write
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from twinrun.backends.verl.names import MESSAGES_FIELD, ROW_TOKENS_KEY, ROWS_PER_ROLLOUT_KEY, RUN_DIR_KEY, TRAINER_MODE

TRAINER_NAME = TRAINER_MODE


class RowsTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` with mini-batches in rows (see the module docstring)."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any):
        # verl selects the trainer class by trainer.v1.trainer_mode (twinrun_rows) and then reads the same key as
        # its mode: "sync" is what this trainer is (the sync replay buffer, trainer.v1.sync settings)
        with read_write(config), open_dict(config):
            config.trainer.v1.trainer_mode = "sync"
        super().__init__(config, *args, **kwargs)

    @property
    def rows_per_rollout(self) -> int:
        return int(self.config.trainer.get(ROWS_PER_ROLLOUT_KEY, 1) or 1)

    @contextmanager
    def _mini_batch_in_rows(self) -> Iterator[None]:
        actor = self.config.actor_rollout_ref.actor
        prompts = actor.ppo_mini_batch_size
        with read_write(actor), open_dict(actor):
            actor.ppo_mini_batch_size = prompts * self.rows_per_rollout
        try:
            yield
        finally:
            with read_write(actor), open_dict(actor):
                actor.ppo_mini_batch_size = prompts

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        with self._mini_batch_in_rows():
            return super()._get_required_batch_multiple(dp_size)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        self._record_rows(batch)
        with self._mini_batch_in_rows():
            return super()._update_actor(batch, metrics)

    def _rollout_log_probs(self) -> bool:
        return bool(self.config.actor_rollout_ref.rollout.get("calculate_log_probs", False))

    # -- rows.jsonl
    def _record_rows(self, batch: Any) -> None:
        run_dir = self.config.trainer.get(RUN_DIR_KEY)
        if not run_dir:
            return
        from twinrun.backends.verl.estimators import decode_uid
        from twinrun.core.curation.context_shape import ids_digest
        from twinrun.core.records import JsonlWriter, RunPaths
        from twinrun.core.advantages.training_rows import TrainingRowRecord, token_runs

        keep = bool(self.config.trainer.get(ROW_TOKENS_KEY, False))
        # keep (tests): also each loss token's log-prob as the rollout engine returned it and as the actor recomputed
        # it before the update (verl's old_log_probs), so a test can hold the engine to the actor token by token
        logprob_fields = ["rollout_log_probs", "old_log_probs"] if keep and self._rollout_log_probs() else []
        fields = (["uid", "prompts", "responses", "response_mask", "advantages"]
                  + (["extra_fields", *logprob_fields] if keep else []))
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        extras = _as_list(data["extra_fields"]) if keep else [None] * len(batch.keys)
        logprobs = {f: data[f].unbind() for f in logprob_fields}
        uids = _as_list(data["uid"])
        prompts = data["prompts"].unbind()
        responses = data["responses"].unbind()
        masks = data["response_mask"].unbind()
        advantages = data["advantages"].unbind()
        per_position = self.rows_per_rollout > 1
        rows = []
        for i, tag in enumerate(batch.tags):
            if tag.get("is_padding", False):
                continue
            group, rtag = decode_uid(uids[i])
            mask = masks[i].bool()
            adv = advantages[i][mask].double()
            prompt = prompts[i].tolist()
            if per_position:
                scalar, segments = (float(adv[0]) if adv.numel() else 0.0), None
            else:
                scalar, segments = _scalar_or_segments(adv, mask)
            rec = TrainingRowRecord(
                backend="verl", step=int(self.global_steps), context="per_position" if per_position else "accumulated",
                group_id=rtag.group_id if rtag and rtag.group_id else group,
                rollout_index=rtag.rollout if rtag and rtag.rollout is not None else -1,
                position=rtag.position if rtag and per_position else None,
                prompt_tokens=len(prompt), completion_tokens=int(mask.sum()), prompt_digest=ids_digest(prompt),
                advantage=scalar, segment_advantages=segments, token_advantages=token_runs(adv.tolist()),
                prompt_ids=prompt if keep else None,
                completion_ids=responses[i].tolist() if keep else None,
                messages=(extras[i] or {}).get(MESSAGES_FIELD) if keep else None,
                extra={"uid": group, **{f: _loss_values(v[i], mask) for f, v in logprobs.items()}},
            )
            rows.append(rec.model_dump(mode="json", exclude_none=True))
        with JsonlWriter(RunPaths(Path(run_dir)).rows) as writer:
            writer.write_many(rows)


def _loss_values(values: Any, mask: Any) -> list[float]:
    """A response-aligned per-token tensor's values on the loss tokens."""
    values = values.double()
    if values.shape == mask.shape:
        return values[mask].tolist()
    return values[: int(mask.sum())].tolist()  # unpadded (a nested tensor's row): the response's own tokens


def _as_list(x: Any) -> list[Any]:
    """A TransferQueue non-tensor field as a list (NonTensorStack has tolist(); a lazily stacked one is iterable)."""
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _scalar_or_segments(adv: Any, mask: Any) -> tuple[float | None, list[float] | None]:
    """An accumulated row: one advantage on all its tokens, or (GiGPO) one per curator turn (run of mask 1)."""
    if adv.numel() == 0:
        return 0.0, None
    if bool((adv == adv[0]).all()):
        return float(adv[0]), None
    m = mask.int().tolist()
    values, taken, k = [], False, 0
    for bit in m:
        if bit:
            if not taken:
                values.append(float(adv[k]))
            taken = True
            k += 1
        else:
            taken = False
    return None, values


def register_rows_trainer() -> str:
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer

    current = TRAINER_REGISTRY.get(TRAINER_NAME)
    if current is not RowsTrainer:
        TRAINER_REGISTRY.pop(TRAINER_NAME, None)
        register_trainer(TRAINER_NAME)(RowsTrainer)
    return TRAINER_NAME
