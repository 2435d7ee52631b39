"""A served curator (sweep.curator_server, issue 39 item 4): each checkpoint's curator behind an OpenAI-compatible
server, fed the prompt token ids twinrun renders, its turn decoded and parsed by twinrun.

The stand-in for ``vllm serve`` is :mod:`twinrun.testing.serve_checkpoint`: a real HTTP server in a process of its
own, holding the tiny Qwen3 checkpoint and answering ``/v1/completions`` with twinrun's generation loop from the
request's token ids and seed. The sweep launches it through ``sweep.curator_server_command`` where a cluster launches
vLLM (:data:`twinrun.core.sweeps.served.VLLM_COMMAND`, checked as data below).

Why the served rows must equal the in-process rows on any CPU: both sides render the same prompt ids, derive the
same per-call seed and sample with the same code (``generate_rows``, one sequence at a time: the in-process sweep
is played with ``sweep.batch_streams: false``, the server answers one request at a time) on the same machine with
the same torch threads, so whichever token this CPU's kernels make likeliest, both draw it. vLLM samples with its own
kernels: same distribution, other tokens (DIVERGENCES D10).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw
from twinrun.core.sweeps.served import VLLM_COMMAND, CuratorServers, launch_argv, launch_env
from twinrun.testing.served_sweep import arm_rows as rows
from twinrun.testing.served_sweep import inprocess_rows, one_checkpoint_run

FAST = ["executor.max_turns=2", "sweep.streams=2", "curator.max_response_tokens=16", "curator.history=1"]
GAMES = 3


def stand_in() -> list[str]:
    """The command template that launches the stand-in for vLLM (threads pinned to this process's torch threads)."""
    import torch

    return [sys.executable, "-m", "twinrun.testing.serve_checkpoint", "--model", "{model}", "--port", "{port}",
            "--dtype", "{dtype}", "--seed", "{seed}", "--threads", str(torch.get_num_threads())]


def served(spec, **kw):
    return spec.model_copy(update={"sweep": spec.sweep.model_copy(update=kw)})


def pid_of(log: Path) -> int:
    return int(re.search(r"serve_checkpoint: pid (\d+)", log.read_text()).group(1))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    from twinrun.models import build_tiny_qwen3

    return build_tiny_qwen3(cache_dir)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, tiny: Path) -> Path:
    return one_checkpoint_run(tmp_path_factory.mktemp("runs") / "trl", tiny)


@pytest.fixture(scope="module")
def inprocess(tmp_path_factory: pytest.TempPathFactory, smoke_spec_path: Path, run_dir: Path,
              alfworld_data: Path) -> dict[str, list[dict]]:
    """The in-process sweep's rows (one sequence at a time), what every served sweep here must write."""
    return inprocess_rows(smoke_spec_path, FAST, run_dir, tmp_path_factory.mktemp("inprocess") / "sweep",
                          data_root=alfworld_data, games=GAMES)


def _servers(spec, run_dir: Path, out: Path, repo_root: Path) -> CuratorServers:
    return CuratorServers(spec, {"trl": run_dir}, out, environ={**os.environ, "PYTHONPATH": str(repo_root)})


@pytest.mark.alfworld
@pytest.mark.slow
@pytest.mark.sampling  # both paths sample with the same code on this CPU: equal on any CPU (module docstring)
def test_served_curator_writes_the_in_process_rows_and_stops_its_server(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path, inprocess: dict,
        repo_root: Path) -> None:
    from twinrun.models.served_curator import served_policy_factory

    spec = served(load_spec(smoke_spec_path, FAST), curator_server="vllm", curator_server_command=stand_in())
    out = tmp_path / "sweep"
    factory = served_policy_factory(_servers(spec, run_dir, out, repo_root))
    res = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=GAMES, workers=0, progress=False,
                   policy_factory=factory, gpus=[0])  # the streams batched: one request each, in flight together
    assert rows(out) == inprocess
    assert not any(a.stopped for a in res.arms.values())
    # the launch: on the GPU the placement gave the checkpoint, at the sweep's dtype, logged in the sweep folder
    log = out / "servers" / "trl@1.log"
    text = log.read_text()
    placed = sw.load_plan(out).arm("trl@1")
    assert placed.gpus == "0" and "CUDA_VISIBLE_DEVICES=0 " in text
    assert "--dtype float32" in text.splitlines()[0] and f"--seed {spec.seed}" in text.splitlines()[0]
    # stopped when the arm ended: no orphan
    assert "twinrun: server stopped" in text and gone(pid_of(log))


