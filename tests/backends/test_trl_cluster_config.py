"""The cluster launch files (they cannot run here): parsed by accelerate's, DeepSpeed's and TRL's own loaders."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest
import yaml

pytest.importorskip("accelerate")
pytest.importorskip("trl")

pytestmark = pytest.mark.trl

CLUSTER = Path(__file__).resolve().parents[2] / "experiments" / "cluster"


def test_accelerate_config_is_valid_zero3():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    cfg = load_config_from_file(str(CLUSTER / "trl-accelerate-zero3.yaml"))  # rejects unknown keys
    assert cfg.distributed_type == DistributedType.DEEPSPEED
    assert cfg.mixed_precision == "bf16" and cfg.use_cpu is False
    ds = cfg.deepspeed_config
    assert ds["zero_stage"] == 3 and ds["zero3_init_flag"] is True
    assert ds["zero3_save_16bit_model"] is True  # exported checkpoints hold whole HF weights
    assert ds["deepspeed_multinode_launcher"] == "standard"
    assert cfg.num_processes % cfg.num_machines == 0


def test_deepspeed_accepts_the_zero3_section_accelerate_builds():
    from accelerate.utils import DeepSpeedPlugin
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    ds = yaml.safe_load((CLUSTER / "trl-accelerate-zero3.yaml").read_text())["deepspeed_config"]
    plugin = DeepSpeedPlugin(
        zero_stage=ds["zero_stage"], zero3_init_flag=ds["zero3_init_flag"],
        zero3_save_16bit_model=ds["zero3_save_16bit_model"],
        offload_optimizer_device=ds["offload_optimizer_device"], offload_param_device=ds["offload_param_device"],
    )
    zero = DeepSpeedZeroConfig(**plugin.deepspeed_config["zero_optimization"])  # pydantic: unknown keys refused
    assert zero.stage == 3 and zero.gather_16bit_weights_on_model_save is True


def _launch_args() -> list[str]:
    """The `accelerate launch ...` argument list of trl-launch.sh with its variables filled in."""
    text = (CLUSTER / "trl-launch.sh").read_text()
    body = text[text.index("exec accelerate launch") + len("exec accelerate launch"):]
    env = {"NUM_NODES": "2", "GPUS_PER_NODE": "8", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1",
           "SPEC": "experiments/skillos-alfworld-qwen3-8b.yaml", "OUT": "runs/x"}
    body = body.replace("\\\n", " ").replace("$((NUM_NODES * GPUS_PER_NODE))", "16").replace("${MASTER_PORT:-29500}", "29500")
    body = body.replace("${EXTRA:-}", "")
    for k, v in env.items():
        body = body.replace("$" + k, v)
    return shlex.split(body)


def test_launch_script_parses_with_accelerates_own_parser():
    from accelerate.commands.launch import launch_command_parser

    args = launch_command_parser().parse_args(_launch_args())
    assert args.config_file.endswith("trl-accelerate-zero3.yaml")
    assert (args.num_machines, args.num_processes, args.machine_rank) == (2, 16, 1)
    assert args.main_process_ip == "10.0.0.1" and args.main_process_port == 29500
    assert args.module and args.training_script == "twinrun.cli"
    assert args.training_script_args[:4] == ["train", "experiments/skillos-alfworld-qwen3-8b.yaml", "--backend", "trl"]
    # the spec's resources must match the process count: plan derives the per-device batch from them
    assert "resources.nodes=2" in args.training_script_args and "resources.gpus_per_node=8" in args.training_script_args


def test_vllm_colocate_overrides_are_grpo_config_fields_and_compile(repo_root):
    from trl import GRPOConfig

    from twinrun.backends.trl.compile import compile_spec
    from twinrun.core.spec import load_spec

    overrides = yaml.safe_load((CLUSTER / "trl-vllm-colocate.yaml").read_text())
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(overrides) <= fields, sorted(set(overrides) - fields)
    assert overrides["use_vllm"] is True and overrides["vllm_mode"] == "colocate"
    assert 0 < overrides["vllm_gpu_memory_utilization"] < 1
    sets = [f"overrides.trl.{k}={v}" for k, v in overrides.items()]
    sets += ["resources.nodes=2", "resources.gpus_per_node=8"]
    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml", sets)
    compiled = compile_spec(spec)
    for k, v in overrides.items():
        assert compiled.config[k] == v
    # vLLM's context holds at least a full completion (all turns and tool results), within Qwen3-8B's 40960
    assert compiled.config["max_completion_length"] <= overrides["vllm_max_model_length"] <= 40960


def test_a_cpu_engine_is_asked_for_with_use_vllm_and_compiles_to_what_vllm_cpu_runs(repo_root):
    """On CPU, vLLM stays off unless overrides.trl.use_vllm asks for it; then compile fills in what a CPU engine needs
    (colocate, no sleep mode, a small memory share; twinrun/backends/trl/cpu_vllm.py), the overrides may still change
    them, and what cannot run on CPU (server mode's NCCL sync, sleep mode) is refused with its fix before anything
    starts. The real engine: tests/backends/test_trl_vllm_colocate.py."""
    from trl import GRPOConfig

    from twinrun.backends.trl.compile import compile_spec
    from twinrun.backends.trl.cpu_vllm import CPU_ENGINE
    from twinrun.core.errors import TwinrunError
    from twinrun.core.spec import load_spec

    smoke = repo_root / "experiments" / "smoke-cpu.yaml"
    assert compile_spec(load_spec(smoke)).config["use_vllm"] is False
    config = compile_spec(load_spec(smoke, ["overrides.trl.use_vllm=true"])).config
    assert {k: config[k] for k in CPU_ENGINE} == CPU_ENGINE and config["use_vllm"] is True
    assert set(CPU_ENGINE) <= {f.name for f in dataclasses.fields(GRPOConfig)}
    assert CPU_ENGINE["vllm_mode"] == "colocate" and CPU_ENGINE["vllm_enable_sleep_mode"] is False
    mine = compile_spec(load_spec(smoke, ["overrides.trl.use_vllm=true",
                                          "overrides.trl.vllm_gpu_memory_utilization=0.2"])).config
    assert mine["vllm_gpu_memory_utilization"] == 0.2
    for knob, fix in (("vllm_mode=server", "vllm_client.py:757"), ("vllm_enable_sleep_mode=true", "model.py:569")):
        with pytest.raises(TwinrunError, match=fix):
            compile_spec(load_spec(smoke, ["overrides.trl.use_vllm=true", f"overrides.trl.{knob}"]))


def test_the_process_count_comes_from_the_spec(repo_root):
    from twinrun.backends.trl.compile import compile_spec
    from twinrun.core.errors import TwinrunError
    from twinrun.core.spec import load_spec

    smoke = repo_root / "experiments" / "smoke-cpu.yaml"
    assert load_spec(smoke).resources.world_size == 1
    assert load_spec(smoke, ["resources.processes=2"]).resources.world_size == 2
    assert load_spec(smoke, ["resources.nodes=2"]).resources.world_size == 2  # one CPU process per node
    assert load_spec(smoke, ["resources.nodes=2", "resources.gpus_per_node=8"]).resources.world_size == 16
    with pytest.raises(TwinrunError, match="resources.processes: 3 != nodes x gpus_per_node = 16"):
        load_spec(smoke, ["resources.nodes=2", "resources.gpus_per_node=8", "resources.processes=3"])
    with pytest.raises(TwinrunError, match="not a multiple of resources.nodes"):
        load_spec(smoke, ["resources.nodes=2", "resources.processes=3"])
    # per_position: a process must hold whole rollouts (|G| = 3 rows each)
    with pytest.raises(TwinrunError, match="split the 4 rollouts of a step unevenly"):
        compile_spec(load_spec(smoke, ["curator.context=per_position", "resources.processes=3"]))


def test_launch_starts_the_specs_processes_under_torchrun():
    import sys

    from torch.distributed.run import get_args_parser

    from twinrun.backends.trl.launch import launch, torchrun_argv
    from twinrun.backends.trl.train import check_world
    from twinrun.core.errors import TwinrunError

    argv = ["train", "s.yaml", "--backend", "trl", "--out", "o", "--launch", "--set", "resources.processes=2"]
    cmd = torchrun_argv(2, 1, argv, {})
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--launch" not in cmd
    args = get_args_parser().parse_args(cmd[3:])  # torchrun's own parser
    assert (args.nproc_per_node, args.standalone, args.module, args.training_script) == ("2", True, True, "twinrun.cli")
    assert args.training_script_args == [a for a in argv if a != "--launch"]
    env = {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1"}
    args = get_args_parser().parse_args(torchrun_argv(16, 2, argv, env)[3:])
    assert (args.nnodes, args.nproc_per_node, args.node_rank, args.master_addr) == ("2", "8", 1, "10.0.0.1")
    with pytest.raises(TwinrunError, match="NODE_RANK and MASTER_ADDR"):
        torchrun_argv(16, 2, argv, {})
    assert launch(1, 1, argv, {}) is False  # one process: train here
    assert launch(2, 1, argv, {"WORLD_SIZE": "2"}) is False  # already inside torchrun's world
    with pytest.raises(TwinrunError, match="plans 2 training process\\(es\\) but this launch has 1 .*--launch"):
        check_world(1, 2)
