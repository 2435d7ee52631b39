"""Executors and the ReAct loop on real ALFWorld games; the openai executor against a real loopback HTTP server
(`LocalOpenAIServer`: real sockets and JSON, a scripted responder in place of the model)."""

from __future__ import annotations

import asyncio
import random
import re
import threading

import pytest

from twinrun.core.envs import EnvPool, GameRef, Observation
from twinrun.core.envs.alfworld import AlfWorldCatalog, AlfWorldEnv
from twinrun.core.errors import InfrastructureError
from twinrun.core.executors import BackgroundLoop, Executor, HFPolicy, OpenAIPolicy, ScriptedPolicy
from twinrun.core.executors.react import (
    ExecutorPrompts,
    PromptError,
    PromptTemplate,
    build_messages,
    parse_action,
)
from twinrun.testing.local_openai import LocalOpenAIServer

SHORT = [  # valid_seen games whose expert wins in 5-6 steps
    "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790",
    "valid_seen/pick_and_place_simple-Box-None-Dresser-224/trial_T20190907_164104_229696",
    "valid_seen/pick_and_place_simple-Candle-None-Cart-401/trial_T20190909_081908_677973",
    "valid_seen/look_at_obj_in_light-CD-None-DeskLamp-320/trial_T20190907_224451_655673",
]


@pytest.fixture(scope="module")
def prompts(repo_root):
    p = repo_root / "experiments" / "prompts"
    return ExecutorPrompts.from_files(p / "executor_system.md", p / "executor_input.md")


@pytest.fixture(scope="module")
def games(alfworld_data):
    cat = AlfWorldCatalog(alfworld_data, "valid_seen")
    by_id = {g.game_id: g for g in cat.games()}
    return [by_id[i] for i in SHORT]


@pytest.fixture(scope="module")
def pool():
    with EnvPool("alfworld", workers=0, options={"expert_type": "handcoded"}) as p:
        yield p


@pytest.fixture(scope="module")
def loop():
    bg = BackgroundLoop()
    yield bg
    bg.close()


def play(loop, pool, executor, game, seed=0, position=None, skills_text=""):
    async def run():
        with pool.lease() as env:
            return await executor.play(env, game, seed=seed, position=position, skills_text=skills_text)

    return loop.run(run())


# ------------------------------------------------------------------------------------------------------------
# Parsing and prompts (pure)


def test_parse_action_follows_the_react_format():
    assert parse_action("<think>go</think>\n<action>Go To Desk 1 </action>") == parse_action(
        "<think>go</think><action>go to desk 1</action>")
    p = parse_action("<think>maybe <action>open drawer 1</action>?</think> <action>look</action>")
    assert (p.action, p.valid_format, p.thought) == ("look", True, "maybe <action>open drawer 1</action>?")
    bad = parse_action("I will go to the desk and examine everything carefully")
    assert not bad.valid_format and bad.action == "d examine everything carefully"  # verl-agent: last 30 chars
    assert parse_action("").action == "" and not parse_action(None).valid_format  # type: ignore[arg-type]


def test_prompt_templates_strip_doc_and_keep_unknown_braces():
    t = PromptTemplate.from_text('<!--\ndoc {task}\n-->\nDo {task}. JSON: {"a": 1} {unknown}', "x", required=("task",))
    assert t.render(task="it") == 'Do it. JSON: {"a": 1} {unknown}'
    with pytest.raises(PromptError, match=r"prompts.executor_input: placeholder \{observation\} is missing"):
        PromptTemplate.from_text("no fields", "executor_input", required=("observation",))
    with pytest.raises(PromptError, match="cannot be read"):
        PromptTemplate.from_file("/nonexistent/p.md", "executor_system")


def test_messages_keep_the_last_three_steps(prompts):
    pairs = [(f"obs {i}", f"act {i}") for i in range(1, 6)]
    msgs = build_messages(prompts, environment="alfworld", task="put a mug in fridge.", skills_text="SKILL A",
                          history_pairs=pairs, history_window=3, step=5,
                          observation=Observation("you see a mug", "put a mug in fridge.", ("look", "take mug 1")))
    assert [m["role"] for m in msgs] == ["user"]  # the default system prompt file is empty: no system message
    user = msgs[0]["content"]
    assert "ALFRED Embodied Environment" in user and "<!--" not in user
    assert "obs 3" in user and "act 5" in user and "obs 2" not in user
    assert "[Observation 3: 'obs 3', Action 3: 'act 3']" in user
    assert "taken 5 step(s)" in user and "step 6" in user and "SKILL A" in user and "'take mug 1'" in user


# ------------------------------------------------------------------------------------------------------------
# Scripted executor on real games