@pytest.mark.alfworld
@pytest.mark.slow
@pytest.mark.sampling
def test_a_server_killed_mid_arm_leaves_unmeasured_games_and_a_rerun_completes_the_arm(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path, inprocess: dict,
        repo_root: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    monkeypatch.setenv("PYTHONPATH", str(repo_root))
    out = tmp_path / "sweep"
    log = out / "servers" / "trl@1.log"
    base = ["sweep", f"trl={run_dir}", "--spec", str(smoke_spec_path), "--out", str(out), "--games", str(GAMES),
            "--workers", "0", "--no-progress", "--cache", str(cache_dir), "--gpus", "0",
            *[x for s in FAST for x in ("--set", s)]]
    argv = [*base, "--set", "sweep.curator_server=vllm",
            "--set", f"sweep.curator_server_command={json.dumps(stand_in())}"]
    killed: list[int] = []

    def kill_after_first_batch() -> None:  # SIGKILL from outside once the server answered game 1 of both streams
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            try:
                port = int(re.search(r"listening on http://127.0.0.1:(\d+)", log.read_text()).group(1))
                if httpx.get(f"http://127.0.0.1:{port}/stats", timeout=2).json()["completions"] >= 2:
                    pid = pid_of(log)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            except (OSError, AttributeError, httpx.HTTPError, ValueError):
                pass
            time.sleep(0.02)

    killer = threading.Thread(target=kill_after_first_batch, daemon=True)
    killer.start()
    res = CliRunner().invoke(app, argv)
    killer.join(timeout=10)
    assert res.exit_code == 0, res.output
    assert killed, "the server was never killed"
    lines = [x for x in res.output.splitlines() if x.startswith("sweep incomplete:")]
    assert len(lines) == 1 and "2 arm(s) stopped when their curator server went away (trl@1, trl@1#r1)" in lines[0]
    assert re.search(r"trl@1: \d+ successes, \d+ unmeasured \(curator unavailable at game [23] of 3: .*; rerun the "
                     r"same command to resume\)", res.output), res.output
    half = rows(out)
    for arm in ("trl@1", "trl@1#r1"):  # the games before the kill were written; none after it, none as failures
        assert 1 <= len(half[arm]) < GAMES and half[arm] == inprocess[arm][:len(half[arm])], arm
    assert half["baseline"] == inprocess["baseline"]

    before = {f: f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()}
    res = CliRunner().invoke(app, base)  # in process: another sampler than the served half (DIVERGENCES D10)
    sweep_id = sw.load_plan(out).sweep_id
    assert str(res.exception) == (f"sweep.curator_server: None, but {str(out)!r} holds sweep {sweep_id} whose "
                                  "curators were served (vllm) (sweep.json) (fix: --set sweep.curator_server=vllm to "
                                  "resume it, or a new --out folder)")
    assert {f: f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()} == before
    res = CliRunner().invoke(app, argv)  # the same command: resumes the arm with a fresh server
    assert res.exit_code == 0, res.output
    assert "sweep incomplete" not in res.output and "resumed after" in res.output
    assert rows(out) == inprocess  # the resumed arm is the uninterrupted one, row for row
    assert gone(pid_of(log))


@pytest.mark.slow  # launches stand-in servers and interrupts the sweep
@pytest.mark.alfworld  # ~8 s: one server start, one game
def test_an_interrupted_sweep_stops_the_server_it_launched(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path, repo_root: Path) -> None:
    from twinrun.models.served_curator import served_policy_factory

    spec = served(load_spec(smoke_spec_path, FAST), curator_server="vllm", curator_server_command=stand_in())
    out = tmp_path / "sweep"
    inner = served_policy_factory(_servers(spec, run_dir, out, repo_root))

    def factory(arm, spec_):
        policy = inner(arm, spec_)
        policy.batch = lambda requests: (_ for _ in ()).throw(KeyboardInterrupt())  # Ctrl-C during a turn
        return policy

    with pytest.raises(KeyboardInterrupt):
        sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=GAMES, workers=0, progress=False,
                 policy_factory=factory)
    log = out / "servers" / "trl@1.log"
    assert "twinrun: server stopped" in log.read_text() and gone(pid_of(log))
    assert not (out / "arms" / "trl@1.jsonl").exists() or not (out / "arms" / "trl@1.jsonl").read_text()


