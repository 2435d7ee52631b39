"""Streams in one batch (sweep.batch_streams): a checkpoint's R streams advance together, one curator call per game
for all R inputs, and write the rows the one-at-a-time path writes.

How equality is tested without depending on which token a model samples:
- the **rows**: the same sweep played batched and one at a time with ``inserting_curator`` (a scripted stand-in for a
  checkpoint: its turn is a function of the curator input, so every repository grows and any difference in order,
  seeds, repositories or resume shows in the rows) must be equal row for row, but for wall-clock fields;
- the **batched generation** on the real tiny Qwen3: left padding changes only numerics. The logits of each row in
  a left-padded batch equal the row's logits alone within 1e-4, for prompts of several lengths (longer than the
  model's sliding window) and along a continuation fed to both (teacher forcing: the same tokens either way);
- the **seeds**: each row of a batch samples with its own stream's seed: rows with the same prompt and seed
  draw the same tokens, and every batch request carries its stream's curator seed from sweep.json.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from twinrun.core.curation.toolcalls import format_curate_call
from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw

FAST = ["executor.max_turns=2", "sweep.streams=3"]
WALL_CLOCK = {"time", "wall_s", "started_at"}  # when and how long: the only fields allowed to differ


def checkpoint_folder(path: Path, seed: int) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "seed": seed}))
    (path / "model.safetensors").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 64)
    return path


def _turn(curator_input: str) -> str:
    name = "skill-" + hashlib.sha256(curator_input.encode()).hexdigest()[:8]
    content = f"---\nname: {name}\ndescription: what was learned from one game\n---\n# Workflow\n1. look around\n"
    return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}])


def inserting_curator(arm: sw.ArmPlan, spec: object) -> sw.CuratorPolicy:
    """Scripted stand-in for a checkpoint, one call at a time: one new skill per game."""
    return lambda curator_input: _turn(curator_input)


class BatchingCurator:
    """The same scripted turns through the batch interface; notes every batch's requests (input, seed)."""

    calls: list[list[tuple[str, int]]] = []

    def __init__(self, arm: sw.ArmPlan, spec: object):
        pass

    def __call__(self, curator_input: str) -> str:
        return _turn(curator_input)

    def batch(self, requests):
        BatchingCurator.calls.append([(x, seed) for x, _, seed in requests])
        return [_turn(x) for x, _, _ in requests]


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in WALL_CLOCK}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _rows(out: Path) -> dict[str, list[dict]]:
    return {p.stem: [_strip(json.loads(x)) for x in p.read_text().splitlines()] for p in sorted((out / "arms").glob("*.jsonl"))}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "trl"
    for step in (1, 2):
        checkpoint_folder(root / "checkpoints" / f"step-{step:06d}", step)
    return root


@pytest.mark.alfworld
def test_batched_streams_write_the_rows_of_the_one_at_a_time_path_and_resume(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path) -> None:
    def play(out: Path, batch: bool, factory) -> None:
        spec = load_spec(smoke_spec_path, FAST + [f"sweep.batch_streams={str(batch).lower()}"])
        sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=3, workers=0, progress=False,
                 policy_factory=factory)

    play(tmp_path / "one", False, inserting_curator)
    BatchingCurator.calls = []
    play(tmp_path / "batched", True, BatchingCurator)
    one, batched = _rows(tmp_path / "one"), _rows(tmp_path / "batched")
    assert set(one) == set(batched) and len(one) == 9  # 3 streams x (2 checkpoints + baseline)
    for arm in one:  # the same rows, but for the sweep id the manifest drew
        assert [{**r, "sweep_id": None} for r in one[arm]] == [{**r, "sweep_id": None} for r in batched[arm]], arm
    assert all(r["repo_skills"] == r["position"] - 1 for r in one["trl@2#r2"])  # every repository grew
    # one curator call per checkpoint and game, for its 3 streams, each with its stream's curator seed
    plan = sw.load_plan(tmp_path / "batched")
    seeds = [sp.curator_seed for sp in plan.stream_plans]
    assert len(BatchingCurator.calls) == 2 * 3 and all(len(c) == 3 for c in BatchingCurator.calls)
    assert all([s for _, s in c] == seeds for c in BatchingCurator.calls)

    # resume in lockstep: streams cut at different rows (a torn last line in one) finish to the same rows
    arms = tmp_path / "batched" / "arms"
    for arm, keep in (("trl@1", 1), ("trl@1#r1", 2), ("trl@1#r2", 0)):
        lines = (arms / f"{arm}.jsonl").read_text().splitlines(keepends=True)
        (arms / f"{arm}.jsonl").write_text("".join(lines[:keep]) + ('{"torn' if keep == 1 else ""))
    BatchingCurator.calls = []
    play(tmp_path / "batched", True, BatchingCurator)
    again = _rows(tmp_path / "batched")
    for arm in one:
        assert [{**r, "sweep_id": None} for r in again[arm]] == [{**r, "sweep_id": None} for r in one[arm]], arm
    # the cut streams caught up in lockstep: game 1 for #r2 alone, game 2 for two streams, game 3 for all three
    assert [len(c) for c in BatchingCurator.calls] == [1, 2, 3]


@pytest.mark.slow
def test_left_padding_changes_only_numerics_and_each_row_has_its_own_seed(cache_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from twinrun.models import build_tiny_qwen3
    from twinrun.models.batched_generation import generate_rows, left_pad

    tiny = build_tiny_qwen3(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
    window = model.config.sliding_window
    g = torch.Generator().manual_seed(0)
    lengths = [37, window + 50, 2 * window + 101]  # shorter and longer than the sliding window
    prompts = [torch.randint(10, 900, (n,), generator=g).tolist() for n in lengths]
    cont = [torch.randint(10, 900, (16,), generator=g).tolist() for _ in lengths]  # fed, not sampled
    pad = 0

    def logits_alone(seq: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([seq])).logits[0]

    ids, mask, pos = left_pad([p + c for p, c in zip(prompts, cont)], pad)
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    width = ids.shape[1]
    for i, (p, c) in enumerate(zip(prompts, cont)):
        n = len(p) + len(c)
        alone = logits_alone(p + c)
        # the last prompt position and every continuation position
        diff = (batched[i, width - len(c) - 1:] - alone[n - len(c) - 1:]).abs().max().item()
        assert diff < 1e-4, (i, diff)

    # the KV-cached generation loop: its logits path is the same; each row samples with its own seed
    kw = dict(max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=None, eos_ids=[], pad_id=pad)
    rows = generate_rows(model, [prompts[0]] * 4, [7, 7, 8, 9], **kw)
    assert rows[0] == rows[1]  # same prompt, same seed, one batch: the same draws
    assert rows[2] != rows[0] and rows[3] != rows[2]  # another seed: other draws (12 tokens from ~1k)
    assert all(len(r) == 12 for r in rows)
