"""Every knob that changes a number is a spec field (issue 19): executor decoding and extra_body, judge decoding
and backoff, BM25.

The executor runs against a real loopback HTTP server that resolves decoding the way a vLLM server does
(`twinrun.testing.local_openai`: a field a request leaves out takes the model's generation config or vLLM's own
defaults, `/server_info` only in dev mode); ALFWorld games are real. The central checks compare what the episode
record says the server applied with what the server actually applied."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from twinrun.core.executors import BackgroundLoop, make_executor
from twinrun.core.executors.sampling import DECODING_FIELDS
from twinrun.core.rewards.judges import judge_for_experiment
from twinrun.core.records import read_jsonl
from twinrun.core.spec import SpecError, load_spec
from twinrun.testing.local_openai import LocalOpenAIServer

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
SMOKE = EXPERIMENTS / "smoke-cpu.yaml"
PAPER = EXPERIMENTS / "skillos-alfworld-qwen3-8b.yaml"
ANSWER = "<think>look first</think><action>look</action>"
QWEN3_GENERATION_CONFIG = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}  # Qwen3-8B's generation_config.json

# every field issue 19 adds, with a non-default value, as a spec file spells it
NEW_FIELDS = {
    "executor.top_k": 5,
    "executor.min_p": 0.05,
    "executor.presence_penalty": 0.5,
    "executor.repetition_penalty": 1.05,
    "executor.extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    "retrieval.bm25.k1": 1.2,
    "retrieval.bm25.b": 0.6,
    "retrieval.bm25.variant": "robertson",
    "judge.temperature": 0.3,
    "judge.max_tokens": 300,
    "judge.thinking": False,
    "judge.backoff_s": 0.01,
    "judge.backoff_max_s": 0.02,
}
JUDGE_MODEL = "judge-m"
VERDICT = '{"VALID": true, "reason": "actionable"}'


def openai_sets(url: str, *extra: str) -> list[str]:
    # skill_effect=0, self_judge_error=0: the smoke arm's stand-in settings are errors on an LLM executor
    return ["executor.kind=openai", "executor.skill_effect=0", "executor.self_judge_error=0",
            f"executor.base_url={url}", "executor.model=m", "executor.max_turns=2",
            "executor.max_tokens=128", "curation.correctness=ground_truth", *extra]  # the self-judge is #12's test


@pytest.fixture(scope="module")
def loop():
    bg = BackgroundLoop()
    yield bg
    bg.close()


@pytest.fixture(scope="module")
def game(alfworld_data):
    from twinrun.core.envs.alfworld import AlfWorldCatalog

    return next(iter(AlfWorldCatalog(alfworld_data, "valid_seen").games()))


@pytest.fixture(scope="module")
def pool():
    from twinrun.core.envs import EnvPool

    with EnvPool("alfworld", workers=0, options={"expert_type": None}) as p:
        yield p


def play_one(loop, pool, game, sets: list[str]):
    """One episode with the spec's executor; returns (record, warning lines)."""
    executor = make_executor(load_spec(SMOKE, sets))
    lines: list[str] = []
    executor.policy.warn = lines.append

    async def run():
        with pool.lease() as env:
            return await executor.play(env, game, seed=1)

    try:
        episode = loop.run(run())
    finally:
        loop.run(executor.aclose())
    return episode.record, lines


# ------------------------------------------------------------------------------------------------------------
# Spec fields


def test_defaults_send_exactly_what_twinrun_sent_before():
    """Issue 19's fields default to "not sent", so no existing arm's requests change."""
    policy = make_executor(load_spec(PAPER)).policy
    assert policy.sampling_params() == {"temperature": 0.4, "top_p": 1.0, "max_tokens": 2048}
    stated = make_executor(load_spec(PAPER, [f"{k}={json.dumps(v)}" for k, v in NEW_FIELDS.items()])).policy
    assert stated.sampling_params() == {"temperature": 0.4, "top_p": 1.0, "max_tokens": 2048, "top_k": 5,
                                        "min_p": 0.05, "presence_penalty": 0.5, "repetition_penalty": 1.05,
                                        "chat_template_kwargs": {"enable_thinking": False}}


def test_every_decoding_field_changes_the_executor_settings_hash():
    base = make_executor(load_spec(PAPER)).settings_hash
    for key, value in NEW_FIELDS.items():
        if key.startswith("executor."):
            assert make_executor(load_spec(PAPER, [f"{key}={json.dumps(value)}"])).settings_hash != base, key


