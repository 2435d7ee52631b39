"""`twinrun preflight SPEC --backend B`: the spec's curator cut to 2 layers (random weights from its config, its
tokenizer) runs one step of the spec's configuration through the real trainer (issue 29)."""

from __future__ import annotations

import pytest

from twinrun.core.errors import TwinrunError

pytest.importorskip("transformers")


def _deep_model(tmp_path, cache_dir, layers: int = 4):
    """A local model folder: tiny-qwen3's tokenizer with a deeper Qwen3 config (per-layer lists included)."""
    from transformers import AutoConfig, AutoTokenizer

    from twinrun.models.tiny import build_tiny_qwen3

    tiny = build_tiny_qwen3(cache_dir)
    config = AutoConfig.from_pretrained(tiny)
    config.num_hidden_layers = layers
    config.layer_types = ["sliding_attention", "full_attention"] * (layers // 2)
    folder = tmp_path / "deep"
    config.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(folder)
    return folder, config


def test_cut_model_keeps_the_architecture_at_two_layers(tmp_path, cache_dir):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from twinrun.app.preflight import cut_model

    deep, config = _deep_model(tmp_path, cache_dir)
    out = cut_model(str(deep), tmp_path / "cut")
    cut = AutoConfig.from_pretrained(out)
    assert cut.num_hidden_layers == 2 and cut.layer_types == config.layer_types[:2]
    for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "max_position_embeddings"):
        assert getattr(cut, k) == getattr(config, k), k
    model = AutoModelForCausalLM.from_pretrained(out)
    assert len(model.model.layers) == 2 and model.dtype.is_floating_point
    assert AutoTokenizer.from_pretrained(out).chat_template == AutoTokenizer.from_pretrained(deep).chat_template


def test_a_model_whose_files_are_not_here_is_refused_in_one_line(tmp_path):
    from twinrun.app.preflight import cut_model

    with pytest.raises(TwinrunError, match=r"curator.model: 'twinrun-test/absent'.* not here") as e:
        cut_model("twinrun-test/absent", tmp_path / "cut")
    assert "\n" not in str(e.value)


def test_preflight_never_writes_into_a_used_folder(repo_root, tmp_path):
    from twinrun.app.preflight import preflight
    from twinrun.core.spec import load_spec

    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(TwinrunError, match="--out: .* is not empty"):
        preflight(lambda extra: load_spec(repo_root / "experiments" / "smoke-cpu.yaml", extra), "trl", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.txt"]


@pytest.mark.slow
@pytest.mark.alfworld
@pytest.mark.parametrize("backend", [pytest.param("trl", marks=pytest.mark.trl),
                                     pytest.param("verl", marks=pytest.mark.verl)])
def test_preflight_runs_one_step_of_the_smoke_arm(repo_root, tmp_path, cache_dir, alfworld_data, backend,
                                                 weight_dtypes):
    pytest.importorskip(backend)
    from twinrun.app.preflight import preflight
    from twinrun.core.records import RunPaths, read_jsonl
    from twinrun.core.spec import load_spec

    out = tmp_path / "pf"
    summary = preflight(lambda extra: load_spec(repo_root / "experiments" / "smoke-cpu.yaml", extra), backend, out,
                        cache_dir=cache_dir)
    run = RunPaths(out / "run")
    assert [r["step"] for r in read_jsonl(run.metrics)] == [1]
    assert "cut-model" in run.spec.read_text()  # the run trained the cut curator
    assert weight_dtypes(run.checkpoint(1)) == {"F32"}  # the spec's master precision
    assert summary["model"].endswith("cut-model")
