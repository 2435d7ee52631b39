"""A checkpoint that cannot be loaded (issue 53): refused in one line before a sweep's first write, and one that goes
bad during a sweep leaves its arms unmeasured with a one-line reason while the sweep goes on."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from twinrun.core.errors import CheckpointUnreadable
from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw
from twinrun.core.sweeps.checkpoint_check import check_checkpoints, checkpoint_problem

# the null environment and the scripted executor: the checkpoint handling is under test, not the games
FAST = ["environment.name=null_env", "environment.task_types=[]", "executor.skill_effect=0", "sweep.streams=2",
        "executor.max_turns=3"]


def safetensors_bytes(n_floats: int = 64) -> bytes:
    """A valid safetensors file (one F32 tensor), written without torch: 8-byte header length, JSON header, data."""
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + b"\0" * (4 * n_floats)


def checkpoint(path: Path, *, tokenizer: bool = True) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16}))
    (path / "model.safetensors").write_bytes(safetensors_bytes())
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def run_folder(root: Path, steps: tuple[int, ...] = (1, 2)) -> Path:
    for s in steps:
        checkpoint(root / "checkpoints" / f"step-{s:06d}")
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_good_checkpoint_passes_and_each_bad_one_is_named(tmp_path: Path) -> None:
    good = checkpoint(tmp_path / "good")
    assert checkpoint_problem(good) is None
    cut = checkpoint(tmp_path / "cut")
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:60])  # inside the header
    assert "header length" in checkpoint_problem(cut) and "exceeds the file's 60 bytes" in checkpoint_problem(cut)
    short = checkpoint(tmp_path / "short")
    data = (short / "model.safetensors").read_bytes()
    (short / "model.safetensors").write_bytes(data[:-10])  # the header whole, the last tensor's bytes cut
    assert f"its tensors need {len(data)} bytes, the file has {len(data) - 10} (truncated)" in checkpoint_problem(short)
    cfg = checkpoint(tmp_path / "cfg")
    (cfg / "config.json").write_text("{not json")
    assert checkpoint_problem(cfg).startswith("config.json does not load (JSONDecodeError")
    notok = checkpoint(tmp_path / "notok", tokenizer=False)
    assert checkpoint_problem(notok).startswith("no tokenizer (tokenizer.json, tokenizer.model, ...) in the checkpoint")
    assert checkpoint_problem(notok, tokenizer_fallback=good) is None  # curator.model's tokenizer serves it
    assert checkpoint_problem(notok, tokenizer_fallback=lambda: good) is None
    (notok / "model.safetensors").unlink()
    assert checkpoint_problem(notok, tokenizer_fallback=good) == "no weight file (*.safetensors or pytorch_model.bin)"


def test_check_checkpoints_names_the_arm_and_the_fix(tmp_path: Path) -> None:
    run = run_folder(tmp_path / "trl")
    assert check_checkpoints({"trl": run}) == 2
    bad = run / "checkpoints" / "step-000002" / "model.safetensors"
    bad.write_bytes(bad.read_bytes()[:1000] if bad.stat().st_size > 1000 else bad.read_bytes()[:20])
    with pytest.raises(sw.SweepError, match=r"^checkpoint trl@2 \(.*step-000002\): model.safetensors: header length "
                       r"\d+ exceeds the file's 20 bytes .*\(fix: save the checkpoint again"):
        check_checkpoints({"trl": run})


def test_cli_sweep_refuses_a_truncated_checkpoint_before_its_first_write(tmp_path: Path, smoke_spec_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """The issue's case: model.safetensors cut to 1,000 bytes. One line, exit 2, the --out folder byte-identical
    (here a folder of the user's that already exists, and a new one that is not created)."""
    from twinrun.testing.run_folders import folder_digest, run_twinrun

    run = tmp_path / "trl"
    ck = checkpoint(run / "checkpoints" / "step-000001")
    (ck / "model.safetensors").write_bytes(safetensors_bytes(4096))  # 16 KiB, cut to 1,000 bytes below
    assert checkpoint_problem(ck) is None
    (ck / "model.safetensors").write_bytes((ck / "model.safetensors").read_bytes()[:1000])
    sets = sum((["--set", s] for s in FAST), [])
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    before = folder_digest(tmp_path)
    for where in (out, tmp_path / "new"):
        code, _, err = run_twinrun(["sweep", f"trl={run}", "--spec", smoke_spec_path, "--out", where, *sets], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(f"twinrun: error: checkpoint trl@1 ({ck}): model.safetensors: its tensors need "
                                   "16") and "has 1000 (truncated) (fix: " in lines[0], lines[0]
        assert folder_digest(tmp_path) == before


def test_a_checkpoint_that_goes_bad_during_the_sweep_leaves_its_arms_unmeasured(tmp_path: Path,
                                                                                smoke_spec_path: Path) -> None:
    """Checked fine before the sweep, unreadable when its curator loads: both its streams are written unmeasured with
    the reason, every other arm is played, and the sweep returns."""
    run = run_folder(tmp_path / "trl")
    spec = load_spec(smoke_spec_path, FAST)
    check_checkpoints({"trl": run})
    loads: list[str] = []

    def factory(arm: sw.ArmPlan, spec_: object) -> sw.CuratorPolicy:
        loads.append(arm.arm)
        if arm.checkpoint_step == 1:
            raise CheckpointUnreadable(f"checkpoint {arm.checkpoint_path}: cannot be loaded (SafetensorError: "
                                       "invalid header length; fix: save it again from its training run)")
        return sw.no_ops_policy_factory(arm, spec_)

    out = tmp_path / "sweep"
    for batch in (True, False):
        res = sw.sweep(spec.model_copy(update={"sweep": spec.sweep.model_copy(update={"batch_streams": batch})}),
                       {"trl": run}, out / str(batch), n_games=3, workers=0, policy_factory=factory, progress=False)
        for arm in ("trl@1", "trl@1#r1"):
            a = res.arms[arm]
            assert (a.rows, a.unmeasured, a.successes) == (3, 3, 0)
            assert a.unmeasured_why.startswith("checkpoint unreadable: checkpoint ")
            rows = [json.loads(x) for x in (out / str(batch) / "arms" / f"{arm}.jsonl").read_text().splitlines()]
            assert [r["outcome"] for r in rows] == ["unmeasured"] * 3
            assert {r["unmeasured_reason"] for r in rows} == {a.unmeasured_why}
            assert "\n" not in a.unmeasured_why
            for r in rows:
                sw.EvalRecord.model_validate(r)
        for arm in ("baseline", "trl@2", "trl@2#r1"):
            assert res.arms[arm].unmeasured == 0 and res.arms[arm].rows == 3
    # compare reads the unmeasured arms as unmeasured (flagged), not as failures
    from twinrun.core.compare import CompareSettings, compare

    doc = compare([out / "True"], "baseline", CompareSettings(n_boot=200))
    assert any("trl@1" in f and "3 of 3 rows unmeasured" in f for f in doc["flags"]), doc["flags"]


@pytest.mark.slow
def test_a_real_checkpoint_passes_and_its_truncated_copy_loads_as_unreadable(tmp_path: Path, cache_dir: Path,
                                                                              smoke_spec_path: Path) -> None:
    """The header check agrees with the loader: a real tiny checkpoint passes it; the same folder with its weights cut
    to 1,000 bytes is what the loader (transformers, safetensors) refuses, as CheckpointUnreadable in one line."""
    import shutil

    from twinrun.models import build_tiny_qwen3
    from twinrun.models.curator_policy import hf_policy_factory

    tiny = build_tiny_qwen3(cache_dir)
    assert checkpoint_problem(tiny) is None
    cut = tmp_path / "step-000001"
    shutil.copytree(tiny, cut)
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:1000])
    assert "exceeds the file's 1000 bytes" in checkpoint_problem(cut)
    spec = load_spec(smoke_spec_path)
    arm = sw.ArmPlan(arm="trl@1", role="checkpoint", run="trl", checkpoint_step=1, checkpoint_path=str(cut))
    with pytest.raises(CheckpointUnreadable, match=r"^checkpoint .*step-000001: cannot be loaded \(SafetensorError: "
                       r".*; fix: save it again from its training run\)$"):
        hf_policy_factory(arm, spec, cache_dir=cache_dir)
