"""The TRL environment: the exact tool surface TRL discovers and renders, and the session broker (real ALFWorld)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from twinrun.backends.trl.environment import (
    TOOL_NAMES,
    CuratorEnvironment,
    SessionBroker,
    check_tool_surface,
    dataset_row,
    environment_tools,
)
from twinrun.core.errors import TwinrunError
from twinrun.core.curation.toolcalls import CURATE_TOOL

pytestmark = pytest.mark.trl


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(tmp_path_factory.mktemp("models"))


def _trainer(tiny_model, tmp_path, cls=None, env_type=CuratorEnvironment):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    broker = SessionBroker(runtime=None, final_result="END")  # type: ignore[arg-type]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", max_steps=1,
                      num_generations=2, per_device_train_batch_size=2, max_completion_length=16)
    kwargs = dict(model=str(tiny_model), args=args, processing_class=tok, reward_funcs=[lambda **k: [0.0]],
                  environment_factory=lambda: env_type(broker))
    if cls is None:
        return GRPOTrainer(**kwargs)
    from twinrun.core.advantages import PRESETS

    return cls(**kwargs, broker=broker, estimator=PRESETS["trl"].config, updates_per_step=1)


def test_trl_discovers_exactly_the_curate_tool(tiny_model, tmp_path):
    trainer = _trainer(tiny_model, tmp_path)
    # TRL's own discovery (inspect.getmembers over the class, public functions but reset/get_reward)
    assert [t.__name__ for t in trainer._env_tools[None]] == list(TOOL_NAMES) == ["curate"]
    assert [t.__name__ for t in trainer.tools] == ["curate"]
    assert len(trainer.reward_funcs) == 1  # no get_reward: reward_weights=[1.0] stays one function
    assert environment_tools(CuratorEnvironment) == ["curate"]
    check_tool_surface()


def test_a_public_helper_would_become_a_tool_and_is_refused(tiny_model, tmp_path):
    class Leaky(CuratorEnvironment):
        def summary(self) -> str:
            """A helper that must not be a tool.

            Returns:
                text
            """
            return ""

    trainer = _trainer(tiny_model, tmp_path, env_type=Leaky)
    assert sorted(t.__name__ for t in trainer._env_tools[None]) == ["curate", "summary"]  # what TRL would do
    with pytest.raises(TwinrunError, match="summary"):
        check_tool_surface(Leaky)


def test_the_prompt_renders_cores_curate_schema(tiny_model, tmp_path):
    from twinrun.backends.trl.trainer import TwinrunGRPOTrainer

    trainer = _trainer(tiny_model, tmp_path, cls=TwinrunGRPOTrainer)
    assert trainer._env_tools[None] == [CURATE_TOOL]
    trainer._batch_environments = [None]
    ids, _, _ = trainer._tokenize_prompts([[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]])
    text = trainer.processing_class.decode(ids[0])
    assert json.dumps(CURATE_TOOL, ensure_ascii=False) in text
    assert text.count('"name": "curate"') == 1  # one tool; the three operations live inside its schema


# ------------------------------------------------------------------------------------------------------------
# The broker with real sessions (ALFWorld, scripted executor, engines in this process)


def _insert(name: str) -> list[dict]:
    return [{"function": "new_skill_insert",
             "arguments": {"skill_name": name, "content": f"---\nname: {name}\ndescription: d\n---\n# Steps\n1. go"}}]


def _assistant(ops: list[dict] | None) -> dict:
    msg = {"role": "assistant", "content": ""}
    if ops is not None:
        msg["tool_calls"] = [{"type": "function", "function": {"name": "curate", "arguments": {"operations": ops}}}]
    return msg


@pytest.mark.slow
@pytest.mark.alfworld
def test_broker_prefetches_every_samples_turn_and_logs_segments(alfworld_data, repo_root):
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.spec import load_spec

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["environment.group_size=2", "executor.max_turns=3"])
    runtime = CurationRuntime.from_spec(spec, data_root=alfworld_data, workers=0, judge=None)
    try:
        broker = SessionBroker(runtime, final_result="END")
        group = runtime.task_group(0, 0)
        rows = [dict(dataset_row(group, []), rollout_index=i) for i in range(2)]
        broker.begin_batch(rows)
        envs = [broker.new_environment() for _ in rows]
        firsts = [e.reset(**r) for e, r in zip(envs, rows)]
        assert all("## Agent Trajectory" in x for x in firsts)
        assert broker.stats.wall_s["executor_first_position"] > 0

        # round 0 as TRL holds it: sample 0 inserts a skill, sample 1 keeps the repo
        completions = [[_assistant(_insert("pick-a"))], [_assistant([])]]
        broker.environments, broker.live_completions = envs, completions
        out0 = envs[0].curate(operations=_insert("pick-a"))
        # the first call submitted both samples' turns; sample 1's result is waiting
        assert broker.stats.prefetched_calls == 1 and len(envs[1]._pending) == 1
        out1 = envs[1].curate(operations=[])
        assert broker.stats.prefetched_calls == 2 and broker.stats.direct_calls == 0
        assert "## Agent Trajectory" in out0 and "## Agent Trajectory" in out1  # chi_2

        # round 1: sample 0 calls again (the last position), sample 1 stops calling
        completions[0] += [{"role": "tool", "name": "curate", "content": out0}, _assistant([])]
        completions[1] += [{"role": "tool", "name": "curate", "content": out1}, _assistant(None)]
        assert envs[0].curate(operations=[]) == "END"
        # a call TRL makes that differs from its completions falls back to a direct submit (after the end: ignored)
        assert envs[0].curate(operations=_insert("late")) == "END"
        assert broker.stats.direct_calls == 1

        results = broker.finish_batch(envs)
        assert [(t.segment, t.position) for t in envs[0]._turns] == [(0, 1), (1, 2), (None, 3)]
        assert [(t.segment, t.position) for t in envs[1]._turns] == [(0, 1)]
        r0, r1 = (r.record for r in results)
        assert r0.ops_applied == 1 and r0.turns_missing == 0 and r0.extra_turns_ignored == 1
        assert r1.turns_missing == 1  # position 2 was played by finish() with no operations
        # r_fc per position: sample 0 = (1 valid insert + curate([]) no op) / 2; sample 1 = curate([]), then no turn
        assert r0.reward.r_fc.value == pytest.approx(0.5) and r1.reward.r_fc.value == 0.0
        assert r0.executor_episodes == r1.executor_episodes == 2
        assert broker.reward_function()(environments=envs) == [r.total for r in results]
    finally:
        runtime.close()


@pytest.mark.slow
@pytest.mark.alfworld
def test_one_valid_call_then_stopping_earns_one_position_of_r_fc(alfworld_data, repo_root):
    """The early-stop exploit through TRL's broker: one valid insert, then the curator stops calling (plain text,
    a malformed call, an unknown tool at the iteration cap and the completion cap all look like this to the
    environment: no more curate calls). finish() plays the rest; r_fc = 1/|G|, where pooling paid the full weight."""
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.spec import load_spec

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["executor.max_turns=2"])
    g = spec.environment.group_size
    runtime = CurationRuntime.from_spec(spec, data_root=alfworld_data, workers=0, judge=None)
    try:
        broker = SessionBroker(runtime, final_result="END")
        rows = [dict(dataset_row(runtime.task_group(0, 0), []), rollout_index=0)]
        broker.begin_batch(rows)
        (env,) = [broker.new_environment()]
        env.reset(**rows[0])
        broker.environments, broker.live_completions = [env], [[_assistant(_insert("pick-a"))]]
        env.curate(operations=_insert("pick-a"))
        (result,) = broker.finish_batch([env])
    finally:
        runtime.close()
    rec = result.record
    assert rec.turns_missing == g - 1 and rec.ops_applied == 1
    assert result.reward.r_fc.value == pytest.approx(1 / g)
    pooled = result.reward_under(spec.reward.model_copy(update={"call_pooling": "pooled"}))
    assert pooled.r_fc.value == 1.0  # the exploit the per-position reading closes


@pytest.mark.slow
@pytest.mark.alfworld
def test_a_prefetched_turn_that_differs_from_trls_call_raises(alfworld_data, repo_root):
    """The broker applied sample 1's turn as read from TRL's completions; if TRL then calls curate with other
    arguments, submitting them too would apply them to the next position: an error, never a silent shift."""
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.errors import TwinrunError
    from twinrun.core.spec import load_spec

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["environment.group_size=2", "executor.max_turns=2"])
    runtime = CurationRuntime.from_spec(spec, data_root=alfworld_data, workers=0, judge=None)
    try:
        broker = SessionBroker(runtime, final_result="END")
        rows = [dict(dataset_row(runtime.task_group(0, 0), []), rollout_index=i) for i in range(2)]
        broker.begin_batch(rows)
        envs = [broker.new_environment() for _ in rows]
        for e, r in zip(envs, rows):
            e.reset(**r)
        broker.environments, broker.live_completions = envs, [[_assistant(_insert("pick-a"))], [_assistant([])]]
        envs[0].curate(operations=_insert("pick-a"))  # submits both samples' turns
        with pytest.raises(TwinrunError, match=r"rollout .*/r1 position 1: TRL called curate with .* but its "
                                               r"completion held .*already applied"):
            envs[1].curate(operations=_insert("pick-b"))
        assert broker.stats.prefetch_mismatches == 1 and envs[1]._session.position == 2  # nothing else applied
    finally:
        runtime.close()


def test_broker_refuses_duplicate_rollouts():
    broker = SessionBroker(runtime=None, final_result="END")  # type: ignore[arg-type]
    rows = [{"group_id": "g", "rollout_index": 0, "task_group": "{}"}] * 2
    with pytest.raises(TwinrunError, match="repeats"):
        broker.begin_batch(rows)
