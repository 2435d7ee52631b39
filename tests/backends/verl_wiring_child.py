"""Child process of test_verl_wiring.py: verl 0.9.1's real worker (``ActorRolloutRefWorker``, role
``actor_rollout``, built by its own ``init_model`` from the config `compile.py` composes for the spec) in a
one-process gloo world, as `replay.py`'s child runs it. Per mode of the job it makes the calls verl's v1 trainer
makes in ``_step_once`` (``verl/trainer/ppo/v1/trainer_base.py``) on two tagged rows:

1. ``_compute_advantage``: verl's ``compute_advantage_for_multi_trajectories`` with the compiled
   ``algorithm.adv_estimator`` (the registered ``twinrun_*`` estimator, which reads the rows' uid tags), its
   ``advantages`` written back as nested tensors;
2. ``_compute_old_log_prob``: ``compute_log_prob``;
3. ``_update_actor``: ``update_actor`` with the trainer's extra_info.

Mode ``zero`` replaces core's ``compute_advantages`` with a test estimator that returns zeros; mode ``core`` uses
core's. The weights before and after each update, the ``advantages`` tensor verl's policy-loss function received
(observed by a wrapper that then calls verl's function unchanged) and verl's own GRPO advantages for the same batch
go to the result file.

``sync``: after the updates, verl's weight sync (``ActorRolloutRefWorker.update_weights``, backend ``naive``:
``engine.get_per_tensor_param`` -> twinrun's ``HFServerAdapter.update_weights`` -> ``HFGenerationServer``) into a
transformers rollout server that still holds the starting weights; the server's sampled tokens' log-probs are then
held against the actor's ``compute_log_prob`` on the same tokens, before and after the sync. The one stand-in: the
Ray actor handle the adapter would look up by name is a local object that forwards ``update_weights.remote`` to an
``HFGenerationServer`` in this process (no Ray cluster in a cheap test); the server, the adapter and verl's worker
are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any


def _observe_policy_loss(seen: list[Any]) -> None:
    import verl.workers.utils.losses as losses

    original = losses.get_policy_loss_fn

    def get_policy_loss_fn(name: str) -> Any:
        fn = original(name)

        def observed(old_log_prob: Any, log_prob: Any, advantages: Any, response_mask: Any, *a: Any, **kw: Any):
            seen.append({"advantages": advantages.detach().float().cpu().tolist(),
                         "response_mask": response_mask.detach().int().cpu().tolist()})
            return fn(old_log_prob, log_prob, advantages, response_mask, *a, **kw)

        return observed

    losses.get_policy_loss_fn = get_policy_loss_fn


class _LocalHandle:
    """Stand-in for the Ray actor handle of the rollout server (``ray.get_actor(server_name(rank))``): the same
    method, called in this process."""

    def __init__(self, server: Any):
        self.server = server
        self.update_weights = self

    def remote(self, *args: Any) -> Any:
        async def call() -> Any:
            return self.server.update_weights(*args)

        return call()


def main(job_path: str) -> None:
    import numpy as np
    import torch

    import verl  # noqa: F401  (the verl.plugins entry point registers the CPU platform and fixes)
    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.plugin import register_all

    register_all()
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import response_from_nested, response_to_nested

    import twinrun.core.advantages as core_adv
    from twinrun.backends.verl.replay import _batch

    job = json.loads(Path(job_path).read_text(encoding="utf-8"))
    cfg = vconfig.compose(job["overrides"])
    vconfig.validate(cfg)
    arr = cfg.actor_rollout_ref
    seen: list[Any] = []
    _observe_policy_loss(seen)
    worker = ActorRolloutRefWorker(config=arr, role="actor_rollout")
    worker.init_model()
    temperature = float(arr.rollout.temperature)
    rows = job["rows"]

    def weights() -> dict[str, torch.Tensor]:
        gen, _ = worker.actor.engine.get_per_tensor_param()
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone() for k, v in gen}

    def advantages(td: Any, estimator: str) -> torch.Tensor:
        """trainer_base._compute_advantage: verl's function on the padded batch, written back nested."""
        mask = td["response_mask"].to_padded_tensor(0)
        scores = torch.zeros(mask.shape, dtype=torch.float32)
        for i, r in enumerate(rows):
            scores[i, int(mask[i].nonzero().max())] = float(r["score"])
        data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_scores": scores,
                                            "token_level_rewards": scores},
                                   non_tensors={"uid": np.array([r["uid"] for r in rows], dtype=object)})
        keys = [f"{r['uid'].split('|')[0]}_{i}_0" for i, r in enumerate(rows)]
        data = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator=estimator, gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam,
            num_repeat=int(arr.rollout.n), norm_adv_by_std_in_grpo=cfg.algorithm.get("norm_adv_by_std_in_grpo", True),
            config=cfg.algorithm)
        return data.batch["advantages"]

    def step(mode: str) -> dict[str, Any]:
        td = _batch(rows, temperature)
        core = core_adv.compute_advantages
        if mode == "zero":  # the test estimator: every advantage 0
            core_adv.compute_advantages = lambda *a, **k: np.zeros_like(core(*a, **k))
        try:
            adv = advantages(td, cfg.algorithm.adv_estimator)
        finally:
            core_adv.compute_advantages = core
        verl_grpo = advantages(td, "grpo")  # verl's own advantages for the same rows
        td["advantages"] = response_to_nested(adv, td["response_mask"])
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
        lp = worker.compute_log_prob(td)
        td["old_log_probs"] = response_from_nested(lp["log_probs"], td["response_mask"])
        mini = int(arr.actor.ppo_mini_batch_size) * int(arr.rollout.n)
        tu.assign_non_tensor(
            td, calculate_entropy=False, distillation_use_topk=False, distillation_only=False,
            global_batch_size=mini, mini_batch_size=mini, epochs=int(arr.actor.ppo_epochs),
            seed=int(arr.actor.data_loader_seed), dataloader_kwargs={"shuffle": bool(arr.actor.shuffle)},
            temperature=temperature)
        before = weights()
        seen.clear()
        worker.update_actor(td)
        after = weights()
        return {"advantages": adv.tolist(), "verl_grpo": verl_grpo.tolist(), "loss_inputs": list(seen),
                "max_abs_change": max(float((after[k] - before[k]).abs().max()) for k in before)}

    result: dict[str, Any] = {"estimator": cfg.algorithm.adv_estimator}
    for mode in job["modes"]:
        result[mode] = step(mode)

    if job.get("sync"):
        from twinrun.backends.verl.hf_rollout import HFGenerationServer

        server = HFGenerationServer(str(arr.model.path), prompt_length=int(arr.rollout.prompt_length),
                                    response_length=int(arr.rollout.response_length), seed=0)
        worker.rollout._server = _LocalHandle(server)
        prompt = rows[0]["prompt_ids"]

        def gap() -> float:
            out = asyncio.run(server.generate(prompt, {"temperature": temperature, "logprobs": True,
                                                       "max_tokens": 8}, "r"))
            row = {"prompt_ids": prompt, "completion_ids": out.token_ids, "completion_mask": [1] * len(out.token_ids)}
            # a second row of other lengths keeps verl's fields nested (equal lengths are stacked as plain tensors)
            other = {"prompt_ids": prompt[2:], "completion_ids": out.token_ids + [0],
                     "completion_mask": [1] * (len(out.token_ids) + 1)}
            td = _batch([row, other], temperature)
            tu.assign_non_tensor(td, calculate_entropy=False, compute_loss=False)
            actor = response_from_nested(worker.compute_log_prob(td)["log_probs"], td["response_mask"])[0]
            return float((actor.double() - torch.tensor(out.log_probs, dtype=torch.float64)).abs().max())

        result["sync"] = {"before": gap()}
        asyncio.run(worker.update_weights(global_steps=1))
        result["sync"].update(after=gap(), global_steps=server.get_global_steps())

    Path(job["out"]).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main(sys.argv[1])