def test_scripted_expert_wins_and_a_seed_replays_the_same_trajectory(loop, pool, prompts, games):
    ex = Executor(ScriptedPolicy(1.0), prompts, max_turns=30, history=3, settings_hash="h")
    first = play(loop, pool, ex, games[0], seed=11, position=2, skills_text="(none)")
    assert first.record.outcome == "success" and first.record.score == 1.0 and first.record.position == 2
    assert first.record.invalid_actions == 0 and first.record.executor_calls == first.record.steps <= 6
    assert first.record.executor_settings_hash == "h" and first.task.startswith("look at alarmclock")
    again = play(loop, pool, ex, games[0], seed=11)
    assert [t.action for t in again.turns] == [t.action for t in first.turns]

    noisy = Executor(ScriptedPolicy(0.3), prompts, max_turns=4, history=3)
    a = play(loop, pool, noisy, games[1], seed=5)
    b = play(loop, pool, noisy, games[1], seed=5)
    c = play(loop, pool, noisy, games[1], seed=6)
    assert [t.action for t in a.turns] == [t.action for t in b.turns]
    assert [t.action for t in a.turns] != [t.action for t in c.turns]
    assert a.record.outcome in ("success", "failure") and a.record.steps <= 4
    text = a.trajectory_text()
    assert text.startswith("Observation 0: ") and "Action 1: " in text


# ------------------------------------------------------------------------------------------------------------
# openai executor against a real local HTTP server


def expert_actions(games) -> dict[str, list[str]]:
    """Each game's winning action list (the handcoded expert, replayed from a fixed seed)."""
    env = AlfWorldEnv()
    plans = {}
    for g in games:
        obs = env.reset(g, seed=0)
        acts = []
        for _ in range(10):
            acts.append(env.expert_plan()[0])
            if env.step(acts[-1]).won:
                break
        plans[obs.task] = acts
    env.close()
    env.cache.close()
    return plans


def responder_for(plans: dict[str, list[str]], losing: set[str]):
    """A stand-in model that plays the expert's actions for winnable tasks and 'look' for the others."""

    def respond(req):
        prompt = req["messages"][-1]["content"]
        task = re.search(r"Your task is to: (.*)", prompt).group(1).strip()
        step = int(re.search(r"already taken (\d+) step", prompt).group(1))
        action = "look" if task in losing else plans[task][step]
        return f"<think>step {step}</think><action>{action}</action>"

    return respond


def test_invalid_actions_are_counted_and_the_episode_plays_on(loop, pool, prompts, games):
    answers = iter(["I refuse to use tags", "<think>x</think><action>fly to the moon</action>"] * 3)
    lock = threading.Lock()

    def respond(req):
        with lock:
            return next(answers)

    with LocalOpenAIServer(respond) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=0)
        ex = Executor(policy, prompts, max_turns=4, history=3)
        ep = play(loop, pool, ex, games[0])
        loop.run(policy.aclose())
    assert ep.record.outcome == "failure" and ep.record.steps == 4 and ep.record.invalid_actions == 4
    assert [t.valid_format for t in ep.turns] == [False, True, False, True]
    assert ep.turns[1].action == "fly to the moon" and not ep.turns[1].admissible


TRANSPORTS = ["httpx", pytest.param("aiohttp", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("aiohttp") is None, reason="aiohttp not installed"))]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_retries_backoff_and_non_retryable_errors(loop, prompts, transport):
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def fail(idx, req):  # every logical call fails twice, then succeeds
        key = req["messages"][-1]["content"]
        with lock:
            seen[key] = seen.get(key, 0) + 1
            return 503 if seen[key] <= 2 else None

    with LocalOpenAIServer(lambda r: "ok", fail=fail) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=2, backoff_s=0.01, http_client=transport)
        out = loop.run(asyncio.wait_for(policy.complete([{"role": "user", "content": "a"}]), 30))
        assert policy.transport == transport
        assert out == "ok" and policy.attempts == 3 and policy.retries_done == 2 and srv.failures == 2
        with pytest.raises(InfrastructureError, match="2 attempt"):
            policy.retries = 1
            loop.run(policy.complete([{"role": "user", "content": "b"}]))  # fails twice: retries exhausted
        loop.run(policy.aclose())
    with LocalOpenAIServer(lambda r: "ok", fail=lambda i, r: 400) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=3, backoff_s=0.01, http_client=transport)
        with pytest.raises(InfrastructureError, match="1 attempt.*HTTP 400"):
            loop.run(policy.complete([{"role": "user", "content": "c"}]))
        assert srv.calls == 1  # a bad request is not retried
        loop.run(policy.aclose())
        dead_url = srv.base_url
    # nothing listens: connection refused is retried, then unmeasured
    policy = OpenAIPolicy(base_url=dead_url, model="m", retries=1, backoff_s=0.01, http_client=transport)
    with pytest.raises(InfrastructureError, match="2 attempt"):
        loop.run(policy.complete([{"role": "user", "content": "d"}]))
    loop.run(policy.aclose())
    # a server slower than the timeout
    with LocalOpenAIServer(lambda r: "late", latency_s=1.0) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=0, timeout_s=0.2, http_client=transport)
        with pytest.raises(InfrastructureError, match="timeout"):
            loop.run(policy.complete([{"role": "user", "content": "e"}]))
        loop.run(policy.aclose())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_concurrency_is_bounded_across_episodes(loop, prompts, transport):
    with LocalOpenAIServer(lambda r: "x", latency_s=0.05) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", concurrency=3, retries=0, http_client=transport)

        async def many():
            await asyncio.gather(*[policy.complete([{"role": "user", "content": str(i)}]) for i in range(12)])

        loop.run(many())
        assert srv.max_in_flight == 3 and policy.max_in_flight == 3 and policy.calls == 12
        loop.run(policy.aclose())


