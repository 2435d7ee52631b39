"""A served curator (``sweep.curator_server``, docs/cluster.md section 7): each checkpoint's curator behind an
OpenAI-compatible server, fed the prompt token ids twinrun renders, its turn parsed by twinrun's own parser.

Two modes. ``vllm``: twinrun launches one server per checkpoint (:class:`CuratorServer`): the command
``sweep.curator_server_command`` (default :data:`VLLM_COMMAND`, ``vllm serve``) with the checkpoint, a free port, the
sweep's one evaluation dtype and the spec's seed filled in, on the GPU the sweep's placement gave the checkpoint
(``CUDA_VISIBLE_DEVICES``, :mod:`twinrun.core.sweeps.placement`), its output in ``<out>/servers/<RUN@STEP>.log``;
it is stopped when the checkpoint's arms end, when the sweep is interrupted, and by the kernel if the sweep's process
dies (core.records.parent_death). ``endpoints``: the user's own servers, ``sweep.curator_endpoints``, one per
checkpoint in the order :func:`checkpoint_keys` lists them, each probed before anything is written.

A request (:func:`completion_body`) is ``POST /v1/completions`` with ``prompt`` = the token ids (no server-side chat
template), the spec's sampling (temperature, top_p, top_k, ``max_tokens`` = curator.max_response_tokens), every
other decoding field pinned to its neutral value (so a server's generation-config defaults change nothing), the
checkpoint's end-of-sequence ids as ``stop_token_ids``, ``skip_special_tokens: false`` (the text keeps every tag)
and ``return_token_ids: true``; the caller decodes the returned ids itself, as the in-process path does, and
parses the tool call with twinrun's parser. The per-call ``seed`` is the in-process path's
(``HFCuratorPolicy.row_seed``).

A server that dies or stops answering raises :class:`twinrun.core.errors.EndpointUnavailable`: the arm stops before
writing the game in flight, its remaining games are unmeasured, and a rerun of the same command resumes it
(:func:`twinrun.core.sweeps.arms.run_arm`). A request the server refuses (HTTP 4xx) is an infrastructure error of
that one turn (recorded as the row's ``curator_error``), as an out-of-memory error is in process.

Core: subprocess and httpx only (the client of :mod:`twinrun.core.executors.endpoints`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.errors import EndpointUnavailable, InfrastructureError
from twinrun.core.spec.dtypes import torch_dtype_name
from twinrun.core.sweeps.plan import SweepError, discover_checkpoints

SERVERS_DIR = "servers"
PLACEHOLDERS = ("model", "port", "dtype", "seed", "max_model_len")
# vLLM's OpenAI server for one checkpoint: on loopback (the sweep's process is its only client), at the sweep's
# dtype, the spec's seed, and `--generation-config vllm` so the checkpoint's generation_config.json sets no
# sampling default (every field is sent anyway)
# vLLM's CPU build sizes its KV cache by this (GiB); unset, it reserves the memory-utilization share of host memory.
# Every CPU engine twinrun starts (a served sweep's, TRL's colocated one, verl's rollout) sets it.
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
VLLM_COMMAND = ("vllm", "serve", "{model}", "--host", "127.0.0.1", "--port", "{port}", "--dtype", "{dtype}",
                "--seed", "{seed}", "--max-model-len", "{max_model_len}", "--generation-config", "vllm")
REQUEST_TIMEOUT_S = 600.0  # one curator turn (max_response_tokens of an 8B model, under load)
RETRIES = 3  # a timeout, connection error or 5xx is tried again this often before the server counts as gone
PROBE_TIMEOUT_S = 5.0


def checkpoint_keys(runs: Mapping[str, str | Path]) -> list[str]:
    """The sweep's checkpoints as ``RUN@STEP``, in the order ``sweep.curator_endpoints`` lists their servers: the
    runs in the order given, each run's steps ascending (the order of the sweep's plan)."""
    return [f"{name}@{step}" for name, d in runs.items() for step, _ in discover_checkpoints(d)]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_argv(template: Sequence[str] | None, *, model: str, port: int, dtype: str, seed: int,
                max_model_len: int | None) -> list[str]:
    """The launch command for one checkpoint: ``template`` (default :data:`VLLM_COMMAND`) with its placeholders
    filled in. An item whose only placeholder has no value (max_model_len None) is dropped with its flag."""
    values: dict[str, Any] = {"model": model, "port": port, "dtype": dtype, "seed": seed,
                              "max_model_len": max_model_len}
    items = list(template or VLLM_COMMAND)
    out: list[str] = []
    for item in items:
        if "{max_model_len}" in item and max_model_len is None:
            if out and out[-1].startswith("--"):
                out.pop()
            continue
        out.append(item.format(**values))
    return out


def launch_env(gpus: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: the caller's (``environ``, else this process's, inherited as a child would),
    with ``CUDA_VISIBLE_DEVICES`` set to the GPUs the sweep's placement gave the checkpoint (None: unchanged)."""
    env = dict(os.environ if environ is None else environ)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(gpus)
    return env


