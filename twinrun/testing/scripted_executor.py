"""The executor's "model" behind a real local OpenAI-compatible server, for training tests and benchmarks.

:class:`ScriptedExecutorModel` answers the executor's ReAct prompts (experiments/prompts/executor_input.md: the
task sentence and the steps already taken are read from the prompt) with the handcoded expert's plan for the
tasks it was given (:func:`expert_plans`) and ``look`` for any other task, so a winnable game is won in its
expert's number of steps and every other game runs to ``executor.max_turns``. Failures are injected per HTTP
attempt: a seeded share of all attempts (``fail_share``), every attempt whose task is in ``failing_tasks``, and
every attempt once ``fail_all`` is set; a task in ``first_episode_only`` never fails except that only its first
first-turn attempt succeeds (so, however many episodes play it at once and whatever their retries, exactly the
first episode to ask is measured and every other one is unmeasured); a task in ``reliable_tasks`` never fails. Served through :class:`~twinrun.testing.local_openai.LocalOpenAIServer`
with a fixed latency per call:

    model = ScriptedExecutorModel(expert_plans(games), fail_share=0.3, seed=0)
    with model.serve(latency_s=0.05) as srv:
        spec overrides: executor.kind=openai, executor.base_url=srv.base_url, executor.model=srv.model
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterable
from typing import Any

from twinrun.testing.local_openai import LocalOpenAIServer

_TASK = re.compile(r"Your task is to: (.*)")
_STEP = re.compile(r"already taken (\d+) step")


def expert_plans(games: Iterable[Any], max_steps: int = 30) -> dict[str, list[str]]:
    """task sentence -> the handcoded expert's winning actions, replayed from seed 0 (ALFWorld games)."""
    from twinrun.core.envs.alfworld import AlfWorldEnv

    env = AlfWorldEnv()
    plans: dict[str, list[str]] = {}
    try:
        for g in games:
            obs = env.reset(g, seed=0)
            acts: list[str] = []
            for _ in range(max_steps):
                plan = env.expert_plan()
                if not plan:
                    break
                acts.append(plan[0])
                if env.step(acts[-1]).won:
                    break
            plans[obs.task] = acts
    finally:
        env.close()
        env.cache.close()
    return plans


def prompt_task(request: dict[str, Any]) -> tuple[str, int]:
    """(task sentence, steps already taken) of an executor request."""
    prompt = request["messages"][-1]["content"]
    task, step = _TASK.search(prompt), _STEP.search(prompt)
    return (task.group(1).strip() if task else ""), (int(step.group(1)) if step else 0)


class ScriptedExecutorModel:
    """responder + fail callables for LocalOpenAIServer (see the module docstring). Counters: ``attempts``,
    ``failed`` (attempts answered with HTTP 500)."""

    def __init__(self, plans: dict[str, list[str]] | None = None, *, fail_share: float = 0.0, seed: int = 0,
                 failing_tasks: Iterable[str] = (), first_episode_only: Iterable[str] = (),
                 reliable_tasks: Iterable[str] = ()):
        self.plans = dict(plans or {})
        self.fail_share = fail_share
        self.failing_tasks = set(failing_tasks)
        self.first_episode_only = set(first_episode_only)
        self.reliable_tasks = set(reliable_tasks)
        self._first_turns: dict[str, int] = {}
        self.fail_all = False
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.attempts = self.failed = 0

    def respond(self, request: dict[str, Any]) -> str:
        task, step = prompt_task(request)
        plan = self.plans.get(task)
        action = plan[step] if plan and step < len(plan) else "look"
        return f"<think>step {step}</think><action>{action}</action>"

    def fail(self, index: int, request: dict[str, Any]) -> int | None:
        task, step = prompt_task(request)
        with self._lock:
            self.attempts += 1
            if self.fail_all or task in self.failing_tasks:
                failed = True
            elif task in self.first_episode_only:
                if step == 0:
                    self._first_turns[task] = self._first_turns.get(task, 0) + 1
                failed = step == 0 and self._first_turns[task] > 1
            else:
                failed = task not in self.reliable_tasks and self._rng.random() < self.fail_share
            self.failed += failed
        return 500 if failed else None

    def serve(self, *, latency_s: float = 0.0, **server: Any) -> LocalOpenAIServer:
        return LocalOpenAIServer(self.respond, latency_s=latency_s, fail=self.fail, **server)


__all__ = ["ScriptedExecutorModel", "expert_plans", "prompt_task"]