BAD = [
    ("executor.top_k=-2", "executor.top_k: -2 must be >= 1, 0 or -1 (off), or null (fix: null leaves it to the server)"),
    ("executor.min_p=1.5",
     "executor.min_p: 1.5 is invalid: Input should be less than or equal to 1 (fix: use a value <= 1.0)"),
    ("executor.presence_penalty=3",
     "executor.presence_penalty: 3 is invalid: Input should be less than or equal to 2 "
     "(fix: use a value <= 2.0)"),
    ("executor.repetition_penalty=0",
     "executor.repetition_penalty: 0 is invalid: Input should be greater than 0 (fix: use a value > 0.0)"),
    ("executor.top_kk=20", "executor.top_kk: unknown key (fix: did you mean 'executor.top_k'?)"),
    ("executor.extra_body={temperature: 0.1}",
     "executor.extra_body: key 'temperature' is a field twinrun sets itself (fix: set executor.temperature instead)"),
    ("executor.extra_body={max_completion_tokens: 9}",
     "executor.extra_body: key 'max_completion_tokens' is a field twinrun sets itself "
     "(fix: set executor.max_tokens instead)"),
    ("executor.extra_body={stream: true}",
     "executor.extra_body: key 'stream' is a field twinrun sets itself (fix: remove it: twinrun sets it on every request)"),
    ("executor.extra_body=3",
     "executor.extra_body: 3 is invalid: Input should be a valid dictionary (fix: a mapping)"),
    ("executor.extra_body={chat_template_kwargs: 1}|executor.kind=openai|executor.skill_effect=0|executor.self_judge_error=0|executor.base_url=http://x/v1|executor.model=m",
     "executor.extra_body.chat_template_kwargs: 1 is not a mapping (fix: e.g. {enable_thinking: false})"),
    ("executor.top_k=20",  # the smoke arm's executor is scripted
     "executor.top_k: 20 has no effect with executor.kind=scripted (fix: remove it, or use an openai or hf executor)"),
    ("executor.kind=hf|executor.skill_effect=0|executor.self_judge_error=0|executor.model=m|executor.presence_penalty=0.5",
     "executor.presence_penalty: 0.5 has no transformers equivalent for executor.kind=hf "
     "(fix: null, or use an openai executor)"),
    ("executor.kind=hf|executor.skill_effect=0|executor.self_judge_error=0|executor.model=m|executor.extra_body={seed: 1}",
     "executor.extra_body: key 'seed' has no meaning for executor.kind=hf "
     "(fix: only chat_template_kwargs applies to local generation)"),
    ("retrieval.bm25.variant=okapi",
     "retrieval.bm25.variant: 'okapi' is invalid: Input should be 'lucene', 'robertson' or 'atire' "
     "(fix: one of 'lucene', 'robertson' or 'atire')"),
    ("retrieval.bm25.b=1.5",
     "retrieval.bm25.b: 1.5 is invalid: Input should be less than or equal to 1 (fix: use a value <= 1.0)"),
    ("retrieval.bm25.k1=-1",
     "retrieval.bm25.k1: -1 is invalid: Input should be greater than or equal to 0 (fix: use a value >= 0.0)"),
    ("retrieval.bm25.kl=1", "retrieval.bm25.kl: unknown key (fix: did you mean 'retrieval.bm25.k1'?)"),
    ("judge.temperature=2.5",
     "judge.temperature: 2.5 is invalid: Input should be less than or equal to 2 (fix: use a value <= 2.0)"),
    ("judge.max_tokens=0", "judge.max_tokens: 0 is invalid: Input should be greater than 0 (fix: use a value > 0)"),
    ("judge.thinking=maybe",
     "judge.thinking: 'maybe' is invalid: Input should be a valid boolean, unable to interpret input "
     "(fix: true or false)"),
    ("judge.thinking=false",  # the smoke arm's judge is the rules judge
     "judge.thinking: False has no effect with judge.kind=rules (fix: remove it, or use an openai judge)"),
    ("judge.backoff_s=-1",
     "judge.backoff_s: -1 is invalid: Input should be greater than or equal to 0 (fix: use a value >= 0.0)"),
    ("judge.backoff_s=10|judge.backoff_max_s=5",
     "judge.backoff_max_s: 5.0 is below backoff_s=10.0 (fix: a cap at least the first wait, or null for no cap)"),
    ("judge.temprature=0.1", "judge.temprature: unknown key (fix: did you mean 'judge.temperature'?)"),
]


