"""verl's TransferQueue agent-loop manager with one addition: each row's tag reaches the estimator.

An agent loop may return one row (accumulated) or a list of rows, one per position (per_position): each row's
tag, popped from its own ``extra_fields``, is written into that row's stored uid.

verl stores each trajectory's fields in its TransferQueue with ``uid`` = the prompt's uid (the agent loop cannot
change it: the worker copies the prompt's fields over the loop's output). A registered estimator receives only
that uid (estimators.py), so after verl has stored a curation rollout, this worker rewrites the stored ``uid``
field of that one row to ``"<uid>|<tag>"``. The TransferQueue *keys* (``{uid}_{session}_{index}``), which the
replay buffer uses to track the prompt group, are untouched, and the rewrite completes before verl marks the
prompt group finished, so the trainer never samples a row before it is tagged.

Selected with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (verl's documented hook for a custom
manager); everything else is verl's `AgentLoopManagerTQ` / `AgentLoopWorkerTQ` as shipped.
"""

from __future__ import annotations

from typing import Any

import ray
import transfer_queue as tq
from tensordict import NonTensorStack, TensorDict
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

TAG_FIELD = "twinrun_uid"  # AgentLoopOutput.extra_fields key holding the tagged uid (set by the agent loop)


def _worker_class() -> type:
    """The worker subclass, built per call on purpose: verl's base class is only reachable through its Ray actor
    wrapper (`__ray_actor_class__`), which cloudpickle cannot import by name and ships by value; a subclass that
    is *importable* by name would be re-imported in the worker against a different copy of that base, and the
    base's zero-argument ``super()`` then fails (``TypeError: super(type, obj): obj must be an instance or subtype
    of type``). A local class travels by value together with its base."""
    base = AgentLoopWorkerTQ.__ray_actor_class__

    class CuratorAgentLoopWorker(base):  # type: ignore[misc, valid-type]
        async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> None:
            outputs = output if isinstance(output, list) else [output]
            tags = [o.extra_fields.pop(TAG_FIELD, None) for o in outputs]
            await super()._agent_loop_postprocess(output, validate, **kwargs)
            if validate or all(t is None for t in tags):
                return
            if any(t is None for t in tags):  # per_position rows are tagged one by one; one row per rollout
                tags = [t if t is not None else tags[-1] for t in tags]  # (accumulated) carries its tag last
            keys = [f"{kwargs['uid']}_{kwargs['session_id']}_{i}" for i in range(len(outputs))]
            fields = TensorDict({"uid": NonTensorStack(*tags)}, batch_size=[len(keys)])
            await tq.async_kv_batch_put(keys=keys, fields=fields, partition_id="train")

    return CuratorAgentLoopWorker


class CuratorAgentLoopManager(AgentLoopManagerTQ):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(_worker_class())
