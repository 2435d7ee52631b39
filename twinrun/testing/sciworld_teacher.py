"""A scripted ScienceWorld teacher: the *model* behind :class:`~twinrun.testing.local_openai.LocalOpenAIServer`
in teacher-data and ROSE tests (the HTTP server, the client, the simulator and the data builder are real).

It reads only the request, as a real teacher would: the conversation's first observation (which names the
variation; compared as a set of lines, since the simulator lists a room's objects in a different order in each
session) selects the variation's gold path (recorded beforehand from the real simulator with
:func:`gold_paths`), and the earlier replies tell how far along that path the episode is (a reply counts when its
action is the next gold action, whoever wrote it: so it continues from a student's own state). Then:

- with probability ``copy_share`` (a hash of the variation, the turn and ``seed``: reproducible, independent
  across turns) it copies the action list's literal template ``open/close OBJ``, which the simulator rejects;
- in a ``give_up_share`` of episodes (a hash of the variation and ``seed``) it stops following the gold path
  halfway and looks around until the turn limit (a failed episode);
- otherwise it sends the next gold action.

``served`` counts the episode replies and literal copies it sent (a request that is not an episode turn, such as
the endpoint probe, gets "ready" and is not counted) (tests compare them with the data's statistics).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twinrun.core.sft.data import first_observation_text, parse_action, render_reply
from twinrun.core.sft.template_copy import normalize_action

LITERAL_COPY = "open/close OBJ"


def _uniform(*parts: Any) -> float:
    h = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "little") / 2**64


def observation_key(first_observation: str) -> str:
    """The first observation as an order-free key: its stripped lines, sorted (ScienceWorld orders a room's
    contents differently from one simulator session to the next)."""
    return "\n".join(sorted(line.strip() for line in first_observation.splitlines() if line.strip()))


class ScriptedSciWorldTeacher:
    def __init__(self, gold: Mapping[str, Sequence[str]], *, copy_share: float, give_up_share: float = 0.0,
                 seed: int = 0, think: bool = False):
        self.gold = {observation_key(k): list(v) for k, v in gold.items()}
        self.copy_share = copy_share
        self.give_up_share = give_up_share
        self.seed = seed
        self.think = think
        self.served = {"replies": 0, "literal_copies": 0}
        self._lock = threading.Lock()

    def action_for(self, messages: Sequence[dict[str, Any]]) -> str:
        key = observation_key(messages[2]["content"]) if len(messages) >= 3 else ""
        gold = self.gold.get(key)
        prior = [parse_action(m["content"]) for m in messages[3:] if m["role"] == "assistant"]
        k = 0
        for a in prior:
            if gold and k < len(gold) and a is not None and normalize_action(a) == normalize_action(gold[k]):
                k += 1
        if _uniform(self.seed, key, len(prior), "copy") < self.copy_share:
            return LITERAL_COPY
        gives_up = _uniform(self.seed, key, "give-up") < self.give_up_share
        if gold is None or k >= len(gold) or (gives_up and k >= len(gold) // 2):
            return "look around"
        return gold[k]

    def __call__(self, req: dict[str, Any]) -> str:
        if len(req["messages"]) < 3:  # not an episode turn (the endpoint probe): not counted in `served`
            return "ready"
        action = self.action_for(req["messages"])
        with self._lock:
            self.served["replies"] += 1
            self.served["literal_copies"] += action == LITERAL_COPY
        reply = render_reply(f"The next step towards the goal is to {action}.", action)
        return f"<think>I should {action}.</think>\n{reply}" if self.think else reply

    def episode_gives_up(self, first_observation: str) -> bool:
        return _uniform(self.seed, observation_key(first_observation), "give-up") < self.give_up_share


def gold_paths(env: Any, games: Iterable[Any]) -> dict[str, list[str]]:
    """first observation (as the conversation shows it) -> the simulator's gold action sequence, per game,
    recorded with a real :class:`~twinrun.core.envs.scienceworld.SciWorldEnv` (``gold_path=True``)."""
    out = {}
    for g in games:
        obs = env.reset(g)
        out[observation_key(first_observation_text(obs.task, obs.text))] = list(env.expert_plan())
    return out