@pytest.mark.slow
def test_fault_injection_unmeasured_not_failure(loop, prompts, games):
    """30% of endpoint attempts fail. No episode becomes a failure because of it; unmeasured episodes are exactly
    the calls that exhausted their retries; the success rate over measured episodes is the true one."""
    plans = expert_actions(games)
    tasks = list(plans)
    losing = set(tasks[2:])  # two games the stand-in model wins, two it cannot
    rng = random.Random(2024)
    lock = threading.Lock()

    def fail(idx, req):
        with lock:
            return 500 if rng.random() < 0.3 else None

    repeats = 4
    with EnvPool("alfworld", workers=2, options={"expert_type": None}) as pool, \
            LocalOpenAIServer(responder_for(plans, losing), fail=fail) as srv:
        policy = OpenAIPolicy(base_url=srv.base_url, model="m", retries=1, backoff_s=0.001, concurrency=8)
        ex = Executor(policy, prompts, max_turns=6, history=3)
        gate = asyncio.Semaphore(4)

        async def one(g: GameRef, seed: int):
            async with gate:
                with pool.lease() as env:
                    return await ex.play(env, g, seed=seed)

        async def all_episodes():
            return await asyncio.gather(*[one(g, s) for g in games for s in range(repeats)])

        episodes = loop.run(all_episodes())
        loop.run(policy.aclose())

    unmeasured = [e for e in episodes if e.record.outcome == "unmeasured"]
    measured = [e for e in episodes if e.record.outcome != "unmeasured"]
    assert srv.failures > 0 and unmeasured and measured
    # every injected failure was either retried or ended exactly one episode
    assert srv.failures == policy.retries_done + policy.failed_calls
    assert len(unmeasured) == policy.failed_calls
    assert all("HTTP 500" in e.record.unmeasured_reason and e.record.score is None for e in unmeasured)
    # no measured episode's outcome was changed by the failures: winnable games won, the others lost
    for e in measured:
        assert e.record.outcome == ("failure" if e.task in losing else "success"), e.record
    truth = sum(e.task not in losing for e in measured) / len(measured)
    observed = sum(e.record.outcome == "success" for e in measured) / len(measured)
    assert observed == truth
    # the bug this guards against: counting unmeasured episodes as failures biases the rate down
    naive = sum(e.record.outcome == "success" for e in episodes) / len(episodes)
    winnable_unmeasured = sum(e.task not in losing for e in unmeasured)
    assert winnable_unmeasured == 0 or naive < sum(e.task not in losing for e in episodes) / len(episodes)


# ------------------------------------------------------------------------------------------------------------
# hf executor with a tiny local model


@pytest.mark.trl
@pytest.mark.slow
@pytest.mark.sampling
def test_hf_policy_generates_with_a_tiny_local_qwen3(loop, pool, prompts, games, tmp_path_factory):
    pytest.importorskip("transformers")
    from twinrun.models import build_tiny_qwen3

    path = build_tiny_qwen3(tmp_path_factory.mktemp("models"))
    policy = HFPolicy(str(path), temperature=1.0, max_tokens=6)
    ex = Executor(policy, prompts, max_turns=2, history=3)
    a = play(loop, pool, ex, games[0], seed=3)
    b = play(loop, pool, ex, games[0], seed=3)
    assert a.record.outcome == "failure" and a.record.executor_calls == 2  # a random model does not win
    assert [t.response for t in a.turns] == [t.response for t in b.turns]  # seeded sampling
    assert a.record.invalid_actions == 2


@pytest.mark.sciworld
@pytest.mark.slow
def test_scripted_executor_plays_sciworld_through_the_pool(loop, prompts):
    import shutil

    if shutil.which("java") is None:
        pytest.skip("ScienceWorld needs Java 17")
    game = GameRef("sciworld", "find-non-living-thing/0", "find-non-living-thing", "train",
                   task_name="find-non-living-thing", variation=0)
    with EnvPool("sciworld", workers=0, options={"heap": "256m", "gold_path": True}) as sw:
        ex = Executor(ScriptedPolicy(1.0), prompts, max_turns=10, history=3)
        first = play(loop, sw, ex, game, seed=1)
        second = play(loop, sw, ex, game, seed=1)  # the JVM of the first episode is reused
        assert sw.stats()[0]["idle"] == 1
    # ScienceWorld's gold path may pick another valid target on every load (here: any non-living thing), so
    # only the outcome is compared, not the action sequence
    assert first.record.outcome == second.record.outcome == "success" and first.record.score == 100.0
    msgs = build_messages(prompts, environment="sciworld", task=first.task, skills_text="", history_pairs=[],
                          history_window=3, step=0, observation=Observation("o", first.task))
    assert "ScienceWorld" in msgs[0]["content"]
