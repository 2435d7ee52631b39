"""One dtype vocabulary (issue 53): bf16/bfloat16, fp32/float32, fp16/float16 accepted wherever a dtype is given, the
short name shown; `twinrun plan` states the sweep's evaluation dtype and says "1 stream"; `compare --looks` names the
arm that holds too few streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.errors import TwinrunError
from twinrun.core.spec import load_spec
from twinrun.core.spec.dtypes import dtype_name, torch_dtype_name
from twinrun.core.sweeps import sweep as sw


def test_both_spellings_are_accepted_everywhere_and_the_short_one_kept(smoke_spec_path: Path) -> None:
    short = load_spec(smoke_spec_path, ["curator.precision=bf16", "sweep.curator_dtype=bf16", "sft.precision=fp32"])
    long = load_spec(smoke_spec_path, ["curator.precision=bfloat16", "sweep.curator_dtype=bfloat16",
                                       "sft.precision=float32"])
    for s in (short, long):
        assert (s.curator.precision, s.sweep.curator_dtype, s.sft.precision) == ("bf16", "bf16", "fp32")
    assert short.spec_hash() == long.spec_hash()  # one dtype, one hash: a run resumes whichever spelling it is given
    assert load_spec(smoke_spec_path, ["sweep.curator_dtype=float16"]).sweep.curator_dtype == "fp16"
    with pytest.raises(TwinrunError, match=r"^sweep.curator_dtype: "):
        load_spec(smoke_spec_path, ["sweep.curator_dtype=int8"])
    with pytest.raises(TwinrunError, match=r"^curator.precision: "):
        load_spec(smoke_spec_path, ["curator.precision=fp16"])  # a training precision twinrun does not train at
    assert [dtype_name(x) for x in ("bfloat16", "BF16", "float32", "fp16")] == ["bf16", "bf16", "fp32", "fp16"]
    assert [torch_dtype_name(x) for x in ("bf16", "float32")] == ["bfloat16", "float32"]  # what torch and vLLM take


def test_a_folder_written_with_torchs_names_resumes_at_the_same_dtype(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps({
        "sweep_id": "s", "spec_name": "x", "spec_hash": "h", "split": "valid_seen", "games": [], "games_hash": "g",
        "executor_settings_hash": None, "seed": 0, "created": 0.0, "twinrun_version": "0", "curator_dtype": "float32"}))
    sw.check_curator_dtype(tmp_path, "fp32")
    sw.check_curator_dtype(tmp_path, "float32")
    with pytest.raises(sw.SweepError, match=r"^sweep.curator_dtype: bf16, but .* evaluated at fp32 \(sweep.json\) "
                       r"\(fix: --set sweep.curator_dtype=fp32 to resume it"):
        sw.check_curator_dtype(tmp_path, "bfloat16")


def test_plan_states_the_evaluation_dtype_and_one_stream(smoke_spec_path: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    res = CliRunner().invoke(app, ["plan", str(smoke_spec_path), "--set", "sweep.streams=1"])
    text = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert " x 1 stream x 32 games" in text and "1 streams" not in text
    assert "every checkpoint evaluated at fp32 (the CPU default; on a GPU curator.precision's fp32)" in text
    res = CliRunner().invoke(app, ["plan", str(smoke_spec_path), "--set", "sweep.curator_dtype=bfloat16", "--json"])
    cost = json.loads(res.output)["sweep_cost"]
    assert (cost["curator_dtype"], cost["dtype_source"], cost["streams"]) == ("bf16", "sweep.curator_dtype", 2)


def test_looks_name_the_arm_that_holds_too_few_streams(tmp_path: Path) -> None:
    from twinrun.core.compare import CompareError, CompareSettings
    from twinrun.core.compare.looks import replay_inputs
    from twinrun.core.compare.synthetic import synthetic_game_table, write_sweep

    t = synthetic_game_table({"trl": [0.0, 0.1, 0.2]}, n_games=10, streams=4, baseline_streams=1, seed=1)
    folder = write_sweep(t, tmp_path / "sweep")
    with pytest.raises(CompareError, match=r"^--looks: arm 'baseline' of .* holds 1 stream \(other arms up to 4\); "
                       r"looks need >= 2 streams of every arm, the baseline's too \(fix: "):
        replay_inputs([folder], "baseline", CompareSettings(n_boot=200), [2, 4])
