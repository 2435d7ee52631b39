"""The curator agent loop with ``curator.context: per_position``: one verl row per (rollout, position).

verl 0.9.1's TransferQueue path (``AgentLoopWorkerTQ._agent_loop_postprocess``) accepts a *list* of
``AgentLoopOutput`` from an agent loop's ``run()`` and stores each as its own row, key ``{uid}_{session}_{i}``.
One curation rollout (a verl trajectory, session = rollout index) therefore returns |G| rows:

    core's walk_positions (core/curation/positions.py), verl supplying the turn:
    session.start()                                   (position 1 played)
    for p = 1..|G|:
        prompt  = core's messages for position p       (context_shape.session_messages: chi_p and a window of
                                                        curator.history earlier (input, turn) pairs)
        ids     = the tokenizer's chat template + the `curate` tool (context_shape.prompt_token_ids: the
                  tokens TRL's rollout_func renders for the same messages)
        turn    = one generation, capped at curator.max_response_tokens
        session.submit(turn)                          (core applies the ops and plays position p+1)
    session.finish()

Row p: prompt = ids, response = the turn's tokens (all in the loss), reward = the rollout's composite reward, and
a tag in the uid carrying (task group, rollout, position) plus the rollout's step rewards, anchors and validity,
from which the estimator gives the row core's advantage (estimators.position_rows). The worker writes each row's
tag into its stored uid (loop_manager.py).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer

from twinrun.backends.verl.estimators import RolloutTag, encode_uid
from twinrun.backends.verl.loop_manager import TAG_FIELD
from twinrun.backends.verl.names import MESSAGES_FIELD, ROW_TOKENS_KEY
from twinrun.core.curation.positions import position_prompt, walk_positions
from twinrun.core.records import SequenceTokens


async def run_per_position(agent: Any, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> list[AgentLoopOutput]:
    """``agent``: the :class:`~twinrun.backends.verl.agent_loop.CuratorAgentLoop` (its ctx, tokenizer, server)."""
    ctx = agent.ctx
    rollout = int(kwargs.get("session_id", 0))
    session = ctx.open_session(kwargs, rollout=rollout)
    tools = [ctx.tool_schema]
    keep = bool(agent.config.trainer.get(ROW_TOKENS_KEY, False))
    running = asyncio.get_running_loop()
    metrics: dict[str, float] = {}

    def render() -> tuple[list[dict[str, str]], list[int]]:
        return position_prompt(session, agent.tokenizer, ctx.system_prompt, history=ctx.spec.curator.history,
                               tools=tools, limit=ctx.spec.curator.max_prompt_tokens)

    turns: list[tuple[list[dict[str, str]], list[int], list[int], list[float] | None]] = []
    versions: list[int] = []

    async def turn(p: int) -> str:
        """verl's hook into core's position walk: one generation at position p, capped at the turn's tokens."""
        messages, ids = await running.run_in_executor(None, render)
        params = dict(sampling_params)
        params["max_tokens"] = ctx.max_turn_tokens
        with simple_timer("generate_sequences", metrics):
            out = await agent.server_manager.generate(request_id=uuid4().hex, prompt_ids=ids, sampling_params=params)
        for key in ("min_global_steps", "max_global_steps"):
            if out.extra_fields.get(key) is not None:
                versions.append(int(out.extra_fields[key]))
        response = list(out.token_ids)[: ctx.max_turn_tokens]
        logprobs = list(out.log_probs)[: len(response)] if out.log_probs else None
        turns.append((messages, ids, response, logprobs))
        return agent.tokenizer.decode(out.token_ids, skip_special_tokens=True)

    result = await walk_positions(session, turn, timed=lambda: simple_timer("tool_calls", metrics))
    # the tokens verl trains on, one sequence per position (rollouts.jsonl; `twinrun parity` replays them)
    summary = ctx.summarize(result, sequences=[
        SequenceTokens(prompt_ids=list(ids), completion_ids=list(response), completion_mask=[1] * len(response))
        for _, ids, response, _ in turns])

    reward = summary.total if summary.measured else 0.0
    if not math.isfinite(reward):
        raise ValueError(f"twinrun_curator: reward {reward!r} is not finite (fix: core must return a float)")
    step = int(kwargs.get("global_steps", -1))
    lo, hi = (min(versions), max(versions)) if versions else (max(step - 1, 0), max(step - 1, 0))
    outputs = []
    for p, (messages, ids, response, logprobs) in enumerate(turns, start=1):
        tag = RolloutTag(measured=summary.measured, step_rewards=summary.step_rewards, anchors=summary.anchors,
                         valid=summary.valid, episodes=summary.executor_episodes,
                         unmeasured=summary.unmeasured_episodes, turns_missing=summary.turns_missing,
                         segments=[[p]],
                         group_id=session.group.group_id, rollout=rollout, position=p)
        extra: dict[str, Any] = {
            "min_global_steps": lo,
            "max_global_steps": hi,
            "reward_extra_info": summary.reward_terms,
            TAG_FIELD: encode_uid(str(kwargs["uid"]), tag),
        }
        if keep:
            extra[MESSAGES_FIELD] = messages
        outputs.append(AgentLoopOutput(
            prompt_ids=ids,
            response_ids=response,
            response_mask=[1] * len(response),
            response_logprobs=logprobs,
            reward_score=float(reward),
            num_turns=2,
            metrics=AgentLoopMetrics(**{k: v for k, v in metrics.items() if k in AgentLoopMetrics.model_fields}),
            extra_fields=extra,
        ))
    return outputs
