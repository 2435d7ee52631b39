"""The correctness signal the curator reads at each position (``curation.correctness``).

The paper's curator observes "the self-judged correctness 1_{xi_t}": an LLM judge on the executor backbone
(SkillOS Fig. 13), never the environment's win/loss. ``judged`` asks that judge; ``ground_truth`` shows the
environment's outcome (twinrun's earlier behaviour: test labels then reach the streaming repo, DIVERGENCES A9).

* :class:`OpenAICorrectnessJudge`: the executor's OpenAI-compatible endpoint and model, with its own prompt file
  (``prompts.correctness_judge``), answering ``{"SUCCESS": true|false, "reason": "..."}``.
* :class:`RulesCorrectnessJudge`: the CPU stand-in (smoke arm, scripted executor): "success" when the episode
  ended before the executor's turn budget (ALFWorld ends an episode early only when the task is done), flipped on a
  stated, seeded share of episodes (``executor.self_judge_error``) so that, as with an LLM self-judge, what the
  curator reads is not always the environment's label.

A verdict is "success", "failure" or "unknown" (the endpoint failed after its retries, or its answer had no
parsable verdict): unknown is shown to the curator as unknown, never as success or failure. An unmeasured episode
(the executor itself failed) is "unmeasured" and is not judged. Records keep the judged signal beside the ground
truth (``PositionRecord.correctness`` / ``outcome``); ``judge_agreement`` in metrics.jsonl compares them.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from twinrun.core.rewards.judges import JudgeError, JudgeRequest, OpenAIJudge, Verdict, VerdictCache, parse_judge_answer

Correctness = Literal["success", "failure", "unknown", "unmeasured"]


def parse_correctness(text: str) -> tuple[bool | None, str]:
    """(task completed?, reason) from a self-judge answer: the last JSON object with a ``SUCCESS`` key (true/false,
    "yes"/"no"), after dropping ``<think>`` blocks; failing that, a last line that is exactly SUCCESS or FAILURE.
    None when nothing parses."""
    return parse_judge_answer(text, "success", "SUCCESS", "FAILURE")


def _label(valid: bool | None) -> Correctness:
    return "unknown" if valid is None else ("success" if valid else "failure")


class OpenAICorrectnessJudge(OpenAIJudge):
    """Did the executor complete its task? Asked of an OpenAI-compatible endpoint (the executor's, in the paper).

    The prompt file is a template with ``{{task}}`` and ``{{trajectory}}`` (one user message); without
    placeholders it is the system message and the task and trajectory are the user message. Retries, backoff and
    the verdict cache are :class:`~twinrun.core.rewards.judges.OpenAIJudge`'s."""

    name = "openai-correctness"

    def messages(self, request: JudgeRequest) -> list[dict[str, str]]:
        if "{{task}}" in self.prompt or "{{trajectory}}" in self.prompt:
            text = self.prompt.replace("{{task}}", request.task).replace("{{trajectory}}", request.trajectory)
            return [{"role": "user", "content": text}]
        user = f"## Task Description\n{request.task}\n\n## Agent Trajectory\n{request.trajectory}"
        return [{"role": "system", "content": self.prompt}, {"role": "user", "content": user}]

    def cache_key(self, request: JudgeRequest) -> str:
        return "correctness-" + super().cache_key(request)

    _NO_VERDICT = "unknown"  # shown to the curator as Unknown, never as success or failure
    _ENDPOINT = "correctness endpoint"
    _parse = staticmethod(parse_correctness)

    async def acorrect(self, task: str, trajectory: str, episode: Any = None) -> Correctness:
        return _label((await self.ajudge(JudgeRequest(skill=None, task=task, trajectory=trajectory))).valid)  # type: ignore[arg-type]


class RulesCorrectnessJudge:
    """CPU stand-in for the self-judge: "success" when the episode ended before ``max_turns`` executor turns, else
    "failure"; then the verdict is flipped when ``u < error``, where ``u`` in [0, 1) is the first 8 bytes of
    sha256(seed, task, trajectory) read as a fraction. So a share ``error`` of distinct episodes is judged wrong, the
    same episode always gets the same verdict (in every process and backend: the shared position 1 included), and
    ``error: 0`` is the plain rule."""

    name = "rules-correctness"

    def __init__(self, max_turns: int, *, error: float = 0.0, seed: int = 0):
        if not 0.0 <= error <= 0.5:
            raise JudgeError(f"executor.self_judge_error: {error} is outside [0, 0.5] (fix: a share of wrong verdicts "
                             "below a coin's)")
        self.max_turns = max_turns
        self.error = error
        self.seed = seed

    def wrong(self, task: str, trajectory: str) -> bool:
        """Whether this episode's verdict is flipped (the seeded rule of the class docstring)."""
        if not self.error:
            return False
        h = hashlib.sha256(f"{self.seed}\x00{task}\x00{trajectory}".encode("utf-8", "surrogatepass")).digest()
        return int.from_bytes(h[:8], "big") / 2.0**64 < self.error

    async def acorrect(self, task: str, trajectory: str, episode: Any = None) -> Correctness:
        steps = getattr(getattr(episode, "record", None), "steps", None)
        if steps is None:
            return "unknown"
        done = steps < self.max_turns
        return "success" if done != self.wrong(task, trajectory) else "failure"


def correctness_judge_for(spec: Any, setting: str, *, api_key: str | None = None,
                          environ: Any = None) -> Any:
    """The judge behind ``setting`` (``curation.correctness`` or its sweep override): None for ground_truth; the
    executor endpoint for an openai executor; the rules stand-in for the scripted executor."""
    if setting == "ground_truth":
        return None
    ex = spec.executor
    if ex.kind == "scripted":
        return RulesCorrectnessJudge(ex.max_turns, error=ex.self_judge_error, seed=spec.seed)
    if ex.kind != "openai":
        raise JudgeError(f"curation.correctness: judged with executor.kind={ex.kind!r} has no endpoint to ask "
                         "(fix: an openai executor, or curation.correctness: ground_truth)")
    import os

    return OpenAICorrectnessJudge(
        base_url=ex.base_url or "", model=ex.model or "", prompt=spec.read_prompt("correctness_judge"),
        api_key=api_key if api_key is not None else (os.environ if environ is None else environ).get(ex.api_key_env),
        timeout_s=ex.timeout_s, retries=ex.retries, cache=VerdictCache(),
    )


__all__ = ["Correctness", "OpenAICorrectnessJudge", "RulesCorrectnessJudge", "correctness_judge_for",
           "parse_correctness"]
