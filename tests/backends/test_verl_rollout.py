"""The transformers rollout for verl (hf_rollout.py) without Ray: sampling rules, the TokenOutput contract the
LLMServerClient and the agent loop rely on, weight updates, and the CPU platform's fixes."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.verl, pytest.mark.sampling]

torch = pytest.importorskip("torch")
pytest.importorskip("verl")
pytest.importorskip("transformers")

from twinrun.backends.verl.cpu_platform import _dedupe_backend  # noqa: E402
from twinrun.backends.verl.hf_rollout import HFGenerationServer, sample_next  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from twinrun.models import build_tiny_qwen3

    return str(build_tiny_qwen3(tmp_path_factory.mktemp("models")))


def test_sample_next_filters_and_reports_tempered_logprobs():
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    tok, lp = sample_next(logits, temperature=0, top_p=1.0, top_k=-1, generator=g)
    assert tok == 0 and lp == pytest.approx(float(torch.log_softmax(logits, -1)[0]))
    seen = {sample_next(logits, temperature=1.0, top_p=1.0, top_k=2, generator=g)[0] for _ in range(200)}
    assert seen == {0, 1}  # top-k 2 keeps the two best
    # top-p 0.5: the best token alone already holds 0.64 of the mass
    assert {sample_next(logits, temperature=1.0, top_p=0.5, top_k=-1, generator=g)[0] for _ in range(50)} == {0}
    tok, lp = sample_next(logits, temperature=2.0, top_p=1.0, top_k=1, generator=g)
    assert tok == 0 and lp == pytest.approx(float(torch.log_softmax(logits / 2.0, -1)[0]))


def test_server_generates_token_output_with_versions_and_budget(tiny):
    server = HFGenerationServer(tiny, prompt_length=32, response_length=8, seed=0)
    server.set_global_steps(3)
    out = asyncio.run(server.generate([1, 2, 3], {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True,
                                                  "repetition_penalty": 1.0}, "r1"))
    assert 1 <= len(out.token_ids) <= 8 and len(out.log_probs) == len(out.token_ids)
    assert out.stop_reason in ("completed", "length") and out.extra_fields == {"global_steps": 3}
    out = asyncio.run(server.generate([1, 2, 3], {"temperature": 1.0, "max_tokens": 2, "logprobs": False}, "r2"))
    assert len(out.token_ids) <= 2 and out.log_probs is None
    # without max_tokens: min(response_length, prompt_length + response_length - len(prompt)), as verl's vLLM server
    out = asyncio.run(server.generate(list(range(1, 38)), {"temperature": 0, "logprobs": True}, "r3"))
    assert len(out.token_ids) <= 3


def test_logprobs_match_a_full_forward_of_the_same_weights(tiny):
    """The KV-cached sampling loop reports the log-probs the actor would recompute (logits / temperature)."""
    server = HFGenerationServer(tiny, prompt_length=32, response_length=6, seed=1)
    prompt = [5, 6, 7, 8]
    out = asyncio.run(server.generate(prompt, {"temperature": 0.7, "logprobs": True, "max_tokens": 6}, "r"))
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logits = server.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
    ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(ref, torch.tensor(out.log_probs), atol=1e-4)


def test_update_weights_loads_the_actor_state(tiny):
    from transformers import AutoModelForCausalLM

    server = HFGenerationServer(tiny, prompt_length=16, response_length=4)
    other = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.5)
    n = server.update_weights({k: v.clone() for k, v in other.state_dict().items()}, global_steps=7)
    assert n > 0 and server.get_global_steps() == 7
    for (k, a), b in zip(server.model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b), k
    with pytest.raises(ValueError, match="unexpected weights"):
        server.update_weights({"not.a.weight": torch.zeros(1)})


def test_cpu_backend_string_is_deduplicated():
    assert _dedupe_backend("cpu:gloo,cpu:gloo") == "cpu:gloo"
    assert _dedupe_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"
    assert _dedupe_backend("gloo") == "gloo"
