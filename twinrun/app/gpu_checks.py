"""`twinrun doctor --gpu SPEC`: what a cluster job needs, checked before a GPU hour is spent.

Each check is a row (name, what was found, status, why): ``ok``, ``fail`` (the job would fail or the spec does not
fit) or ``skip`` (cannot be checked here, with the reason). Nothing is downloaded: model configs are read from a
local folder or the local HF cache only. The checks every command makes before its first write (GPUs, dtype,
packages, models, endpoints, Ray, --out) are twinrun.app.environment's, shown here all at once; this module adds
what only a cluster job's sizing needs (GPU memory, CUDA/NCCL, the GPU lock, game counts, context, memory).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import shutil
from pathlib import Path
from typing import Any

from twinrun.app.environment import machine, network
from twinrun.app.environment.command import _spec_endpoints
from twinrun.app.environment.packages import importable as _importable
from twinrun.app.environment.rows import Check
from twinrun.core.errors import TwinrunError

GPU_LOCK = Path(__file__).resolve().parents[2] / "requirements" / "gpu-lock.txt"
GIB = 1024**3


def devices(spec: Any, cuda: Any = None) -> list[Check]:
    """CUDA devices on this node against resources.gpus_per_node, the CUDA and NCCL versions torch was built with."""
    import torch

    cuda = cuda or torch.cuda
    rows = machine.gpus(spec.resources.gpus_per_node, cuda=cuda)  # the check every command makes
    if rows[0].status == "skip":
        return rows
    have = cuda.device_count() if cuda.is_available() else 0
    if have:
        props = cuda.get_device_properties(0)
        rows.append(Check("GPU memory", f"{props.total_memory / GIB:.0f} GiB ({props.name})", "ok"))
        nccl = ".".join(map(str, cuda.nccl.version())) if hasattr(cuda, "nccl") else "-"
        rows.append(Check("CUDA / NCCL", f"CUDA {torch.version.cuda}, NCCL {nccl}", "ok"))
    else:
        rows.append(Check("CUDA / NCCL", f"torch built with CUDA {torch.version.cuda}", "skip", "no CUDA device here"))
    return rows


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def versions(lock: Path = GPU_LOCK) -> list[Check]:
    """Installed versions against requirements/gpu-lock.txt (torch's local tag, e.g. +cpu, ignored)."""
    if not lock.is_file():
        return [Check("versions vs GPU lock", "-", "skip", f"{lock} is not here (an installed wheel, not the repo)")]
    pins = _pins(lock)
    wrong, missing = [], []
    for name, want in pins.items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            missing.append(name)
            continue
        if have.split("+")[0] != want:
            wrong.append(f"{name} {have} (lock {want})")
    key = [n for n in ("torch", "transformers", "trl", "verl", "vllm", "flash-attn") if n in pins]
    bad_key = [w for w in wrong if w.split()[0] in key] + [m for m in missing if m in key]
    status = "ok" if not wrong and not missing else "fail"
    found = f"{len(pins) - len(wrong) - len(missing)}/{len(pins)} as locked"
    why = "" if status == "ok" else (
        f"{len(wrong)} differ, {len(missing)} missing" + (f"; frameworks: {', '.join(bad_key)}" if bad_key else "")
        + f" (fix: pip install -r {lock.relative_to(lock.parents[1])} --no-deps; docs/cluster.md)")
    return [Check("versions vs GPU lock", found, status, why)]


def importable(module: str, why: str) -> Check:
    """The commands' package check, with the import itself (vLLM's included: doctor may take its seconds)."""
    return _importable(module, why, load=True)


def splits(spec: Any, data_root: str | None) -> list[Check]:
    """The spec's training and held-out splits have playable games."""
    if spec.environment.name != "alfworld":
        return [Check("environment split", spec.environment.name, "skip", "only ALFWorld splits are counted here")]
    if not data_root:
        return [Check("ALFWorld split", "-", "fail", "ALFWORLD_DATA is not set (fix: point it at alfworld-download)")]
    from twinrun.core.envs import EnvError
    from twinrun.core.envs.alfworld import split_counts

    try:
        counts = split_counts(data_root)
    except EnvError as e:
        return [Check("ALFWorld split", "-", "fail", str(e))]
    rows = []
    for field, split in (("environment.split", spec.environment.split),
                         ("environment.eval_split", spec.environment.eval_split)):
        n = counts.get(split, (0, {}))[0]
        rows.append(Check(f"{field} {split}", f"{n} games", "ok" if n else "fail",
                          "" if n else f"no playable game under {data_root}/json_2.1.1/{split} (fix: the full "
                          "alfworld-download, or another split)"))
    return rows


def context(spec: Any) -> list[Check]:
    """The rollout context (per_position: prompt + one turn) against the curator's max_position_embeddings."""
    from twinrun.backends.verl.compile import check_context, rollout_context_tokens

    notes: list[str] = []
    need = rollout_context_tokens(spec)
    try:
        limit = check_context(spec, notes.append)
    except TwinrunError as e:
        return [Check("context vs model", f"{need} tokens", "fail", str(e))]
    if limit is None:
        return [Check("context vs model", f"{need} tokens", "skip", notes[0] if notes else "")]
    return [Check("context vs model", f"{need} of {limit} tokens", "ok")]


def parameter_count(model: str) -> int | None:
    """Parameters of the curator, from its config on the meta device (no weights read); None if unreadable."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from twinrun.models.tiny import TINY_QWEN3

    if model == TINY_QWEN3:
        return None
    try:
        local = Path(model).expanduser()
        config = AutoConfig.from_pretrained(str(local)) if local.is_dir() else AutoConfig.from_pretrained(
            model, local_files_only=True)
    except (OSError, ValueError):
        return None
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in net.parameters())


def sizing(spec: Any, out_dir: Path, params: int | None, gpu_memory_gib: float | None = None) -> list[Check]:
    """Disk for one backend's checkpoints (HF exports at fp32 master precision plus the framework's own
    resumable shards: weights, gradients-free AdamW state) and a memory-per-GPU estimate."""
    if params is None:
        return [Check("disk for checkpoints", "-", "skip", f"{spec.curator.model}'s config is not readable here"),
                Check("memory per GPU", "-", "skip", "needs the model's parameter count")]
    saves = -(-spec.steps // spec.checkpoint_every)
    need = machine.checkpoint_bytes(params, saves)  # the sizing every training command checks its --out against
    root = machine.nearest_existing(out_dir)
    free = shutil.disk_usage(root).free
    rows = [Check("disk for checkpoints", f"{need / GIB:.0f} GiB needed per backend, {free / GIB:.0f} GiB free "
                  f"at {root}", "ok" if free >= need else "fail",
                  f"{saves} saves x (HF fp32 {params * 4 / GIB:.0f} GiB + resumable {params * 12 / GIB:.0f} GiB)"
                  + ("" if free >= need else " (fix: a larger --out volume, or fewer saves: checkpoint_every)"))]
    world = max(spec.resources.world_size, 1)
    sharded = params * 16 / world  # fp32 weights, gradients, AdamW m and v, fully sharded
    vllm = params * 2 if spec.resources.gpus_per_node else 0  # a bf16 copy per GPU (TP 1)
    est = (sharded + vllm) / GIB
    status, why = "ok", f"sharded fp32 state {sharded / GIB:.1f} GiB + vLLM bf16 weights {vllm / GIB:.1f} GiB, " \
        "before KV cache and activations"
    if gpu_memory_gib is not None and est > gpu_memory_gib:
        status, why = "fail", why + f": above the {gpu_memory_gib:.0f} GiB of this node's GPUs"
    rows.append(Check("memory per GPU", f"~{est:.1f} GiB", status, why))
    return rows


def sweep_gpus(spec: Any, cuda: Any = None) -> Check:
    """The sweep's GPU need: one GPU per checkpoint's curator, in waves of this node's GPUs (docs/scale.md)."""
    from twinrun.core.sweeps.placement import spec_sweep_cost

    import torch

    cuda = cuda or torch.cuda
    have = cuda.device_count() if cuda.is_available() else 0
    cost = spec_sweep_cost(spec, gpus=have or None)
    found = (f"{cost['checkpoints']} checkpoints, one curator GPU each: {cost['curator_gpus_all_at_once']} for one wave"
             + (f", {cost['waves']} waves on this node's {have}" if have else ""))
    why = (f"{cost['curator_turns']:,} curator turns, {cost['executor_episodes']:,} executor episodes "
           f"({cost['streams']} streams x {cost['games']} games; {cost['games_source']}); `sweep --gpus`")
    return Check("sweep GPUs", found, "ok" if have else "skip", why if have else "no CUDA device here; " + why)


def gpu_checks(spec: Any, out_dir: Path, environ: dict[str, str] | None = None, cuda: Any = None) -> list[Check]:
    environ = dict(os.environ if environ is None else environ)
    rows = devices(spec, cuda)
    rows += machine.compute_dtype(spec.curator.precision, spec.resources.gpus_per_node, cuda=cuda)
    rows += machine.out_writable(out_dir)
    rows += versions()
    rows.append(importable("vllm", "the curator's rollout in both backends on GPUs"))
    rows.append(importable("flash_attn", "verl's padding-free batches, model.use_remove_padding"))
    rows += splits(spec, environ.get("ALFWORLD_DATA"))
    rows += network.model_id("curator.model", spec.curator.model, environ)
    rows += _spec_endpoints(spec, environ)
    rows += network.ray_address(spec.resources.ray_address, "resources.ray_address")
    rows += context(spec)
    memory = next((float(r.found.split()[0]) for r in rows if r.name == "GPU memory"), None)
    rows += sizing(spec, out_dir, parameter_count(spec.curator.model), memory)
    rows.append(sweep_gpus(spec, cuda))
    return rows
