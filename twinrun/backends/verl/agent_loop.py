"""The curator agent loop: one verl trajectory = one curation rollout over a task group (Algorithm 1).

This docstring describes ``curator.context: accumulated`` (one sequence per rollout); with ``per_position`` the
loop returns one row per position instead (position_loop.py).

Registered in verl's agent-loop registry as ``twinrun_curator`` (plugin.py). For each dataset row (a task group)
verl runs ``rollout.n`` of these; each drives one core curation session turn by turn:

    chi_1 = session.start()                      -> system prompt + user(chi_1) + the `curate` tool  = prompt
    repeat: curator turn <- verl's server manager (tokens, response_mask 1)
            no well-formed tool call in the turn -> stop (TRL's tool loop stops there too)
            each `curate` call: chi_{i+1} = session.submit(call)   (core applies the ops, plays the next
                                position; after the last one the tool result is TRL's closing note)
            any other tool name: an error result, nothing submitted (TRL: "Tool X not found.")
            tool messages                        -> observation tokens, response_mask 0 (out of the loss)
            at most |G| tool-calling rounds (TRL's max_tool_calling_iterations), then one last turn
    result = session.finish()                    -> plays positions the curator never reached, with no ops

The reward breakdown is attached (``reward_score`` = total, so verl's reward workers are skipped), per-position
step rewards and anchors go to the estimator through the uid tag (estimators.py / loop_manager.py), and core's
records are appended to the run's ``rollouts.jsonl`` / ``episodes.jsonl``.

The tool surface is TRL's: the same chat template, the same single `curate` tool schema (core's
``CURATE_TOOL``), tool results rendered as ``role: tool`` messages. Length rules follow TRL's tool loop too: the
whole multi-turn completion (tool results included) is capped by ``rollout.response_length``
(= spec.curator.max_completion_tokens); a tool result that would overflow it is dropped and the loop stops.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.utils.profiler import simple_timer

from twinrun.backends.verl.estimators import RolloutTag, encode_uid
from twinrun.backends.verl.loop_manager import TAG_FIELD
from twinrun.backends.verl.session import CurationContext
from twinrun.core.curation.policy_input import segment_positions  # which positions a curator turn's tokens stand for
from twinrun.core.records import SequenceTokens

logger = logging.getLogger(__name__)


class CuratorAgentLoop(AgentLoopBase):
    """verl `AgentLoopBase` driving a core curation session (see the module docstring)."""

    def __init__(self, *args: Any, spec_path: str | None = None, spec_dir: str | None = None,
                 run_dir: str | None = None, **kwargs: Any):
        kwargs.pop("tools", None)  # verl's own tool registry is not used: the only tool is core's `curate`
        super().__init__(*args, **kwargs)
        if spec_path is None or run_dir is None:
            raise ValueError(
                "twinrun_curator: spec_path and run_dir are required (fix: train.py writes them into "
                "actor_rollout_ref.rollout.agent.agent_loop_config_path)"
            )
        self.ctx = CurationContext.get(spec_path, run_dir, spec_dir=spec_dir, tokenizer=self.tokenizer)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        if self.ctx.spec.curator.context == "per_position":  # one row per position (position_loop.py)
            from twinrun.backends.verl.position_loop import run_per_position

            return await run_per_position(self, sampling_params, kwargs)
        return await self._run_accumulated(sampling_params, **kwargs)

    async def _run_accumulated(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        ctx = self.ctx
        step = int(kwargs.get("global_steps", -1))
        session = ctx.open_session(kwargs, rollout=int(kwargs.get("session_id", 0)))
        metrics: dict[str, float] = {}
        tools = [ctx.tool_schema]

        with simple_timer("tool_calls", metrics):
            first = await session.astart()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": ctx.system_prompt},
            {"role": "user", "content": first},
        ]
        ids = await self.ct_build_initial_tokens(messages, tools=tools)
        mask: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []
        turns = 0
        request_id = uuid4().hex

        iterations = 0  # tool-calling rounds (TRL: max_tool_calling_iterations = |G|)
        turn_log: list[tuple[int, int]] = []  # (turn index, position its curate call reached), as TRL's broker logs
        while True:
            budget = self.response_length - len(mask)
            if budget <= 0:
                break
            params = dict(sampling_params)
            params["max_tokens"] = min(ctx.max_turn_tokens, budget)
            with simple_timer("generate_sequences", metrics):
                out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=params)
            for key in ("min_global_steps", "max_global_steps"):
                if out.extra_fields.get(key) is not None:
                    versions.append(int(out.extra_fields[key]))
            merged, mask, merged_lp = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs if (logprobs or out.log_probs) else None,
                assistant_logprobs=out.log_probs or None,
            )
            ids = merged.token_ids
            if merged_lp is not None:
                logprobs = merged_lp
            turns += 1
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            calls = ctx.tool_calls(text)
            if not calls or iterations >= ctx.max_iterations or len(mask) >= self.response_length:
                break
            with simple_timer("tool_calls", metrics):
                results, reached = await ctx.dispatch(session, calls)
            turn_log.extend((turns - 1, p) for p in reached)
            iterations += 1
            # the turn's tokens are already in `ids` (merged above): the snapshot includes its message, so the merge
            # renders only the tool results (as verl's ToolAgentLoop and TRL's suffix ids do; DIVERGENCES B20)
            messages.append(ctx.assistant_message(text, calls))
            previous = list(messages)
            messages.extend(results)
            merged, new_mask, new_lp = await self.ct_merge_context_msg(
                previous, messages, ids, mask, logprobs if logprobs else None, tools=tools
            )
            if len(new_mask) >= self.response_length:
                break  # as TRL: tool results that do not fit end the completion (the calls were applied)
            ids, mask = merged.token_ids, new_mask
            if logprobs:
                logprobs = new_lp or []

        with simple_timer("tool_calls", metrics):
            result = await session.afinish()
        # as verl's ToolAgentLoop: the response is the tail the mask covers (boundary edits stay in the prompt)
        prompt_ids, response = ids[: len(ids) - len(mask)], ids[len(ids) - len(mask):]
        response, mask = response[: self.response_length], mask[: self.response_length]
        summary = ctx.summarize(result, sequences=[SequenceTokens(
            prompt_ids=list(prompt_ids), completion_ids=list(response), completion_mask=list(mask))])
        if versions:
            lo, hi = min(versions), max(versions)
        else:  # no generation happened (cannot occur with a positive budget); keep verl's ints valid
            lo = hi = max(step - 1, 0)
        tag = RolloutTag(measured=summary.measured, step_rewards=summary.step_rewards, anchors=summary.anchors,
                         valid=summary.valid, episodes=summary.executor_episodes,
                         unmeasured=summary.unmeasured_episodes, turns_missing=summary.turns_missing,
                         segments=segment_positions(turns, turn_log, len(summary.anchors)),
                         group_id=session.group.group_id, rollout=int(kwargs.get("session_id", 0)))
        reward = summary.total if summary.measured else 0.0
        if not math.isfinite(reward):
            raise ValueError(f"twinrun_curator: reward {reward!r} is not finite (fix: core must return a float)")
        extra = {
            "min_global_steps": lo,
            "max_global_steps": hi,
            "reward_extra_info": summary.reward_terms,
            TAG_FIELD: encode_uid(str(kwargs["uid"]), tag),
        }
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response,
            response_mask=mask,
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=float(reward),
            num_turns=2 * turns + 1,
            metrics=AgentLoopMetrics(**{k: v for k, v in metrics.items() if k in AgentLoopMetrics.model_fields}),
            extra_fields=extra,
        )
