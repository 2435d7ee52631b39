"""The teacher endpoint's settings, probe and client (issue 15 item 1), against a real loopback HTTP server whose
model is scripted; and the scripted ScienceWorld teacher's copy rate over many seeded draws (known truth)."""

from __future__ import annotations

import numpy as np
import pytest

from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.spec import SpecError, TeacherSpec, load_spec
from twinrun.core.sft.teacher import probe_teacher, request_body, teacher_generator, visible_reply
from twinrun.testing.local_openai import LocalOpenAIServer
from twinrun.testing.sciworld_teacher import LITERAL_COPY, ScriptedSciWorldTeacher

REASONING = {"send": ["reasoning_effort", "max_completion_tokens"], "reasoning_effort": "medium",
             "max_completion_tokens": 4096}


def test_visible_reply_drops_the_think_block():
    assert visible_reply("<think>plan\nmore</think>\n\nThought:\nx\n\nAction:\nlook around") == \
        "Thought:\nx\n\nAction:\nlook around"
    assert visible_reply("plan</think>Thought:\nx") == "Thought:\nx"  # a server that strips only the opening tag
    assert visible_reply("Thought:\nno think\n\nAction:\nwait") == "Thought:\nno think\n\nAction:\nwait"


def test_request_body_sends_exactly_the_configured_parameters():
    t = TeacherSpec()
    body = request_body(t, "m", [{"role": "user", "content": "hi"}], seed=7)
    assert {k for k in body if k not in ("model", "messages")} == {"temperature", "top_p", "max_tokens", "seed"}
    r = TeacherSpec(**REASONING, extra_body={"service_tier": "flex"})
    body = request_body(r, "m", [], seed=7)
    assert body == {"model": "m", "messages": [], "reasoning_effort": "medium", "max_completion_tokens": 4096,
                    "service_tier": "flex"}


@pytest.mark.parametrize("sets, field", [
    (["sft.teacher.reasoning_effort=high"], "sft.teacher.reasoning_effort"),  # set but never sent
    (["sft.teacher.send=[reasoning_effort]"], "sft.teacher.reasoning_effort"),  # sent but null
    (["sft.teacher.send=[temperature, temperature]"], "sft.teacher.send"),
    (["sft.teacher.send=[top_k]"], "sft.teacher.send"),
])
def test_spec_refusals_are_one_line(repo_root, sets, field):
    with pytest.raises(SpecError) as e:
        load_spec(repo_root / "experiments" / "sft-sciworld-cpu.yaml", sets)
    msg = str(e.value)
    assert "\n" not in msg and field in msg and "fix" in msg


def _ok(req):
    return "ready"


@pytest.mark.parametrize("name_param", [True, False])
def test_probe_names_a_rejected_parameter(name_param):
    """A reasoning model rejects temperature: the probe says which parameter, where to fix it, in one line, whether
    or not the endpoint's error names the field (if not, each parameter is tried alone)."""
    with LocalOpenAIServer(_ok, rejects=("temperature",), name_param=name_param) as srv:
        with pytest.raises(TwinrunError) as e:
            probe_teacher(TeacherSpec(), base_url=srv.base_url, model="m", api_key="k")
        # answered requests: none when the error names the field; else the probe's trials of top_p, max_tokens, seed
        assert srv.calls == (0 if name_param else 3) and srv.rejected >= 1
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("sft.teacher.send: the endpoint rejects 'temperature'")
    assert "reasoning_effort" in msg


def test_probe_passes_a_reasoning_configuration_and_reports_infrastructure():
    with LocalOpenAIServer(_ok, rejects=("temperature", "top_p", "max_tokens"), record=True) as srv:
        probe_teacher(TeacherSpec(**REASONING), base_url=srv.base_url, model="m", api_key="k")
        assert srv.calls == 1 and srv.requests[0]["reasoning_effort"] == "medium"
        with pytest.raises(TwinrunError, match="extra_body: the endpoint rejects 'max_tokens'"):
            probe_teacher(TeacherSpec(**REASONING, extra_body={"max_tokens": 5}), base_url=srv.base_url, model="m",
                          api_key="k")
    with pytest.raises(InfrastructureError, match="cannot be reached"):
        probe_teacher(TeacherSpec(), base_url="http://127.0.0.1:9/v1", model="m", api_key="k", timeout_s=2)


def test_generator_sends_the_settings_and_returns_the_visible_reply():
    from twinrun.core.executors import BackgroundLoop

    reply = "<think>long private reasoning</think>\nThought:\nopen it\n\nAction:\nopen door to kitchen"
    loop = BackgroundLoop(name="test-teacher")
    try:
        with LocalOpenAIServer(lambda req: reply, record=True) as srv:
            gen = teacher_generator(TeacherSpec(**REASONING), base_url=srv.base_url, model="teach", api_key="k",
                                    loop=loop)
            assert gen([{"role": "user", "content": "go"}], 11) == "Thought:\nopen it\n\nAction:\nopen door to kitchen"
            req = srv.requests[0]
            assert {k for k in req if k not in ("model", "messages")} == {"reasoning_effort", "max_completion_tokens"}
            gen = teacher_generator(TeacherSpec(), base_url=srv.base_url, model="teach", api_key="k", loop=loop)
            gen([{"role": "user", "content": "go"}], 11)
            req = srv.requests[1]
            assert (req["temperature"], req["top_p"], req["max_tokens"], req["seed"]) == (0.4, 1.0, 2048, 11)
    finally:
        loop.close()


def test_scripted_teacher_copies_at_the_set_rate_over_seeded_draws():
    """Known truth: each turn copies with probability copy_share. Over 200 seeded teachers x 40 turns the pooled
    rate is within 4 binomial standard errors of the truth, and per-teacher rates spread like a binomial."""
    p, seeds, turns = 0.3, 200, 40
    msgs = [{"role": "user", "content": "instr"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Task: boil water.\nThis room is the kitchen."}]
    rates = []
    for seed in range(seeds):
        t = ScriptedSciWorldTeacher({msgs[2]["content"]: ["look around"] * turns}, copy_share=p, seed=seed)
        convo = list(msgs)
        for _ in range(turns):
            reply = t({"messages": convo})
            convo += [{"role": "assistant", "content": reply}, {"role": "user", "content": "obs"}]
        assert t.served["replies"] == turns
        rates.append(t.served["literal_copies"] / turns)
    rates = np.array(rates)
    se = np.sqrt(p * (1 - p) / (seeds * turns))
    assert abs(rates.mean() - p) < 4 * se
    assert 0.5 < rates.std(ddof=1) / np.sqrt(p * (1 - p) / turns) < 1.5


def test_scripted_teacher_continues_the_gold_path_from_any_state():
    gold = ["look around", "open door to kitchen", "go to kitchen"]
    first = "Task\nRoom"
    t = ScriptedSciWorldTeacher({first: gold}, copy_share=0.0)
    base = [{"role": "user", "content": "i"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": first}]

    def said(action):
        return [{"role": "assistant", "content": f"Thought:\nx\n\nAction:\n{action}"}, {"role": "user", "content": "o"}]

    assert t.action_for(base) == "look around"
    # a student's prefix: garbage, then the first gold action, then a template copy
    assert t.action_for(base + said("zzz") + said("look around") + said(LITERAL_COPY)) == "open door to kitchen"
    assert t.action_for(base + said("look around") + said("open door to kitchen") + said("go to kitchen")) == \
        "look around"  # the path is done
    quitter = ScriptedSciWorldTeacher({first: gold}, copy_share=0.0, give_up_share=1.0)
    assert quitter.action_for(base + said("look around")) == "look around"
