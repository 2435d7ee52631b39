"""Backend tests' shared helpers. ``per_position_rows_check``: the per_position rows a backend trained (rows.jsonl,
kept with their tokens) against core's records (rollouts.jsonl); the TRL and verl training tests use the same one,
so both backends are held to the same statement."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from twinrun.core.curation.context_shape import ids_digest, input_digest, prompt_token_ids
from twinrun.core.curation import CuratorPrompts
from twinrun.core.records import RunPaths, StepMetrics, read_jsonl
from twinrun.core.curation.toolcalls import CURATE_TOOL
from twinrun.core.advantages.training_rows import rollout_rows, row_advantages, rows_by_key


def check_per_position_rows(run: Path, spec: Any, tokenizer: Any, backend: str, rows_per_step: int,
                            token_advantages: bool = False) -> int:
    """Every (rollout, position) of every step has exactly one trained row whose prompt token ids are the tokenizer's
    rendering of core's messages for that position (system + chi_p, chi_p traced to core's record by digest), and
    whose advantage is core's per-row advantage for the step; rollouts.jsonl's ``sequences`` hold the same tokens,
    one per position. ``token_advantages``: the row also records every loss token's advantage (verl), and each one
    is core's. Returns the number of rows checked."""
    paths = RunPaths(run)
    trained = list(read_jsonl(paths.rows))
    rows = rows_by_key(trained)  # a row trained twice in a step is refused
    system = CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input")).system
    by_step: dict[int, list[tuple[Any, dict[str, Any]]]] = defaultdict(list)
    for rec in read_jsonl(paths.rollouts):
        step = int(rec["step"]) + 1  # rollouts.jsonl: 0-based training step; rows.jsonl: 1-based
        valid = [not p["no_valid_call"] for p in rec["positions"]]
        scores = rollout_rows(rec["group_id"], f"{rec['group_id']}#{rec['rollout_index']}",
                              total=rec["reward"]["total"], step_rewards=rec["step_rewards"],
                              anchors=rec["anchors"], position_valid=valid)
        seqs = rec["sequences"]  # the tokens trained on, one sequence per position (`twinrun parity`)
        assert len(seqs) == len(rec["positions"]), (step, rec["group_id"], rec["rollout_index"])
        for p, score, seq in zip(rec["positions"], scores, seqs, strict=True):
            row = rows[(step, rec["group_id"], int(rec["rollout_index"]), int(p["index"]))]
            assert seq["prompt_ids"] == row["prompt_ids"] and seq["completion_ids"] == row["completion_ids"]
            assert seq["completion_mask"] == [1] * len(seq["completion_ids"])
            assert row["backend"] == backend and row["context"] == "per_position"
            msgs = row["messages"]
            assert msgs[0] == {"role": "system", "content": system} and len(msgs) == 2  # history 0
            assert msgs[-1]["role"] == "user" and input_digest(msgs[-1]["content"]) == p["input_digest"]
            assert row["prompt_ids"] == prompt_token_ids(tokenizer, msgs, [CURATE_TOOL]), (step, p["index"])
            assert row["prompt_digest"] == ids_digest(row["prompt_ids"])
            assert 0 < row["completion_tokens"] <= spec.curator.max_response_tokens
            by_step[step].append((score, row))
    assert sum(len(v) for v in by_step.values()) == len(trained), "rows.jsonl holds rows core has no record of"
    for step, pairs in by_step.items():
        assert len(pairs) == rows_per_step, (step, len(pairs))
        want = row_advantages(spec.algorithm, [s for s, _ in pairs])
        got = np.array([r["advantage"] for _, r in pairs])
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"step {step}")
        if token_advantages:
            for (_, row), a in zip(pairs, want, strict=True):
                runs = row["token_advantages"]  # [value, tokens] runs over every loss-carrying token
                assert sum(n for _, n in runs) == row["completion_tokens"], (step, row["position"])
                values = np.concatenate([np.full(int(n), v) for v, n in runs])
                np.testing.assert_allclose(values, a, atol=1e-5, err_msg=f"step {step} row {row['position']}")
    return len(trained)


@pytest.fixture
def per_position_rows_check():
    return check_per_position_rows


def _assert_two_steps_at_plans_counts(out: Path, summary: dict[str, Any], counts: dict[str, int]) -> None:
    """A 2-step run wrote steps 1 and 2, checkpointed step 2, and every step's metrics row holds plan's counts."""
    metrics = [StepMetrics.model_validate(r) for r in read_jsonl(RunPaths(out).metrics)]
    assert [m.step for m in metrics] == [1, 2] and summary["checkpoints"] == [2]
    for m in metrics:
        assert m.curation_rollouts == counts["curation_trajectories"]
        assert m.executor_episodes == counts["executor_episodes"]
        assert m.optimizer_updates == counts["optimizer_updates"] and m.grad_norm is not None


@pytest.fixture
def assert_two_steps_at_plans_counts():
    return _assert_two_steps_at_plans_counts


def saved_weight_dtypes(checkpoint: Path) -> set[str]:
    """The floating dtypes of a checkpoint's saved tensors as safetensors records them ("F32", "BF16"), read from
    the files (not from config.json, which says what the writer believed)."""
    from twinrun.models.checkpoint_dtype import saved_floating_dtypes

    assert sorted(Path(checkpoint).glob("*.safetensors")), f"{checkpoint} holds no safetensors file"
    return saved_floating_dtypes(checkpoint)


@pytest.fixture
def weight_dtypes():
    return saved_weight_dtypes


def _assert_checkpoints_at_master_dtype(out, summary) -> None:
    """Every exported checkpoint of a run holds fp32 (master) weights and its config.json says float32 (issue 29)."""
    import json

    from twinrun.core.records import RunPaths

    for step in summary["checkpoints"]:
        ckpt = RunPaths(out).checkpoint(step)
        assert saved_weight_dtypes(ckpt) == {"F32"}, (step, saved_weight_dtypes(ckpt))
        assert json.loads((ckpt / "config.json").read_text())["dtype"] == "float32"


@pytest.fixture
def assert_checkpoints_at_master_dtype():
    return _assert_checkpoints_at_master_dtype


@pytest.fixture(scope="session")
def forced_curator(cache_dir, tmp_path_factory):
    """``forced_curator(spec) -> folder``: the tiny Qwen3 whose turns are forced to valid curate calls
    (twinrun/models/forced_turns.py: insert, update, delete, then the closing reply). Plumbing tests train it with
    ``curator.model=<folder>`` so that what they check (counts, records, ops reaching a repository, advantages,
    resume) holds on every CPU, not only where the tiny model happens to sample a valid call (issue 34). Its weights
    are the random tiny model's: the forced tokens do not depend on them, and no warm start has to be built first
    (what the warm start teaches is checked by test_warmstart.py, as a rate)."""
    from twinrun.models import build_tiny_qwen3
    from twinrun.models.forced_turns import curate_turns, forced_curator_folder

    root = tmp_path_factory.mktemp("forced")

    def build(spec: Any) -> Path:
        folder = root / f"forced-tiny-qwen3-g{spec.environment.group_size}"
        if not folder.is_dir():
            forced_curator_folder(build_tiny_qwen3(cache_dir), folder, curate_turns(spec.environment.group_size))
        return folder

    return build