def check_template(template: Sequence[str] | None) -> None:
    """sweep.curator_server_command: a non-empty argv whose placeholders are twinrun's, with {model} and {port}."""
    if template is None:
        return
    items = list(template)
    text = " ".join(items)
    if not items or "{model}" not in text or "{port}" not in text:
        raise SweepError(f"sweep.curator_server_command: {items!r} must name {{model}} and {{port}} (fix: e.g. "
                         "[vllm, serve, '{model}', --port, '{port}', --dtype, '{dtype}'])")
    values = {k: 0 for k in PLACEHOLDERS}
    for item in items:
        try:
            item.format(**values)
        except (KeyError, IndexError, ValueError) as e:
            raise SweepError(f"sweep.curator_server_command: {item!r} has an unknown placeholder ({e}) (fix: only "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)})") from None


def completion_body(model: str, prompt_ids: Sequence[int], *, seed: int, temperature: float, top_p: float,
                    top_k: int | None, max_tokens: int, stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """One ``/v1/completions`` request: the rendered token ids and the spec's sampling, nothing left to the
    server's defaults (top_k None: -1, all tokens, as vLLM spells it)."""
    return {"model": model, "prompt": [int(t) for t in prompt_ids], "max_tokens": int(max_tokens),
            "temperature": float(temperature), "top_p": float(top_p), "top_k": -1 if not top_k else int(top_k),
            "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
            "seed": int(seed), "n": 1, "stop_token_ids": [int(t) for t in stop_token_ids], "ignore_eos": False,
            "skip_special_tokens": False, "return_token_ids": True, "stream": False}


def _root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def served_model(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str | None, str]:
    """``GET base_url/models``: (the first model id the server serves, "") or (None, why not)."""
    import httpx

    try:
        r = httpx.get(f"{base_url}/models", timeout=timeout_s)
    except httpx.HTTPError as e:
        return None, f"{type(e).__name__}: {str(e)[:160]}"
    if r.status_code != 200:
        return None, f"HTTP {r.status_code} on /models"
    try:
        return str(r.json()["data"][0]["id"]), ""
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"/models lists no model ({r.text[:120]!r})"


@dataclass
class CuratorServer:
    """One launched server: its argv, environment, log and URL. :meth:`start` launches it in its own process group
    (dying with this process); :meth:`wait_healthy` polls ``/health`` (then ``/v1/models``) until it answers, the
    process exits or ``timeout_s`` passes; :meth:`stop` stops its whole group."""

    key: str  # RUN@STEP
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    timeout_s: float
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> CuratorServer:
        from twinrun.core.records.parent_death import dying_with_parent

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(("$ " + " ".join(self.argv) + "\n").encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(dying_with_parent(self.argv), env=self.env, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:  # the interpreter itself could not start: the argv is exec'd in the child
                raise SweepError(f"curator server {self.key}: cannot start {self.argv[0]!r} ({e}) (fix: "
                                 "sweep.curator_server_command)") from None
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _last_line(self) -> str:
        try:
            lines = [x for x in self.log_path.read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            return ""
        return lines[-1].strip()[:200] if lines else ""

    def wait_healthy(self, poll_s: float = 0.5) -> str:
        """Wait until the server answers; returns the model id it serves. A process that exits, or no answer
        within timeout_s, stops it and raises SweepError naming the log."""
        import httpx

        deadline = time.monotonic() + self.timeout_s
        while True:
            if not self.alive():
                code = None if self.proc is None else self.proc.returncode
                raise SweepError(f"curator server {self.key}: exited with code {code} before it answered /health "
                                 f"(last log line: {self._last_line()!r}; log: {self.log_path}; fix: see the log, "
                                 "e.g. pip install vllm, another --gpus, or sweep.curator_server_command)")
            try:
                ok = httpx.get(f"{_root(self.base_url)}/health", timeout=PROBE_TIMEOUT_S).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                model, why = served_model(self.base_url)
                if model is not None:
                    return model
            if time.monotonic() > deadline:
                self.stop()
                raise SweepError(f"curator server {self.key}: no answer on /health within {self.timeout_s:g} s (log: "
                                 f"{self.log_path}; fix: see the log, or a longer sweep.curator_server_timeout_s)")
            time.sleep(poll_s)

    def stop(self) -> None:
        from twinrun.core.records.parent_death import stop_group

        if self.proc is not None:
            # the whole group, even when the launched process is gone already: a killed vLLM API server leaves its
            # engine core and workers running (seen with vllm-cpu 0.27.1, tests/vllm)
            stop_group(self.proc)
            with open(self.log_path, "ab") as log:
                log.write(f"twinrun: server stopped (exit code {self.proc.returncode})\n".encode())


class CompletionsClient:
    """``POST /v1/completions`` to one server, several requests at once (one thread each, one httpx client), with
    the one retry policy of :mod:`twinrun.core.executors.endpoints`. ``server``: the launched process behind it
    (its death is known at once, without retries), None for a user endpoint."""

    def __init__(self, base_url: str, model: str, *, server: CuratorServer | None = None,
                 timeout_s: float = REQUEST_TIMEOUT_S, retries: int = RETRIES, backoff_s: float = 1.0):
        import httpx

        self.base_url, self.model, self.server = base_url.rstrip("/"), model, server
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._client = httpx.Client(timeout=timeout_s)

    def _gone(self, why: str) -> EndpointUnavailable:
        where = f" (log: {self.server.log_path})" if self.server is not None else ""
        return EndpointUnavailable(f"curator server {self.base_url} unavailable: {why}{where}")

    def complete(self, body: dict[str, Any]) -> tuple[list[int] | None, str]:
        """One request: (the new token ids when the server returns them, the text)."""
        from twinrun.core.executors.endpoints import EndpointFailed, Fatal, Retry, RetryPolicy, post_json, \
            retryable_status

        def attempt() -> tuple[list[int] | None, str]:
            if self.server is not None and not self.server.alive():
                code = self.server.proc.returncode if self.server.proc else None
                raise Fatal(f"the server process exited (code {code})")
            status, text = post_json(self._client, f"{self.base_url}/completions", body, timeout_s=self.timeout_s)
            if status != 200:
                raise (Retry if retryable_status(status) else Fatal)(f"HTTP {status}: {text[:200]}")
            try:
                choice = json.loads(text)["choices"][0]
                ids = choice.get("token_ids")
                return ([int(t) for t in ids] if ids is not None else None), str(choice.get("text") or "")
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise Retry(f"malformed response ({type(e).__name__}: {text[:120]!r})") from e

        try:
            return RetryPolicy(self.retries, self.backoff_s, 8.0).run(attempt)
        except EndpointFailed as e:
            if self.server is not None and not self.server.alive():
                raise self._gone(e.reason) from None
            if e.reason.startswith("HTTP 4"):  # refused: this turn's request, not the server
                raise InfrastructureError(f"curator server {self.base_url} refused the request: {e.reason}") from None
            raise self._gone(f"{e.attempts} attempt(s): {e.reason}") from None

    def complete_many(self, bodies: Sequence[dict[str, Any]]) -> list[tuple[list[int] | None, str]]:
        """Several requests at once (a checkpoint's streams: the server batches them)."""
        if len(bodies) <= 1:
            return [self.complete(b) for b in bodies]
        with ThreadPoolExecutor(max_workers=len(bodies), thread_name_prefix="curator-request") as pool:
            return list(pool.map(self.complete, bodies))

    def close(self) -> None:
        self._client.close()


class CuratorServers:
    """The sweep's served curators: the checks before the first write (:meth:`check`) and, per checkpoint, its
    client (:meth:`open`: a launched server, or the user's endpoint). ``runs``: the sweep's RUN -> folder."""

    def __init__(self, spec: Any, runs: Mapping[str, str | Path], out_dir: str | Path, *,
                 environ: Mapping[str, str] | None = None):
        self.mode = spec.sweep.curator_server
        if self.mode not in ("vllm", "endpoints"):
            raise SweepError(f"sweep.curator_server: {self.mode!r} (fix: vllm or endpoints)")
        self.spec, self.out_dir, self.environ = spec, Path(out_dir), environ
        self.keys = checkpoint_keys(runs)
        self.template = spec.sweep.curator_server_command
        self.urls: dict[str, str] = {}
        if self.mode == "endpoints":
            urls = [u.rstrip("/") for u in spec.sweep.curator_endpoints]
            if len(urls) != len(self.keys):
                raise SweepError(f"sweep.curator_endpoints: {len(urls)} URL(s) for {len(self.keys)} checkpoints "
                                 f"({', '.join(self.keys)}) (fix: one base URL per checkpoint, in that order)")
            self.urls = dict(zip(self.keys, urls))
            if not spec.sweep.curator_dtype:  # twinrun cannot set (nor read) the dtype a user's server loads at
                raise SweepError("sweep.curator_server: endpoints, but sweep.curator_dtype is not stated (fix: --set "
                                 "sweep.curator_dtype=bf16, the dtype your servers load the checkpoints at, e.g. "
                                 "vllm serve CHECKPOINT --dtype bfloat16)")
        check_template(self.template)

    def check(self, timeout_s: float | None = None) -> None:
        """Before the first write: the launcher exists (vllm mode: the command's executable; the default command:
        ``vllm`` importable), or every user endpoint answers ``/v1/models``."""
        if self.mode == "vllm":
            exe = self.template[0] if self.template else None
            if exe and shutil.which(exe) is None:
                raise SweepError(f"sweep.curator_server_command: {exe!r} is not an executable here (fix: its full "
                                 "path, or install it)")
            if self.template is None:
                import importlib.util

                if importlib.util.find_spec("vllm") is None:
                    raise SweepError("sweep.curator_server: vllm, but vllm is not installed here (fix: pip install "
                                     "vllm==0.27.1 (requirements/gpu-lock.txt), or sweep.curator_server_command, or "
                                     "drop sweep.curator_server to generate in process)")
            return
        t = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
        for key, url in self.urls.items():
            model, why = served_model(url, t)
            if model is None:
                raise SweepError(f"sweep.curator_endpoints: {url} (checkpoint {key}) does not answer /models ({why}) "
                                 "(fix: start its server, or correct the URL)")

    def log_path(self, key: str) -> Path:
        return self.out_dir / SERVERS_DIR / f"{key}.log"

    def server_for(self, arm: Any) -> CuratorServer:
        """The server twinrun launches for ``arm``'s checkpoint (not started): the command with the checkpoint, a
        free port, the sweep's dtype, the spec's seed and max_model_len (curator.max_prompt_tokens +
        max_response_tokens) filled in, on the GPUs the sweep's placement gave the arm, logging to servers/."""
        key = f"{arm.run}@{arm.checkpoint_step}"
        spec = self.spec
        c = spec.curator
        max_len = c.max_prompt_tokens + c.max_response_tokens if c.max_prompt_tokens else None
        port = free_port()
        argv = launch_argv(self.template, model=str(arm.checkpoint_path), port=port,
                           dtype=torch_dtype_name(spec.sweep.curator_dtype or "fp32"), seed=spec.seed,
                           max_model_len=max_len)  # vLLM's --dtype takes torch's names
        return CuratorServer(key, argv, launch_env(arm.gpus, self.environ), self.log_path(key), port,
                             spec.sweep.curator_server_timeout_s)

    def open(self, arm: Any) -> CompletionsClient:
        """The client of ``arm``'s checkpoint: its launched server, healthy (vllm), or its user endpoint."""
        key = f"{arm.run}@{arm.checkpoint_step}"
        if self.mode == "endpoints":
            if key not in self.urls:
                raise SweepError(f"sweep.curator_endpoints: no URL for checkpoint {key} (fix: one per checkpoint: "
                                 f"{', '.join(self.keys)})")
            url = self.urls[key]
            model, why = served_model(url)
            if model is None:
                raise EndpointUnavailable(f"curator endpoint {url} ({key}) unavailable: {why}")
            return CompletionsClient(url, model)
        server = self.server_for(arm).start()
        try:
            model = server.wait_healthy()
        except BaseException:
            server.stop()
            raise
        return CompletionsClient(server.base_url, model, server=server)


__all__ = ["CompletionsClient", "CuratorServer", "CuratorServers", "SERVERS_DIR", "VLLM_COMMAND", "check_template",
           "checkpoint_keys", "completion_body", "free_port", "launch_argv", "launch_env", "served_model"]
