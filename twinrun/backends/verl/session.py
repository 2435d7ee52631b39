"""Per-process glue between verl's agent loop and core's curation runtime.

verl instantiates a new agent loop object for every trajectory, so whatever must be shared by all trajectories
of a process lives here, built once per (spec, run dir) and cached on the class: core's `CurationRuntime` (the
environment pool, the executor whose concurrency bound covers a whole step, the first-position cache of
``share_first_position``) and the append-only record writers. The cache is per process and keyed explicitly;
nothing is read from the environment except what core's runtime is handed (ALFWORLD_DATA, the endpoint key).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from twinrun.core.records import JsonlWriter, RunPaths


@dataclass
class RolloutSummary:
    """What the agent loop hands verl for one finished curation rollout."""

    measured: bool
    total: float
    step_rewards: list[float]
    anchors: list[str]
    valid: list[bool]
    reward_terms: dict[str, float | None]
    executor_episodes: int
    unmeasured_episodes: int
    turns_missing: int = 0


class CurationContext:
    """Everything one process needs to run curation sessions for one training run."""

    _instances: ClassVar[dict[tuple[str, str], CurationContext]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, spec_path: str, run_dir: str, spec_dir: str | None, tokenizer: Any):
        from twinrun.core.curation import CurationRuntime
        from twinrun.core.records import provenance
        from twinrun.core.rewards.composite import token_counter
        from twinrun.core.spec import load_spec
        from twinrun.core.curation.toolcalls import CURATE, CURATE_TOOL
        from twinrun.models.warmstart import final_tool_result

        self.spec = load_spec(spec_path)
        if spec_dir:  # the run's spec.yaml is a copy: prompt paths stay relative to the original spec's folder
            self.spec._source_dir = str(spec_dir)
        self.paths = RunPaths(Path(run_dir))
        prov = provenance(spec_hash=self.spec.spec_hash(), run_id=self.paths.root.name, backend="verl",
                          framework_version=_verl_version(), seed=self.spec.seed)
        self.runtime = CurationRuntime.from_spec(
            self.spec, environ=dict(os.environ), count_tokens=token_counter(tokenizer), provenance=prov,
        )
        self.runtime.provenance = prov.model_copy(update={"executor_settings_hash": self.runtime.executor.settings_hash})
        self.tool_schema = CURATE_TOOL
        self.tool_name = CURATE
        self.final_result = final_tool_result(self.spec.environment.group_size)
        self.max_iterations = self.spec.environment.group_size
        self.system_prompt = self.runtime.curator_system_prompt
        self.max_turn_tokens = self.spec.curator.max_response_tokens
        self.rollouts = JsonlWriter(self.paths.rollouts)
        self.episodes = JsonlWriter(self.paths.episodes)

    @classmethod
    def get(cls, spec_path: str, run_dir: str, *, spec_dir: str | None = None, tokenizer: Any) -> CurationContext:
        key = (str(Path(spec_path).resolve()), str(Path(run_dir).resolve()))
        with cls._lock:
            ctx = cls._instances.get(key)
            if ctx is None:
                ctx = cls._instances[key] = cls(spec_path, run_dir, spec_dir, tokenizer)
            return ctx

    # --- sessions
    def open_session(self, row: dict[str, Any], *, rollout: int) -> Any:
        """A core session for the dataset row's task group (column ``twinrun_group``: TaskGroup.to_row() JSON)."""
        raw = row.get("twinrun_group")
        if raw is None:
            raise ValueError("twinrun_curator: the dataset row has no 'twinrun_group' (fix: build data with train.py)")
        group = json.loads(raw) if isinstance(raw, str) else dict(raw)
        return self.runtime.session(group, rollout)

    # --- the tool surface (TRL 1.16's tool loop, restated; see agent_loop.py)
    @staticmethod
    def tool_calls(text: str) -> list[Any]:
        """The turn's tool calls as TRL's tool loop would execute them: none when the turn has no
        ``<tool_call>`` block, and none when any block is malformed (TRL's `parse_response` then falls back to
        plain text for the whole turn)."""
        from twinrun.core.curation.toolcalls import parse_tool_calls

        calls = parse_tool_calls(text)
        if any(c.error or not isinstance(c.name, str) or not isinstance(c.arguments, dict) for c in calls):
            return []
        return calls

    async def dispatch(self, session: Any, calls: list[Any]) -> tuple[list[dict[str, Any]], list[int]]:
        """Execute the calls in order as TRL does (one ``curate`` call = one position). Returns the tool messages
        and the position (1..|G|+1) each ``curate`` call reached."""
        out, reached = [], []
        for call in calls:
            if call.name == self.tool_name:
                reached.append(session.position)
                nxt = await session.asubmit([{"name": call.name, "arguments": call.arguments}])
                content = self.final_result if nxt is None else nxt
            else:
                content = str({"error": f"Tool {call.name} not found."})
            out.append({"role": "tool", "name": call.name, "content": content})
        return out, reached

    @staticmethod
    def assistant_message(text: str, calls: list[Any]) -> dict[str, Any]:
        """The assistant message of a curator turn as TRL's parser gives it (content + tool calls). Only used to
        render the *next* tool messages' tokens; the turn's own tokens are the sampled ones."""
        visible = text.split("<tool_call>", 1)[0].strip()
        return {"role": "assistant", "content": visible,
                "tool_calls": [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                               for c in calls]}

    # --- results
    def summarize(self, result: Any, sequences: list[Any] | None = None) -> RolloutSummary:
        """Record the rollout (rollouts.jsonl, episodes.jsonl; ``sequences``: the tokens verl trains on, as
        records.SequenceTokens) and reduce it to what verl and the estimator need."""
        if sequences is not None:
            result.record.sequences = list(sequences)
        result.write(episodes=self.episodes, rollouts=self.rollouts)
        rec = result.record
        positions = rec.positions
        measured = result.total is not None
        step_rewards = [float(x) for x in result.step_rewards] if measured else [0.0] * len(positions)
        return RolloutSummary(
            measured=measured,
            total=float(result.total) if measured else 0.0,
            step_rewards=step_rewards,
            anchors=list(result.anchors),
            valid=[not p.no_valid_call for p in positions],
            reward_terms={k: v for k, v in result.reward.terms().items()},
            executor_episodes=rec.executor_episodes,
            unmeasured_episodes=rec.unmeasured_episodes,
            turns_missing=rec.turns_missing,
        )


def _verl_version() -> str | None:
    try:
        import verl

        return verl.__version__
    except Exception:  # noqa: BLE001 - provenance only
        return None