@pytest.mark.alfworld
@pytest.mark.slow
def test_user_endpoints_one_per_checkpoint_are_probed_before_the_first_write(
        tmp_path: Path, smoke_spec_path: Path, tiny: Path, alfworld_data: Path, repo_root: Path,
        cache_dir: Path) -> None:
    import shutil

    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.sweeps.served import free_port
    from twinrun.models.served_curator import served_policy_factory

    run = tmp_path / "runs" / "trl"
    for step in (1, 2):
        shutil.copytree(tiny, run / "checkpoints" / f"step-{step:06d}")
    ports = [free_port(), free_port()]
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    procs = [subprocess.Popen(launch_argv(stand_in(), model=str(run / "checkpoints" / f"step-{s:06d}"), port=p,
                                          dtype="float32", seed=0, max_model_len=None), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for s, p in zip((1, 2), ports)]
    try:
        urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
        dead = f"http://127.0.0.1:{free_port()}/v1"
        out = tmp_path / "sweep"
        base = ["sweep", f"trl={run}", "--spec", str(smoke_spec_path), "--out", str(out), "--games", "2",
                "--workers", "0", "--no-progress", "--cache", str(cache_dir), "--set", "sweep.streams=1",
                "--set", "executor.max_turns=2", "--set", "sweep.curator_server=endpoints"]
        # one URL for two checkpoints: refused in one line naming both, before anything is written
        res = CliRunner().invoke(app, [*base, "--set", f"sweep.curator_endpoints={json.dumps(urls[:1])}"])
        assert isinstance(res.exception, sw.SweepError) and not out.exists(), res.output  # the CLI's exit 2
        assert str(res.exception) == ("sweep.curator_endpoints: 1 URL(s) for 2 checkpoints (trl@1, trl@2) (fix: one "
                                      "base URL per checkpoint, in that order)")
        # the dtype the user's servers load at: twinrun cannot set or read it, so it must be stated
        res = CliRunner().invoke(app, [*base, "--set", f"sweep.curator_endpoints={json.dumps(urls)}"])
        assert isinstance(res.exception, sw.SweepError) and not out.exists(), res.output
        assert str(res.exception).startswith("sweep.curator_server: endpoints, but sweep.curator_dtype is not stated")
        base += ["--set", "sweep.curator_dtype=float32"]
        deadline = time.monotonic() + 120
        while not all(_up(u) for u in urls):
            assert time.monotonic() < deadline, "stand-in servers did not start"
            time.sleep(0.5)
        # a URL nothing answers on: refused before anything is written (health probe)
        res = CliRunner().invoke(app, [*base, "--set", f"sweep.curator_endpoints={json.dumps([urls[0], dead])}"])
        assert isinstance(res.exception, sw.SweepError) and not out.exists(), res.output
        assert str(res.exception).startswith(f"sweep.curator_endpoints: {dead} (checkpoint trl@2) does not answer "
                                             "/models (ConnectError")
        assert str(res.exception).endswith("(fix: start its server, or correct the URL)")
        spec = load_spec(smoke_spec_path, ["sweep.streams=1", "executor.max_turns=2", "sweep.curator_server=endpoints",
                                           "sweep.curator_dtype=float32", f"sweep.curator_endpoints={json.dumps(urls)}"])
        factory = served_policy_factory(CuratorServers(spec, {"trl": run}, out))
        sw.sweep(spec, {"trl": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
                 policy_factory=factory)
        # each checkpoint's turns came from its own server: 2 games each
        assert [httpx.get(u.removesuffix("/v1") + "/stats").json()["completions"] for u in urls] == [2, 2]
        assert all(len(v) == 2 for v in rows(out).values())
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_vllm_launch_command_is_the_checkpoint_on_its_gpu_at_the_sweep_dtype(
        tmp_path: Path, smoke_spec_path: Path) -> None:
    run = tmp_path / "runs" / "trl"
    for step in (5, 10):
        (run / "checkpoints" / f"step-{step:06d}").mkdir(parents=True)
        (run / "checkpoints" / f"step-{step:06d}" / "config.json").write_text("{}")
    spec = load_spec(smoke_spec_path, ["sweep.curator_server=vllm", "sweep.curator_dtype=bfloat16", "seed=7"])
    out = tmp_path / "sweep"
    servers = CuratorServers(spec, {"trl": run}, out, environ={"PATH": "/usr/bin"})
    ckpt = str(run / "checkpoints" / "step-000010")
    arm = sw.ArmPlan(arm="trl@10#r1", role="checkpoint", replicate=1, run="trl", checkpoint_step=10,
                     checkpoint_path=ckpt, device="cuda:3", gpus="3", wave=0)
    server = servers.server_for(arm)
    assert server.argv == ["vllm", "serve", ckpt, "--host", "127.0.0.1", "--port", str(server.port), "--dtype",
                           "bfloat16", "--seed", "7", "--max-model-len", str(2048 + 96), "--generation-config", "vllm"]
    assert server.env == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "3"}
    assert server.log_path == out / "servers" / "trl@10.log" and 1024 < server.port < 65536
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1" and not out.exists()  # nothing written yet
    assert launch_argv(None, model="m", port=1, dtype="float32", seed=0, max_model_len=None) == [
        "vllm", "serve", "m", "--host", "127.0.0.1", "--port", "1", "--dtype", "float32", "--seed", "0",
        "--generation-config", "vllm"]  # no curator.max_prompt_tokens: the model's own context
    assert list(VLLM_COMMAND[:2]) == ["vllm", "serve"]
    assert "CUDA_VISIBLE_DEVICES" not in launch_env(None, {"PATH": "/usr/bin"})  # no placement: the server's own
    # the request: the rendered ids, the spec's sampling, the stream's seed, nothing left to the server
    from twinrun.core.sweeps.served import completion_body

    body = completion_body("m", [1, 2, 3], seed=42, temperature=0.7, top_p=0.9, top_k=None, max_tokens=96,
                           stop_token_ids=[151645])
    assert body["prompt"] == [1, 2, 3] and body["seed"] == 42 and body["top_k"] == -1 and body["max_tokens"] == 96
    assert body["skip_special_tokens"] is False and body["return_token_ids"] is True
    assert body["stop_token_ids"] == [151645] and body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0
    # guards, each one line
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(sw.SweepError, match=r"^sweep.curator_server: vllm, but vllm is not installed here \(fix: "):
            servers.check()
    with pytest.raises(sw.SweepError, match=r"^sweep.curator_server_command: .* must name \{model\} and \{port\}"):
        CuratorServers(served(spec, curator_server_command=["serve", "{model}"]), {"trl": run}, out)
    with pytest.raises(sw.SweepError, match=r"^sweep.curator_server_command: 'no-such-server' is not an executable"):
        CuratorServers(served(spec, curator_server_command=["no-such-server", "{model}", "{port}"]), {"trl": run},
                       out).check()
    # a launched vLLM server runs on a GPU: unstated, the dtype is the spec's compute dtype even with --device cpu
    bf16 = load_spec(smoke_spec_path, ["curator.precision=bf16", "sweep.curator_server=vllm"])
    assert sw.eval_dtype(bf16, gpu=False) == "bf16"
    assert sw.eval_dtype(served(bf16, curator_server=None), gpu=False) == "fp32"
    with pytest.raises(sw.SweepError, match=r"has an unknown placeholder"):
        CuratorServers(served(spec, curator_server_command=["s", "{model}", "{port}", "{gpu}"]), {"trl": run}, out)


def test_a_served_policy_sends_what_the_in_process_policy_renders(tmp_path: Path, smoke_spec_path: Path,
                                                                   tiny: Path) -> None:
    """The request body carries HFCuratorPolicy's prompt ids and row seed (a scripted client: no server)."""
    from twinrun.models.curator_policy import hf_policy_factory, policy_settings
    from twinrun.models.served_curator import ServedCuratorPolicy

    spec = load_spec(smoke_spec_path, ["curator.history=1"])
    arm = sw.ArmPlan(arm="trl@1", role="checkpoint", run="trl", checkpoint_step=1, checkpoint_path=str(tiny))
    inproc = hf_policy_factory(arm, spec)
    inproc._load_tokenizer()
    call = inproc._tok.encode('<tool_call>\n{"name": "curate"}</tool_call>') + inproc.eos_ids()

    class Client:
        model, server = "m", None
        sent: list = []

        def complete_many(self, bodies):
            Client.sent = bodies
            return [(call, "ignored")] + [(None, "text")] * (len(bodies) - 1)

        def close(self):
            pass

    settings = policy_settings(arm, spec)
    policy = ServedCuratorPolicy(settings.pop("model_dir"), client=Client(), **settings)
    from twinrun.core.curation.context_shape import HistoryTurn

    reqs = [("chi one", [], 5), ("chi two", [HistoryTurn("chi zero", "turn zero")], 6)]
    texts = policy.batch(reqs)
    assert [b["prompt"] for b in Client.sent] == [inproc.prompt_ids(x, h) for x, h, _ in reqs]
    assert [b["seed"] for b in Client.sent] == [inproc.row_seed(x, s) for x, _, s in reqs]
    assert all(b["stop_token_ids"] == inproc.eos_ids() and b["max_tokens"] == spec.curator.max_response_tokens
               for b in Client.sent)
    # the returned ids decoded as the in-process path decodes its own: the tags kept, the end-of-turn token dropped
    assert texts[0] == inproc.decode(call) == '<tool_call>\n{"name": "curate"}</tool_call>' and texts[1] == "text"