@pytest.mark.parametrize("sets,message", BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_one_line_errors_naming_field_and_fix(sets: str, message: str):
    with pytest.raises(SpecError) as ei:
        load_spec(SMOKE, sets.split("|"))
    assert str(ei.value) == message


# ------------------------------------------------------------------------------------------------------------
# Request -> server -> record


def test_the_record_says_what_the_server_applied_when_the_spec_states_every_field(loop, pool, game):
    """The spec's values reach the server (the server's model file says otherwise, so a field that was not sent
    would run with the file's value), and the record's `effective` equals what the server applied."""
    with LocalOpenAIServer(lambda r: ANSWER, dev_mode=True, model_generation_config=QWEN3_GENERATION_CONFIG) as srv:
        record, lines = play_one(loop, pool, game, openai_sets(
            srv.base_url, "executor.top_k=5", "executor.min_p=0.05", "executor.presence_penalty=0.5",
            "executor.repetition_penalty=1.05", "executor.extra_body={chat_template_kwargs: {enable_thinking: false}}"))
    assert record.executor_calls == 2 and len(srv.applied) == 2
    assert record.sampling.sent == {"temperature": 0.4, "top_p": 1.0, "max_tokens": 128, "top_k": 5, "min_p": 0.05,
                                    "presence_penalty": 0.5, "repetition_penalty": 1.05,
                                    "chat_template_kwargs": {"enable_thinking": False}}
    assert all(received == record.sampling.sent for received in srv.received)
    assert all(applied == record.sampling.effective for applied in srv.applied)
    assert set(record.sampling.effective) == set(DECODING_FIELDS)
    assert record.sampling.source == "vLLM /server_info: --generation-config auto"
    assert lines == []  # the spec states everything the server would fill: nothing to warn about


def test_fields_left_to_a_reporting_server_are_recorded_and_warned_about_in_one_line(loop, pool, game):
    """--generation-config vllm with overrides: the server reports its values, so the record has them (equal to
    what it applied) and one line names each field the server set and the cap it put on max_tokens."""
    with LocalOpenAIServer(lambda r: ANSWER, dev_mode=True, generation_config="vllm",
                           override_generation_config={"top_k": 20, "max_new_tokens": 64}) as srv:
        record, lines = play_one(loop, pool, game, openai_sets(srv.base_url))
    assert record.sampling.sent == {"temperature": 0.4, "top_p": 1.0, "max_tokens": 128} == srv.received[0]
    assert all(applied == record.sampling.effective for applied in srv.applied)
    assert record.sampling.effective["top_k"] == 20 and record.sampling.effective["max_tokens"] == 64
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "top_k=20 set by the server, not by the spec" in lines[0]
    assert "max_tokens=128 is capped at 64" in lines[0]
    assert lines[0].endswith("(fix: set executor.top_k in the spec)")


def test_values_the_server_takes_from_an_unreported_file_are_null_and_warned(loop, pool, game):
    """vLLM's default --generation-config auto fills unsent fields from the model's generation_config.json but
    does not report the values: the record says null (unknown), never a guess, and the line names the fields."""
    with LocalOpenAIServer(lambda r: ANSWER, dev_mode=True, model_generation_config=QWEN3_GENERATION_CONFIG) as srv:
        record, lines = play_one(loop, pool, game, openai_sets(srv.base_url))
    assert srv.applied[0]["top_k"] == 20  # what Qwen3's file made the server do
    eff = record.sampling.effective
    assert (eff["top_k"], eff["min_p"], eff["repetition_penalty"]) == (None, None, None)
    assert (eff["temperature"], eff["top_p"], eff["max_tokens"], eff["presence_penalty"]) == (0.4, 1.0, 128, 0.0)
    assert len(lines) == 1 and "repetition_penalty, top_k, min_p not sent" in lines[0]
    assert "executor.repetition_penalty, executor.top_k, executor.min_p" in lines[0]


def test_vllm_without_server_info_is_assumed_auto_and_other_servers_report_nothing(loop, pool, game):
    with LocalOpenAIServer(lambda r: ANSWER, model_generation_config=QWEN3_GENERATION_CONFIG) as srv:
        record, lines = play_one(loop, pool, game, openai_sets(srv.base_url, "executor.top_k=20"))
    assert record.sampling.source.startswith("vLLM without /server_info")
    assert len(lines) == 1 and "VLLM_SERVER_DEV_MODE" in lines[0] and "repetition_penalty, min_p not sent" in lines[0]
    with LocalOpenAIServer(lambda r: ANSWER, owned_by="someone") as srv:
        record, lines = play_one(loop, pool, game, openai_sets(srv.base_url))
    assert record.sampling.source == "not reported (/server_info: 404)" and lines == []
    assert record.sampling.effective["top_k"] is None and record.sampling.effective["temperature"] == 0.4


def test_an_unmeasured_episode_still_records_what_it_sent_and_a_scripted_one_nothing(loop, pool, game):
    with LocalOpenAIServer(lambda r: ANSWER, fail=lambda i, r: 500) as srv:
        record, _ = play_one(loop, pool, game, openai_sets(srv.base_url, "executor.retries=0"))
    assert record.outcome == "unmeasured" and record.sampling.sent["max_tokens"] == 128
    scripted, _ = play_one(loop, pool, game, [])
    assert scripted.sampling is None


# ------------------------------------------------------------------------------------------------------------
# The whole path: YAML -> plan --json -> sweep rows


def spec_file(tmp_path: Path, url: str) -> tuple[Path, dict[str, int]]:
    """The smoke arm with an openai executor and every new field, written as YAML; returns (path, field -> line)."""
    data = yaml.safe_load(SMOKE.read_text())
    data["prompts"] = {k: str(EXPERIMENTS / v) for k, v in data["prompts"].items()}
    data["executor"] = {"kind": "openai", "base_url": url, "model": "m", "max_turns": 2, "max_tokens": 128}
    data["judge"] = {"kind": "openai", "base_url": url, "model": JUDGE_MODEL}
    data["retrieval"] = {"top_k": 5, "bm25": {}}
    data.setdefault("curation", {})["correctness"] = "ground_truth"  # no self-judge requests mixed into the server's log
    for key, value in NEW_FIELDS.items():
        section, *rest = key.split(".")
        node = data[section]
        for part in rest[:-1]:
            node = node.setdefault(part, {})
        node[rest[-1]] = value
    text = yaml.safe_dump(data, sort_keys=False)
    path = tmp_path / "every-field.yaml"
    path.write_text(text)
    return path, _key_lines(text)


def _key_lines(text: str) -> dict[str, int]:
    lines, stack, out = text.splitlines(), [], {}
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("-") or ":" not in line:
            continue
        indent = (len(line) - len(line.lstrip())) // 2
        stack = stack[:indent] + [line.strip().split(":", 1)[0]]
        out[".".join(stack)] = n
    return out


def test_every_new_field_round_trips_yaml_plan_json_sweep_rows_and_rollout_records(tmp_path, alfworld_data):
    judged: list[dict] = []  # the judge's requests as the server received them

    def respond(request: dict) -> str:
        if request["model"] != JUDGE_MODEL:
            return ANSWER
        judged.append({k: v for k, v in request.items() if k not in ("model", "messages")})
        return VERDICT

    with LocalOpenAIServer(respond, dev_mode=True, model_generation_config=QWEN3_GENERATION_CONFIG) as srv:
        path, lines = spec_file(tmp_path, srv.base_url)
        spec = load_spec(path)
        # YAML: dump and load again, the same spec
        again = tmp_path / "again.yaml"
        again.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
        reloaded = load_spec(again)
        assert reloaded.spec_hash() == spec.spec_hash()
        dumped = spec.model_dump(mode="json")
        for key, value in NEW_FIELDS.items():
            node = dumped
            for part in key.split("."):
                node = node[part]
            assert node == value, key
        # plan --json: every field with its value and the line it was written on
        out = subprocess.run([sys.executable, "-m", "twinrun.cli", "plan", str(path), "--json"], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        knobs = {k["name"]: k for k in json.loads(out.stdout)["rollout_knobs"]}
        for key, value in NEW_FIELDS.items():
            assert knobs[key]["value"] == value, key
            assert knobs[key]["source"] == f"spec line {lines[key]}", key
        assert knobs["executor.concurrency"]["source"] == "default"
        # records: a sweep's rows carry what the executor's calls sent and what the server applied
        from twinrun.core.sweeps.sweep import no_ops_policy_factory, sweep

        res = sweep(spec, {}, tmp_path / "sweep", data_root=alfworld_data, n_games=2, workers=0, progress=False,
                    policy_factory=no_ops_policy_factory)
        rows = list(read_jsonl(tmp_path / "sweep" / "arms" / "baseline.jsonl"))
        # records: a curation rollout's row names what its judge's requests carried
        record = curate_one_rollout(spec, alfworld_data)
    assert res.n_games == 2 and len(rows) == 2
    assert len(judged) == 1 and record.positions[0].judged == [True]
    assert record.judge.model_dump() == {
        "kind": "openai", "model": JUDGE_MODEL, "settings_hash": judge_for_experiment(spec).settings().settings_hash,
        "sent": {"temperature": 0.3, "max_tokens": 300, "chat_template_kwargs": {"enable_thinking": False}}}
    assert record.judge.sent == judged[0]
    sent = {k.split(".", 1)[1]: v for k, v in NEW_FIELDS.items() if k.startswith("executor.")}
    for row in rows:
        assert row["sampling"]["sent"] == {"temperature": 0.4, "top_p": 1.0, "max_tokens": 128,
                                           "top_k": sent["top_k"], "min_p": sent["min_p"],
                                           "presence_penalty": sent["presence_penalty"],
                                           "repetition_penalty": sent["repetition_penalty"],
                                           **sent["extra_body"]}
        assert row["sampling"]["effective"] == srv.applied[0] and row["sampling"]["sent"] == srv.received[0]
        assert row["provenance"]["spec_hash"] == spec.spec_hash()  # retrieval.bm25 is in the spec hash
        assert row["provenance"]["executor_settings_hash"] == make_executor(spec).settings_hash
    assert load_spec(path, ["retrieval.bm25.b=0.7"]).spec_hash() != spec.spec_hash()


def curate_one_rollout(spec, alfworld_data):
    """One curation rollout of the spec's first task group (its executor and judge): the curator inserts a skill
    after position 1 and does nothing after, so the judge is asked once; returns the rollout record."""
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.curation.toolcalls import format_curate_call

    body = "---\nname: find-then-place\ndescription: Find the object first, then put it in the target.\n---\n" \
           "1. Look on the receptacles listed first.\n2. Take the object and move it to the target.\n"
    with CurationRuntime.from_spec(spec, data_root=alfworld_data, workers=0) as rt:
        session = rt.session(rt.task_group(0, 0), 0)
        session.start()
        session.submit(format_curate_call([{"function": "new_skill_insert",
                                            "arguments": {"skill_name": "find-then-place", "content": body}}]))
        while not session.done:
            session.submit(format_curate_call([]))
        return session.finish().record


# ------------------------------------------------------------------------------------------------------------
# hf executor: the same fields through transformers' generate()


@pytest.mark.trl
@pytest.mark.sampling
def test_hf_decoding_reaches_generate_and_the_model_config_fills_the_rest(cache_dir):
    """top_k=1 sampling must equal greedy decoding on a random tiny Qwen3 (it would not if top_k did not reach
    generate()); unsent fields take the model's generation_config and transformers' global defaults (top_k 50),
    which the record shows and one line warns about; chat_template_kwargs reach the chat template."""
    transformers = pytest.importorskip("transformers")
    from twinrun.core.executors import HFPolicy
    from twinrun.models import build_tiny_qwen3

    path = build_tiny_qwen3(cache_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "You are in the middle of a room. Your task is to: put a mug on the desk."}]

    def policy(**kw):
        lines: list[str] = []
        return HFPolicy(str(path), max_tokens=12, model_obj=model, tokenizer=tok, warn=lines.append, **kw), lines

    greedy, _ = policy(temperature=0.0)
    target = greedy.generate(msgs, seed=0)
    top1, top1_lines = policy(temperature=1.0, top_k=1, repetition_penalty=1.0)
    assert [top1.generate(msgs, seed=s) for s in range(3)] == [target] * 3
    plain, plain_lines = policy(temperature=1.0)
    assert any(plain.generate(msgs, seed=s) != target for s in range(3))  # T=1 over the whole vocabulary

    record = plain.sampling_record()
    assert record.sent == {"max_new_tokens": 12, "do_sample": True, "temperature": 1.0, "top_p": 1.0}
    assert record.effective["top_k"] == 50 and record.effective["repetition_penalty"] == 1.0  # transformers' own
    assert record.source == f"transformers generation_config of {path}"
    assert len(plain_lines) == 1 and "top_k=50 set by the server, not by the spec" in plain_lines[0]
    stated = top1.sampling_record()
    assert stated.sent["top_k"] == 1 and stated.effective["top_k"] == 1 and top1_lines == []

    thinking_off, _ = policy(chat_template_kwargs={"enable_thinking": False})
    assert "<think>\n\n</think>" in thinking_off.render(msgs) and "<think>" not in greedy.render(msgs)
