"""The verl backend with curator.context=per_position on CPU: the smoke arm, 2 steps; the agent loop returns one
row per (rollout, position) on verl's TransferQueue path, the twinrun_rows trainer counts mini-batches in rows.
The rows the actor trained (rows.jsonl, read back from the TransferQueue after the advantage step) are held to
core's records exactly as the TRL backend's are (tests/backends/conftest.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from twinrun.core.records import RunPaths  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.verl, pytest.mark.alfworld, pytest.mark.sampling]

PER_POSITION = ["curator.context=per_position", "curator.history=0", "steps=2", "checkpoint_every=2"]


@pytest.fixture(scope="module")
def spec(repo_root):
    return load_spec(repo_root / "experiments" / "smoke-cpu.yaml", PER_POSITION)


@pytest.fixture(scope="module")
def run(spec, cache_dir, tmp_path_factory):
    from twinrun.backends.verl.train import train

    out = tmp_path_factory.mktemp("runs") / "verl-pp"
    return out, train(spec, out, cache_dir=cache_dir, keep_row_tokens=True)


def test_per_position_trains_two_steps_with_plans_counts(spec, run, assert_two_steps_at_plans_counts):
    from twinrun.backends.verl.compile import compile_spec

    out, summary = run
    counts = compile_spec(spec).counts
    assert_two_steps_at_plans_counts(out, summary, counts)


def test_trained_rows_are_cores_position_inputs_with_cores_advantages(spec, run, per_position_rows_check):
    from transformers import AutoTokenizer

    from twinrun.backends.verl.compile import compile_spec

    out, _ = run
    tok = AutoTokenizer.from_pretrained(RunPaths(out).checkpoint(2))
    # every loss token's advantage, not only each row's first (rows.jsonl's token_advantages)
    n = per_position_rows_check(out, spec, tok, "verl", compile_spec(spec).counts["training_rows"],
                                token_advantages=True)
    assert n == 2 * compile_spec(spec).counts["training_rows"]
