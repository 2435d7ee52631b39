"""A CPU platform for verl 0.9.1 (out of tree), and the two fixes its CPU path needs.

verl resolves its device through `verl.plugin.platform.get_platform()` once per process; `VERL_PLATFORM=cpu`
selects the platform registered here. It pretends to be a one-device accelerator whose torch namespace is a
CPU shim (no-op cache/memory calls), keeps Ray's resource name "GPU" (the trainer's placement groups and
resource check count "GPU"; `train.py` starts Ray with one *logical* GPU) and uses gloo.

Two things in verl's shipped code fail on CPU and are patched here, only when this platform is active:
- `initialize_global_process_group_ray` builds the backend string ``f"cpu:gloo,{device}:{backend}"``, which on
  CPU is ``"cpu:gloo,cpu:gloo"``: ``ValueError: Duplicate device type cpu in backend string``.
- the FSDP2 engine hard-codes ``CPUOffloadPolicy(pin_memory=True)`` for forward-only engines (the reference
  model); pinning needs an accelerator, so the policy is built with ``pin_memory=False``.
"""

from __future__ import annotations

import functools
import os
import types
from contextlib import contextmanager
from typing import Any

PLATFORM_NAME = "cpu"


def cpu_requested() -> bool:
    """True when this process is told to run verl on the CPU platform."""
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME


def _cpu_device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda`-style calls verl makes on its device module, as CPU no-ops."""
    import torch

    mod = types.ModuleType("twinrun_cpu_device")
    cpu = torch.cpu
    for name in ("is_available", "synchronize", "current_stream", "stream", "Stream", "Event", "StreamContext"):
        if hasattr(cpu, name):
            setattr(mod, name, getattr(cpu, name))

    def _noop(*_a: Any, **_k: Any) -> None:
        return None

    def _zero(*_a: Any, **_k: Any) -> int:
        return 0

    mod.device_count = lambda: 1
    mod.current_device = lambda: "cpu"
    mod.set_device = _noop
    mod.empty_cache = _noop
    mod.ipc_collect = _noop
    mod.reset_peak_memory_stats = _noop
    mod.set_per_process_memory_fraction = _noop
    mod.memory_allocated = _zero
    mod.memory_reserved = _zero
    mod.max_memory_allocated = _zero
    mod.max_memory_reserved = _zero
    mod.mem_get_info = lambda *_a, **_k: (1 << 40, 1 << 40)  # (free, total): "plenty", never gates a CPU run
    mod.get_device_name = lambda *_a, **_k: "cpu"
    mod.get_rng_state = lambda *_a, **_k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *_a, **_k: torch.set_rng_state(state)
    mod.manual_seed = lambda seed: torch.manual_seed(seed)
    mod.manual_seed_all = lambda seed: torch.manual_seed(seed)
    mod.is_initialized = lambda: True
    return mod


def register_platform() -> None:
    """Register the "cpu" platform with verl's PlatformRegistry (selected by VERL_PLATFORM=cpu)."""
    import torch
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    if PlatformRegistry.get(PLATFORM_NAME) is not None and getattr(
        PlatformRegistry.get(PLATFORM_NAME), "_twinrun", False
    ):
        return

    device_module = _cpu_device_module()

    class PlatformCPU(PlatformBase):
        _twinrun = True

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> types.ModuleType:
            return device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            # never auto-detected: only VERL_PLATFORM=cpu selects it
            return False

        def current_device(self) -> Any:
            return "cpu"  # used as `.to(get_device_id())` / `torch.device(get_device_id())`

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # the trainer's placement groups and resource check count "GPU"; Ray is started with logical GPUs
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    PlatformRegistry.register(platform=PLATFORM_NAME)(PlatformCPU)


def _dedupe_backend(backend: str | None) -> str | None:
    """``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"`` (torch rejects a device type listed twice)."""
    if not backend or "," not in backend:
        return backend
    seen: dict[str, str] = {}
    for part in backend.split(","):
        device = part.split(":", 1)[0] if ":" in part else part
        seen.setdefault(device, part)
    return ",".join(seen.values())


def apply_cpu_fixes() -> None:
    """Patch the two CPU failures described in the module docstring. Only call when `cpu_requested()`."""
    import verl.utils.distributed as dist_utils

    original = dist_utils.initialize_global_process_group_ray
    if not getattr(original, "_twinrun_cpu", False):

        @functools.wraps(original)
        def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
            if backend is None:
                from verl.utils.device import get_device_name, get_nccl_backend

                backend = f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"
            return original(timeout_second=timeout_second, backend=_dedupe_backend(backend))

        initialize_global_process_group_ray._twinrun_cpu = True  # type: ignore[attr-defined]
        dist_utils.initialize_global_process_group_ray = initialize_global_process_group_ray

    import verl.utils.fsdp_utils as fsdp_utils

    policy = fsdp_utils.CPUOffloadPolicy
    if policy is not None and not getattr(policy, "_twinrun_cpu", False):

        class UnpinnedCPUOffloadPolicy(policy):  # type: ignore[misc, valid-type]
            """CPUOffloadPolicy that never pins memory (pinning needs an accelerator)."""

            _twinrun_cpu = True

            def __init__(self, pin_memory: bool = False, **kwargs: Any) -> None:
                super().__init__(pin_memory=False, **kwargs)

        fsdp_utils.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
