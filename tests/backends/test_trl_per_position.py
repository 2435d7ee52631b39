"""The TRL backend with curator.context=per_position (the paper's Markov curator) on CPU: the smoke arm, 2 steps,
one training row per (rollout, position) through GRPOTrainer's stock rollout_func. The rows the loss saw are held
to core's records: prompt token ids = the tokenizer's rendering of core's messages for that position, advantage =
core's per-row advantage (tests/backends/conftest.py, shared with the verl test)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from twinrun.core.records import RunPaths, read_jsonl  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.alfworld, pytest.mark.sampling]

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


def test_per_position_trains_two_steps_with_plans_counts(spec, run, assert_two_steps_at_plans_counts):
    from twinrun.backends.trl.compile import compile_spec

    out, summary = run
    counts = compile_spec(spec).counts
    assert counts["training_rows"] == counts["curation_trajectories"] * spec.environment.group_size
    assert_two_steps_at_plans_counts(out, summary, counts)
    assert len(list(read_jsonl(RunPaths(out).rollouts))) == 2 * counts["curation_trajectories"]


def test_trained_rows_are_cores_position_inputs_with_cores_advantages(spec, run, per_position_rows_check):
    from transformers import AutoTokenizer

    from twinrun.backends.trl.compile import compile_spec

    out, _ = run
    tok = AutoTokenizer.from_pretrained(RunPaths(out).checkpoint(2))
    n = per_position_rows_check(out, spec, tok, "trl", compile_spec(spec).counts["training_rows"])
    assert n == 2 * compile_spec(spec).counts["training_rows"]


def test_gigpo_rows_train_with_cores_advantages_not_trls(repo_root, cache_dir, alfworld_data, tmp_path, monkeypatch):
    """estimator: gigpo under per_position, one TRL step: every row the loss (``_compute_loss``) weighs carries core's
    advantage for that (rollout, position), A^E + A^S rebuilt here from rollouts.jsonl alone, whatever the tiny model
    sampled; rows are matched to core's records by their token ids. Fails if the trainer stops handing core's
    advantages to TRL: TRL's own advantage is the rollout's total against its GRPO block, one value on every position
    (under GRPO with scale none it equals core's and cannot tell). So that the two differ whatever is sampled (a step-1
    curator whose calls all fail leaves every rollout of a group the same reward, and then any estimator gives 0), each
    row is its own step group (anchor: exact_input) and keeps its return as A^S (anchor_singleton: raw): core's
    advantage is A^E plus the row's return-to-go, which r_comp keeps above 0 while the repo is smaller than the input."""
    from collections import defaultdict

    import numpy as np

    from twinrun.backends.trl.per_position import PerPositionGRPOTrainer
    from twinrun.backends.trl.train import train
    from twinrun.core.advantages.training_rows import rollout_rows, row_advantages

    gigpo = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                      [*PER_POSITION, "steps=1", "checkpoint_every=1", "algorithm.estimator=gigpo",
                       "algorithm.gigpo.anchor=exact_input", "algorithm.gigpo.anchor_singleton=raw"])
    Key = tuple[tuple[int, ...], tuple[int, ...]]
    seen: dict[Key, list[float]] = defaultdict(list)  # what the loss weighed each row with
    trl_own: dict[Key, list[float]] = defaultdict(list)  # what TRL's own scoring gave each row
    original_loss = PerPositionGRPOTrainer._compute_loss
    original_score = PerPositionGRPOTrainer._generate_and_score_completions

    def keys(batch) -> list[Key]:
        pmask, cmask = batch["prompt_mask"].bool(), batch["completion_mask"].bool()
        return [(tuple(batch["prompt_ids"][i][pmask[i]].tolist()), tuple(batch["completion_ids"][i][cmask[i]].tolist()))
                for i in range(batch["prompt_ids"].shape[0])]

    def observed_loss(self, model, inputs):
        adv = inputs["advantages"]
        assert adv.dim() == 1, "per_position: one advantage per row"
        for key, a in zip(keys(inputs), adv.tolist(), strict=True):
            seen[key].append(a)
        return original_loss(self, model, inputs)

    def observed_score(self, inputs):
        out = original_score(self, inputs)
        if self.model.training:
            for key, a in zip(keys(out), self.last_trl_advantages.tolist(), strict=True):
                trl_own[key].append(a)
        return out

    monkeypatch.setattr(PerPositionGRPOTrainer, "_compute_loss", observed_loss)
    monkeypatch.setattr(PerPositionGRPOTrainer, "_generate_and_score_completions", observed_score)
    out = tmp_path / "trl-pp-gigpo"
    train(gigpo, out, cache_dir=cache_dir, data_root=alfworld_data)

    records = list(read_jsonl(RunPaths(out).rollouts))
    want: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = defaultdict(list)
    scores = [s for r in records
              for s in rollout_rows(r["group_id"], f"{r['group_id']}#{r['rollout_index']}", total=r["reward"]["total"],
                                    step_rewards=r["step_rewards"], anchors=r["anchors"],
                                    position_valid=[not p["no_valid_call"] for p in r["positions"]])]
    tokens = [(tuple(q["prompt_ids"]), tuple(q["completion_ids"])) for r in records for q in r["sequences"]]
    for key, a in zip(tokens, row_advantages(gigpo.algorithm, scores), strict=True):
        want[key].append(float(a))
    rows = gigpo.batch.groups_per_step * gigpo.batch.rollouts_per_group * gigpo.environment.group_size
    assert sum(len(v) for v in seen.values()) == sum(len(v) for v in want.values()) == rows
    assert seen.keys() == want.keys()  # every row the loss saw is a (rollout, position) core recorded, and back
    for key in want:  # rows with equal tokens (if any) are compared as a multiset
        np.testing.assert_allclose(sorted(seen[key]), sorted(want[key]), atol=1e-6)
    # the run can tell: TRL's own advantage differs from core's on some row (else the check above proves nothing)
    assert trl_own.keys() == want.keys()
    assert max(abs(a - b) for key in want for a, b in zip(sorted(trl_own[key]), sorted(want[key]))) > 1e-3, trl_own
