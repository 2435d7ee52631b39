"""The TRL backend with curator.context=per_position (the paper's Markov curator) on CPU: the smoke arm, 2 steps,
one training row per (rollout, position) through GRPOTrainer's stock rollout_func. The rows the loss saw are held
to core's records: prompt token ids = the tokenizer's rendering of core's messages for that position, advantage =
core's per-row advantage (tests/backends/conftest.py, shared with the verl test)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from twinrun.core.records import RunPaths, StepMetrics, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.alfworld]

PER_POSITION = ["curator.context=per_position", "curator.history=0", "steps=2", "checkpoint_every=2"]


@pytest.fixture(scope="module")
def spec(repo_root):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", PER_POSITION)


@pytest.fixture(scope="module")
def run(spec, cache_dir, alfworld_data, tmp_path_factory):
    from twinrun.backends.trl.train import train

    out = tmp_path_factory.mktemp("runs") / "trl-pp"
    summary = train(spec, out, cache_dir=cache_dir, data_root=alfworld_data, keep_row_tokens=True)
    return out, summary


def test_per_position_trains_two_steps_with_plans_counts(spec, run):
    from twinrun.backends.trl.compile import compile_spec

    out, summary = run
    counts = compile_spec(spec).counts
    assert counts["training_rows"] == counts["curation_trajectories"] * spec.environment.group_size
    metrics = [StepMetrics.model_validate(r) for r in read_jsonl(RunPaths(out).metrics)]
    assert [m.step for m in metrics] == [1, 2] and summary["checkpoints"] == [2]
    for m in metrics:
        assert m.curation_rollouts == counts["curation_trajectories"]
        assert m.executor_episodes == counts["executor_episodes"]
        assert m.optimizer_updates == counts["optimizer_updates"] and m.grad_norm is not None
    assert len(list(read_jsonl(RunPaths(out).rollouts))) == 2 * counts["curation_trajectories"]


def test_trained_rows_are_cores_position_inputs_with_cores_advantages(spec, run, per_position_rows_check):
    from transformers import AutoTokenizer

    from twinrun.backends.trl.compile import compile_spec

    out, _ = run
    tok = AutoTokenizer.from_pretrained(RunPaths(out).checkpoint(2))
    n = per_position_rows_check(out, spec, tok, "trl", compile_spec(spec).counts["training_rows"])
    assert n == 2 * compile_spec(spec).counts["training_rows"]
