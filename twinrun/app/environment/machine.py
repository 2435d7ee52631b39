"""This node: GPUs against the spec, the compute dtype on them, a writable --out with room for the checkpoints,
and Java for ScienceWorld."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from twinrun.app.environment.rows import Check

GIB = 1024**3


def gpu_driver() -> bool:
    """An NVIDIA (or AMD ROCm) driver is loaded on this node: its device files exist."""
    return any(Path(p).exists() for p in ("/proc/driver/nvidia/gpus", "/dev/nvidia0", "/dev/kfd"))


def gpus(want: int, field: str = "resources.gpus_per_node", cuda: Any = None, cpu_fix: str | None = None
         ) -> list[Check]:
    """CUDA devices on this node against the ``want`` the spec asks for. ``cuda``: torch.cuda, or a stand-in
    (the tests' fake for a GPU node, which a CPU machine cannot be)."""
    if not want:
        return [Check("GPUs", "-", "skip", f"the spec runs on CPU ({field}: 0)")]
    if cuda is None and not gpu_driver():
        have = 0  # no GPU driver on this node: torch would find none either (and its import costs seconds)
    else:
        if cuda is None:
            import torch  # a node with a driver: torch counts what CUDA_VISIBLE_DEVICES leaves visible

            cuda = torch.cuda
        have = cuda.device_count() if cuda.is_available() else 0
    if have >= want:
        return [Check("GPUs", f"{have} on this node", "ok")]
    return [Check("GPUs", f"{have} on this node", "fail",
                  f"but {field}: {want} asks for {want} CUDA device(s) (fix: run on a GPU node, e.g. under srun/sbatch "
                  f"with --gpus-per-node={want}, or {cpu_fix or f'--set {field}=0'} for CPU)")]


def compute_dtype(precision: str, want_gpus: int, field: str = "curator.precision", cuda: Any = None) -> list[Check]:
    """The spec's compute dtype on the devices it runs on: bf16 needs Ampere or newer on a GPU (transformers
    otherwise stops inside the trainer with a traceback); torch computes bf16 on any CPU (autocast)."""
    if precision != "bf16" or not want_gpus:
        return [Check("compute dtype", precision, "ok")]
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():  # the GPU row already said so
        return [Check("compute dtype", precision, "skip", "no CUDA device here")]
    if cuda.is_bf16_supported():
        return [Check("compute dtype", precision, "ok")]
    name = cuda.get_device_name(0)
    return [Check("compute dtype", f"bf16 on {name}", "fail",
                  f"({field}) is not supported by this GPU (fix: an Ampere or newer GPU, or --set {field}=fp32)")]


def nearest_existing(path: Path) -> Path:
    path = Path(path).expanduser().absolute()
    return next(p for p in (path, *path.parents) if p.exists())


def out_writable(out: Path, flag: str = "--out") -> list[Check]:
    """``--out`` (or the folder it will be created in) can be written by this user: a read-only mount or a folder
    without write permission would otherwise fail at the first checkpoint."""
    root = nearest_existing(out)
    if not root.is_dir():  # a file: the commands' own --out guards say so in their words
        return [Check(flag, str(out), "skip", "not a folder")]
    if os.access(root, os.W_OK | os.X_OK):
        return [Check(flag, str(out), "ok")]
    where = "is not writable" if root == Path(out).expanduser().absolute() else \
        f"cannot be created: {str(root)!r} is not writable"
    return [Check(flag, repr(str(out)), "fail",
                  f"{where} by this user (fix: a folder you can write, e.g. under $HOME or scratch)")]


def model_config(name: str | None) -> dict[str, Any] | None:
    """A model's config.json from a local folder or the local HF cache (never the network); None if neither."""
    if not name:
        return None
    local = Path(name).expanduser() / "config.json"
    path: Any = local if local.is_file() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            path = try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - not a repo id: nothing cached
            return None
    if not isinstance(path, (str, Path)):
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def parameters_from_config(config: dict[str, Any]) -> int | None:
    """A decoder-only model's parameter count from its config (embeddings, attention with grouped KV heads, a
    gated MLP, norms): within a few percent, read in microseconds (building the model on the meta device needs
    transformers' import, ~15 s on a busy node)."""
    cfg = config.get("text_config", config)
    try:
        h, layers, vocab = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
        inter = int(cfg.get("intermediate_size", 4 * h))
        heads = int(cfg.get("num_attention_heads", 1))
        kv = int(cfg.get("num_key_value_heads", heads))
        hd = int(cfg.get("head_dim") or h // heads)
    except (KeyError, TypeError, ValueError):
        return None
    attn = h * heads * hd * 2 + h * kv * hd * 2
    per_layer = attn + 3 * h * inter + 2 * h
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return embed + layers * per_layer + h


def checkpoint_bytes(params: int, saves: int) -> int:
    """Bytes ``saves`` checkpoints take: an HF export at fp32 master precision (4 bytes per parameter) and the
    framework's resumable state (fp32 weights and AdamW's two moments, sharded but all on disk: 12 bytes)."""
    return params * (4 + 12) * saves


def disk(out: Path, model: str | None, saves: int, field: str = "checkpoint_every") -> list[Check]:
    """Free space where ``out`` will be written against ``saves`` checkpoints of ``model`` (checkpoint_bytes, as
    `doctor --gpu` sizes them)."""
    config = model_config(model)
    params = parameters_from_config(config) if config else None
    if params is None:
        return [Check("disk for checkpoints", "-", "skip", f"{model}'s config.json is not readable here")]
    need = checkpoint_bytes(params, saves)
    root = nearest_existing(out)
    free = shutil.disk_usage(root).free
    found = f"{need / GIB:.1f} GiB needed ({saves} checkpoint(s) of {params / 1e9:.2f}B parameters), " \
            f"{free / GIB:.1f} GiB free at {root}"
    if free >= need:
        return [Check("disk for checkpoints", found, "ok")]
    return [Check("disk for checkpoints", found, "fail",
                  f"for --out {str(out)!r} (fix: a larger volume for --out, or fewer saves: a larger {field})")]


def java() -> list[Check]:
    """ScienceWorld runs its simulator in a JVM: without `java` on PATH every episode would fail at its start."""
    found = shutil.which("java")
    if found:
        return [Check("java", found, "ok")]
    return [Check("java", "-", "fail", "ScienceWorld needs a Java runtime and none is on PATH (fix: install a JRE "
                  "17, e.g. apt-get install openjdk-17-jre-headless, or put its bin/ on PATH)")]
