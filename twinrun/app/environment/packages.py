"""The optional packages a spec uses, importable here: a missing or broken one (a CUDA library, an ABI
mismatch) is one line now instead of a traceback from inside a framework later."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util

from twinrun.app.environment.rows import Check

# module -> (distribution, the install line a fix names)
INSTALL = {
    "vllm": ("vllm", "pip install -r requirements/gpu-lock.txt --no-deps (docs/cluster.md)"),
    "flash_attn": ("flash-attn", "pip install flash-attn --no-build-isolation (docs/cluster.md)"),
    "deepspeed": ("deepspeed", "pip install 'twinrun[cluster]'"),
    "ray": ("ray", "pip install 'twinrun[verl]'"),
    "alfworld": ("alfworld", "pip install 'twinrun[alfworld]'"),
    "scienceworld": ("scienceworld", "pip install 'twinrun[sciworld]'"),
}


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


def importable(module: str, why: str, load: bool = True) -> Check:
    """``module`` is installed and (``load``) imports. ``load=False`` only finds it: vLLM's import takes seconds,
    and the backend imports it within its first minute anyway."""
    dist, fix = INSTALL.get(module, (module.replace("_", "-"), f"pip install {module.replace('_', '-')}"))
    name = f"import {module}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        spec, err = None, e
    else:
        err = None
    if spec is None:
        return Check(name, "-", "fail", f"No module named {module!r}{f' ({err})' if err else ''}: not installed, "
                     f"needed for {why} (fix: {fix})")
    if load:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any import failure (missing library, ABI, CUDA) is the finding
            first = (str(e).splitlines() or [""])[0][:160]
            return Check(name, f"{dist} {_version(dist)}", "fail",
                         f"fails to import ({type(e).__name__}: {first}), needed for {why} (fix: reinstall it: {fix})")
    return Check(name, f"{dist} {_version(dist)}", "ok")


def needed(spec, backends: list[str], environ: dict[str, str], *, gpu: bool, ray: bool) -> list[tuple[str, str, bool]]:
    """(module, why, load) for what this command will import: vLLM and flash-attn on GPUs, DeepSpeed under an
    accelerate DeepSpeed launch, Ray for verl or a Ray sweep, the environment's simulator."""
    out: list[tuple[str, str, bool]] = []
    if gpu:
        out.append(("vllm", "the curator's rollout on GPUs (both backends)", False))
        if "verl" in backends:
            out.append(("flash_attn", "verl's padding-free batches on GPUs (model.use_remove_padding)", True))
    if "trl" in backends and environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true", "yes"):
        out.append(("deepspeed", "the accelerate launch's DeepSpeed ZeRO-3 (ACCELERATE_USE_DEEPSPEED)", True))
    if ray or "verl" in backends:
        out.append(("ray", "verl's workers" if "verl" in backends else "the Ray sweep (--ray)", True))
    env = getattr(getattr(spec, "environment", None), "name", None)
    if env in ("alfworld", "scienceworld"):
        out.append((env, f"environment.name: {env}", True))
    return out
