"""Judges: rules checks, verdict parsing, caching, and the openai judge against a real loopback HTTP server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from twinrun.core.rewards.judges import (
    Judge,
    JudgeError,
    JudgeRequest,
    OpenAIJudge,
    RulesJudge,
    VerdictCache,
    judge_for_experiment,
    make_judge,
    parse_verdict,
)
from twinrun.core.skills.repository import Skill
from twinrun.core.spec import JudgeSpec, spec_from_dict
from twinrun.testing.local_openai import LocalOpenAIServer

REPO_ROOT = Path(__file__).resolve().parents[3]
PROMPT = (REPO_ROOT / "experiments" / "prompts" / "judge.md").read_text(encoding="utf-8")

GOOD = Skill(
    "heat-then-place",
    "Use when a task says to heat an object and put it in a receptacle.",
    "# Workflow\n1. Find the object and take it.\n2. Go to the microwave and heat it.\n3. Put it in the target.\n",
)
TRAJECTORY = (
    "> go to countertop 1\nYou arrive at countertop 1. On the countertop 1, you see a egg 2, and a knife 1.\n"
    "> take egg 2 from countertop 1\nYou pick up the egg 2 from the countertop 1.\n"
    "> go to microwave 1\nThe microwave 1 is closed.\n> heat egg 2 with microwave 1\nYou heat the egg 2 using the microwave 1.\n"
)


def req(skill: Skill = GOOD, trajectory: str = TRAJECTORY) -> JudgeRequest:
    return JudgeRequest(skill=skill, task="heat some egg and put it in garbagecan", trajectory=trajectory, outcome="success")


# ------------------------------------------------------------------------------------------------------------
# Rules judge


def test_rules_judge_accepts_a_good_skill() -> None:
    v = RulesJudge().judge(req())
    assert v.valid is True and not v.cached


@pytest.mark.parametrize(
    "skill,fragment",
    [
        (Skill("heat-it", "Use when heating objects in ALFWorld.", "Just heat it."), "list-item steps"),
        (Skill("heat-it", "heat it", "- a\n- b\n"), "description says too little"),
        (Skill("heat-it", "Heat things, quickly now.", "- a\n- b\n"), None),
        (Skill("copy-cat", "Use when heating an egg.", "- " + TRAJECTORY.replace("\n", "\n- ")), "copied from the trajectory"),
    ],
)
def test_rules_judge_checks(skill: Skill, fragment: str | None) -> None:
    v = RulesJudge().judge(req(skill))
    if fragment is None:
        assert v.valid is True
    else:
        assert v.valid is False and fragment in v.reason


def test_rules_judge_caches_by_content_hash() -> None:
    judge = RulesJudge()
    first = judge.judge(req())
    again = judge.judge(req())
    assert again.cached and again.valid == first.valid and len(judge.cache) == 1
    # another trajectory is another judged content (the copy check reads it): not a cache hit
    assert not judge.judge(req(trajectory="> look\nYou are in a room.")).cached
    assert len(judge.cache) == 2
    assert isinstance(judge, Judge)
    assert asyncio.run(judge.ajudge(req())).cached


# ------------------------------------------------------------------------------------------------------------
# Verdict parsing


@pytest.mark.parametrize(
    "text,verdict",
    [
        ('{"VALID": true, "reason": "ok"}', True),
        ('{"VALID": false, "reason": "vague"}', False),
        ('{"valid": "VALID"}', True),
        ('{"Valid": "invalid"}', False),
        ('<think>maybe {"VALID": false}</think>\n{"VALID": true, "reason": "fine"}', True),
        ('reasoning about {"VALID": false} ... </think>\n```json\n{"VALID": true}\n```', True),
        ('First {"VALID": true}, on reflection {"VALID": false, "reason": "wrong"}', False),
        ("The skill is good.\n**VALID**", True),
        ("INVALID", False),
        ('{"VALID": "maybe"}', None),
        ('{"score": 1}', None),
        ("I think it is fine", None),
        ("", None),
        ('{"VALID": tru', None),
    ],
)
def test_parse_verdict(text: str, verdict: bool | None) -> None:
    got, reason = parse_verdict(text)
    assert got is verdict
    assert isinstance(reason, str)


# ------------------------------------------------------------------------------------------------------------
# OpenAI-compatible judge against a real local HTTP server


def answer(text: str):
    return lambda request: text


def openai_judge(srv: LocalOpenAIServer, **kw) -> OpenAIJudge:
    kw.setdefault("prompt", PROMPT)
    kw.setdefault("retries", 2)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout_s", 5.0)
    return OpenAIJudge(base_url=srv.base_url, model="judge-model", **kw)


def test_openai_judge_valid_verdict_and_cache() -> None:
    seen: list[dict] = []

    def responder(request: dict) -> str:
        seen.append(request)
        return '<think>looks fine</think>{"VALID": true, "reason": "actionable"}'

    with LocalOpenAIServer(responder) as srv:
        judge = openai_judge(srv)
        v = judge.judge(req())
        assert (v.valid, v.reason, v.cached) == (True, "actionable", False)
        again = judge.judge(req())
        assert again.cached and again.valid is True
        assert srv.calls == 1 and judge.calls == 1  # the hit sent nothing
    body = seen[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["user"]  # the template has {{skill}}: rendered in place
    content = body["messages"][0]["content"]
    assert GOOD.to_markdown() in content and "heat some egg" in content and "You heat the egg 2" in content
    assert "{{" not in content


def test_openai_judge_invalid_verdict_is_false() -> None:
    with LocalOpenAIServer(answer('{"VALID": false, "reason": "copies the episode"}')) as srv:
        v = openai_judge(srv).judge(req())
    assert v.valid is False and v.reason == "copies the episode"


def test_prompt_without_placeholders_is_the_system_message() -> None:
    seen: list[dict] = []
    with LocalOpenAIServer(lambda r: (seen.append(r), '{"VALID": true}')[1]) as srv:
        openai_judge(srv, prompt="Judge the skill. Answer JSON.").judge(req())
    msgs = seen[0]["messages"]
    assert msgs[0] == {"role": "system", "content": "Judge the skill. Answer JSON."}
    assert "## Skill\n" + GOOD.to_markdown() in msgs[1]["content"] and "## Agent Trajectory" in msgs[1]["content"]


def test_unparsable_answer_is_unmeasured_and_not_cached() -> None:
    with LocalOpenAIServer(answer("I would rather not say.")) as srv:
        judge = openai_judge(srv)
        v = judge.judge(req())
        assert v.valid is None and "unmeasured" in v.reason
        assert judge.judge(req()).valid is None
        assert srv.calls == 2 and len(judge.cache) == 0  # asked again: nothing was remembered


def test_transient_failures_are_retried() -> None:
    with LocalOpenAIServer(answer('{"VALID": true}'), fail=lambda i, r: 503 if i < 2 else None) as srv:
        v = openai_judge(srv, retries=2).judge(req())
        assert v.valid is True and srv.calls == 3 and srv.failures == 2


def test_persistent_failure_is_unmeasured_never_false() -> None:
    with LocalOpenAIServer(answer('{"VALID": true}'), fail=lambda i, r: 500) as srv:
        judge = openai_judge(srv, retries=2)
        v = judge.judge(req())
        assert v.valid is None and "failed 3 times" in v.reason
        assert srv.calls == 3 and len(judge.cache) == 0


def test_client_error_is_unmeasured_without_retry() -> None:
    with LocalOpenAIServer(answer('{"VALID": true}'), fail=lambda i, r: 400) as srv:
        v = openai_judge(srv, retries=3).judge(req())
        assert v.valid is None and "HTTP 400" in v.reason and srv.calls == 1


def test_timeout_and_unreachable_endpoint_are_unmeasured() -> None:
    with LocalOpenAIServer(answer('{"VALID": true}'), latency_s=1.0) as srv:
        v = openai_judge(srv, timeout_s=0.1, retries=1).judge(req())
        assert v.valid is None and "ReadTimeout" in v.reason
    srv = LocalOpenAIServer(answer("x")).start()
    url = srv.base_url
    srv.stop()
    v = OpenAIJudge(base_url=url, model="m", prompt=PROMPT, retries=1, backoff_s=0.01).judge(req())
    assert v.valid is None and "ConnectError" in v.reason


def test_async_judge_concurrent_and_cached() -> None:
    skills = [Skill(f"skill-{i}", "Use when heating an object.", f"- step {i}\n- more\n") for i in range(6)]

    async def run(judge: OpenAIJudge):
        return await asyncio.gather(*(judge.ajudge(req(s)) for s in skills))

    with LocalOpenAIServer(answer('{"VALID": true}'), latency_s=0.1) as srv:
        judge = openai_judge(srv)
        verdicts = asyncio.run(run(judge))
        assert all(v.valid is True for v in verdicts) and srv.calls == 6 and srv.max_in_flight > 1
        assert all(v.cached for v in asyncio.run(run(judge))) and srv.calls == 6


def test_persistent_cache_survives_a_new_judge(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.jsonl"
    with LocalOpenAIServer(answer('{"VALID": false, "reason": "no"}')) as srv:
        first = openai_judge(srv, cache=VerdictCache(path))
        assert first.judge(req()).valid is False
        first.cache.close()
        second = openai_judge(srv, cache=VerdictCache(path))
        v = second.judge(req())
        assert v.cached and (v.valid, v.reason) == (False, "no") and srv.calls == 1


# ------------------------------------------------------------------------------------------------------------
# From the spec


def test_make_judge_from_spec() -> None:
    assert isinstance(make_judge(JudgeSpec(kind="rules")), RulesJudge)
    assert make_judge(JudgeSpec(kind="disabled")) is None
    spec = JudgeSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", retries=5, timeout_s=7)
    with pytest.raises(JudgeError, match="prompts.judge"):
        make_judge(spec)
    j = make_judge(spec, prompt=PROMPT, api_key="k")
    assert isinstance(j, OpenAIJudge) and (j.retries, j.timeout_s, j.api_key) == (5, 7, "k")
    with pytest.raises(JudgeError, match="empty"):
        make_judge(spec, prompt="  \n")


def test_judge_for_experiment_reads_the_prompt_file(tmp_path: Path) -> None:
    data = {
        "name": "judge-test",
        "curator": {"model": "tiny-qwen3"},
        "executor": {"kind": "scripted"},
        "judge": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "environment": {"name": "alfworld"},
        "batch": {"groups_per_step": 1, "rollouts_per_group": 2},
        "optimizer": {"lr": 1e-6},
        "steps": 1,
        "checkpoint_every": 1,
        "prompts": {"curator_system": "a", "curator_input": "b", "executor_system": "c", "executor_input": "d", "judge": "prompts/judge.md"},
    }
    spec = spec_from_dict(data, REPO_ROOT / "experiments")
    j = judge_for_experiment(spec)
    assert isinstance(j, OpenAIJudge) and j.prompt == PROMPT
    with LocalOpenAIServer(answer(json.dumps({"VALID": True, "reason": "ok"}))) as srv:
        j.base_url = srv.base_url
        assert j.judge(req()).valid is True


# ------------------------------------------------------------------------------------------------------------
# Judge knobs as spec fields (issue 19): temperature, max_tokens, thinking, backoff


JUDGE_KNOBS = {"temperature": 0.3, "max_tokens": 300, "thinking": False, "backoff_s": 0.5, "backoff_max_s": 2.0,
               "retries": 4, "timeout_s": 9.0}


def test_every_judge_knob_reaches_the_judge() -> None:
    spec = JudgeSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m", **JUDGE_KNOBS)
    j = make_judge(spec, prompt=PROMPT)
    assert {k: getattr(j, k) for k in JUDGE_KNOBS} == JUDGE_KNOBS


def test_default_requests_are_what_they_were_before_the_fields_existed() -> None:
    """Defaults: no thinking switch, so the body (and the verdict cache key) of an existing arm is unchanged."""
    j = make_judge(JudgeSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m"), prompt=PROMPT)
    body = j._body(req())
    assert set(body) == {"model", "messages", "temperature", "max_tokens"}
    assert (body["temperature"], body["max_tokens"], j.backoff_s, j.backoff_max_s) == (0.0, 2048, 1.0, None)


@pytest.mark.parametrize("thinking", [True, False])
def test_thinking_is_sent_as_the_chat_template_switch(thinking: bool) -> None:
    seen: list[dict] = []
    with LocalOpenAIServer(lambda r: (seen.append(r), '{"VALID": true}')[1]) as srv:
        assert openai_judge(srv, thinking=thinking, max_tokens=99).judge(req()).valid is True
    assert seen[0]["chat_template_kwargs"] == {"enable_thinking": thinking} and seen[0]["max_tokens"] == 99


def test_what_changes_verdicts_changes_the_settings_hash_and_the_cache_key_and_backoff_does_not() -> None:
    def judge(**kw) -> OpenAIJudge:
        return OpenAIJudge(base_url="http://127.0.0.1:9/v1", model="m", prompt=kw.pop("prompt", PROMPT), **kw)

    base = judge()
    for kw in ({"temperature": 0.7}, {"max_tokens": 256}, {"thinking": True}, {"thinking": False},
               {"prompt": PROMPT + "\nBe strict."}):
        other = judge(**kw)
        assert other.settings().settings_hash != base.settings().settings_hash, kw
        assert other.cache_key(req()) != base.cache_key(req()), kw  # a cached verdict is never reused across them
    for kw in ({"backoff_s": 9.0}, {"backoff_max_s": 30.0}, {"retries": 0}, {"timeout_s": 5.0}):
        other = judge(**kw)
        assert other.settings() == base.settings() and other.cache_key(req()) == base.cache_key(req()), kw
    assert base.settings().sent == {"temperature": 0.0, "max_tokens": 2048}
    assert RulesJudge().settings().settings_hash != RulesJudge(min_steps=3).settings().settings_hash


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    """Over many draws: retry n waits backoff_s * 2^(n-1) * U(0.75, 1.25), never more than backoff_max_s (the
    judge's spec fields feed the one retry policy of core.endpoints)."""
    free = OpenAIJudge(base_url="http://x/v1", model="m", prompt=PROMPT, backoff_s=10.0).retry_policy()
    capped = OpenAIJudge(base_url="http://x/v1", model="m", prompt=PROMPT, backoff_s=10.0,
                         backoff_max_s=60.0).retry_policy()
    for retry, (lo, hi) in enumerate([(7.5, 12.5), (15.0, 25.0), (30.0, 50.0), (60.0, 100.0)], start=1):
        waits = [free.delay(retry) for _ in range(2000)]
        assert lo <= min(waits) and max(waits) <= hi and abs(sum(waits) / len(waits) - (lo + hi) / 2) < 0.05 * hi
        assert max(capped.delay(retry) for _ in range(2000)) <= 60.0
    assert {capped.delay(5) for _ in range(100)} == {60.0}  # 160 * U(0.75, 1.25) is always over the cap


def test_the_rules_self_judge_is_wrong_on_its_stated_share_of_episodes():
    """core.correctness.RulesCorrectnessJudge (the smoke arm's self-judge): over 4,000 distinct episodes (half ended
    before the turn budget, half at it) and 3 seeds, the share of verdicts that disagree with the ended-early rule is
    ``error`` (binomial 99.9% band), the same for episodes that ended early and late; a verdict depends only on (seed,
    task, trajectory), so it repeats exactly, and error 0 is the plain rule."""
    from types import SimpleNamespace

    from scipy.stats import binom

    from twinrun.core.rewards.correctness import RulesCorrectnessJudge

    def verdicts(judge, n):
        out = []
        for i in range(n):
            ep = SimpleNamespace(record=SimpleNamespace(steps=5 if i % 2 else 12))
            v = asyncio.run(judge.acorrect(f"put a mug {i % 7} in the cabinet", f"> go to desk {i}\nnothing", ep))
            out.append((v, "success" if i % 2 else "failure"))
        return out

    n, error = 4000, 0.2
    lo, hi = binom.ppf(0.0005, n // 2, error) / (n // 2), binom.ppf(0.9995, n // 2, error) / (n // 2)
    for seed in (0, 1, 2):
        got = verdicts(RulesCorrectnessJudge(12, error=error, seed=seed), n)
        for ended_early in (0, 1):
            part = got[ended_early::2]
            wrong = sum(v != truth for v, truth in part) / len(part)
            assert lo <= wrong <= hi, (seed, ended_early, wrong)
        assert verdicts(RulesCorrectnessJudge(12, error=error, seed=seed), 200) == got[:200]  # deterministic
    assert all(v == truth for v, truth in verdicts(RulesCorrectnessJudge(12), 400))
    a, b = (verdicts(RulesCorrectnessJudge(12, error=error, seed=s), 400) for s in (0, 1))
    assert a != b  # the seed decides which episodes are judged wrong
    with pytest.raises(JudgeError, match="self_judge_error: 0.7"):
        RulesCorrectnessJudge(12, error=0.7)


def test_min_body_words_judges_a_body_by_its_length_and_joins_the_settings_only_when_set() -> None:
    """judge.min_body_words (the smoke arm's content rule, issue 32): a body under the minimum is INVALID with the
    count in the reason, one at it is VALID; unset (0), the judge's settings hash and cache key are the ones the
    judge had before the check existed, so no cached verdict or recorded hash of another spec moves."""
    short = Skill("pick-tips", "pick and put tasks", "Check every receptacle.\n")
    longer = Skill("pick-tips", "pick and put tasks", "Open drawers and look around.\n")
    judge = RulesJudge(min_steps=0, min_body_words=5)
    v = judge.judge(JudgeRequest(skill=short))
    assert v.valid is False and "body says too little (3 words, fewer than 5)" in v.reason
    assert judge.judge(JudgeRequest(skill=longer)).valid is True
    assert RulesJudge(min_steps=0).judge(JudgeRequest(skill=short)).valid is True
    assert RulesJudge().judge(JudgeRequest(skill=longer)).valid is False  # the default rule: 0 list-item steps
    import hashlib
    before = hashlib.sha256(b"rules-v1\x00" + json.dumps([2, 3, 8, 0.5]).encode() + b"\x00").hexdigest()[:16]
    assert RulesJudge().settings().settings_hash == RulesJudge(min_body_words=0).settings().settings_hash == before
    assert RulesJudge().settings().settings_hash != RulesJudge(min_body_words=5).settings().settings_hash
    assert RulesJudge().cache_key(JudgeRequest(skill=short)) != RulesJudge(min_body_words=5).cache_key(
        JudgeRequest(skill=short))


def test_the_spec_s_rules_fields_reach_the_judge_and_other_kinds_refuse_them() -> None:
    """make_judge hands judge.min_steps and judge.min_body_words to the rules judge (cut either and a verdict
    below changes); an openai or disabled judge refuses them in one line naming the field and the fix."""
    short = JudgeRequest(skill=Skill("pick-tips", "pick and put tasks", "Check every receptacle.\n"))
    listed = JudgeRequest(skill=Skill("pick-tips", "pick and put tasks", "- Take the object and put it there.\n"))
    assert make_judge(JudgeSpec(kind="rules", min_steps=0, min_body_words=5)).judge(short).valid is False
    assert make_judge(JudgeSpec(kind="rules", min_steps=0, min_body_words=3)).judge(short).valid is True
    assert make_judge(JudgeSpec(kind="rules", min_steps=1)).judge(listed).valid is True
    assert make_judge(JudgeSpec(kind="rules")).judge(listed).valid is False
    for kind in ("openai", "disabled"):
        with pytest.raises(ValueError, match=rf"judge.min_body_words: 5 is a rules-judge check .* judge.kind={kind}"):
            JudgeSpec(kind=kind, base_url="http://x/v1", model="m", min_body_words=5)
        with pytest.raises(ValueError, match="judge.min_steps: 1 is a rules-judge check"):
            JudgeSpec(kind=kind, base_url="http://x/v1", model="m", min_steps=1)
