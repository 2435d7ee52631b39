"""Issue 43, every environment fault a one-line error: the machine a user stands on, not what they typed (that is
tests/test_bad_inputs.py). Each fault is made for real on this CPU machine: no GPU for a GPU spec (this machine has
none), a package that fails to import (a broken copy first on PYTHONPATH), a hub id with the hub unreachable (a
refused loopback port as HF_ENDPOINT) and with HF_HUB_OFFLINE=1, endpoints served by a real local HTTP server (the
wrong model, a key it refuses) or by nobody (a refused port), a refused Ray address, a read-only folder and a volume
too small (a tmpfs mounted in a private mount namespace when this user may, else a folder without write permission
and a model too large for any disk), no Java on PATH, ALFWorld data missing or incomplete.

Each runs `python -m twinrun.cli` in a subprocess (the environment is the fault) and must end with exit 2, one line
naming what, where and the fix, within 10 seconds, and leave the workspace byte-identical with no --out created.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twinrun.app.environment.machine import gpu_driver
from twinrun.core.records import JsonlWriter
from twinrun.testing.local_openai import LocalOpenAIServer
from twinrun.testing.run_folders import folder_digest

LIMIT_S = 10.0
SPEC8B = "{repo}/experiments/skillos-alfworld-qwen3-8b.yaml"
# the paper arm on this machine: CPU, the tiny curator, a split the test data holds; its endpoints stay as named
CPU8B = ["--set", "resources.gpus_per_node=0", "--set", "resources.nodes=1", "--set", "curator.model=tiny-qwen3",
         "--set", "environment.split=valid_train"]
TIMES: dict[str, float] = {}


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed): a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_mount() -> bool:
    """This user may mount a tmpfs in a private mount namespace (root in most containers, CI included)."""
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def servers():
    """Real OpenAI-compatible servers on loopback: one serving the spec's executor model, one serving another
    model, one that refuses every key but its own."""
    reply = lambda req: "ok"  # noqa: E731
    with LocalOpenAIServer(reply, model="Qwen/Qwen3-8B") as good, \
            LocalOpenAIServer(reply, model="other-model") as other, \
            LocalOpenAIServer(reply, model="Qwen/Qwen3-8B", api_key="the-right-key") as keyed:
        yield {"good": good.base_url, "other": other.base_url, "keyed": keyed.base_url}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, repo_root):
    """A spec with its prompts, a trained-looking TRL run folder, broken packages, ALFWorld data folders missing
    or incomplete, an empty HF home, and the mount points the read-only and small-volume faults use."""
    ws = tmp_path_factory.mktemp("envws")
    shutil.copy(repo_root / "experiments" / "smoke-cpu.yaml", ws / "spec.yaml")
    shutil.copytree(repo_root / "experiments" / "prompts", ws / "prompts")
    run = ws / "trl-run"
    (run / "checkpoints" / "step-000001").mkdir(parents=True)
    (run / "spec.yaml").write_text((ws / "spec.yaml").read_text())
    (run / "run.json").write_text(json.dumps({"backend": "trl"}))
    with JsonlWriter(run / "metrics.jsonl") as w:
        w.write({"kind": "step", "step": 1})
    (run / "checkpoints" / "step-000001" / "config.json").write_text("{}")
    for pkg, err in (("alfworld", "libGL.so.1: cannot open shared object file"),
                     ("deepspeed", "CUDA_HOME does not exist, unable to compile CUDA op(s)")):
        (ws / "broken" / pkg).mkdir(parents=True)
        (ws / "broken" / pkg / "__init__.py").write_text(f"raise ImportError({err!r})\n")
    (ws / "data-empty").mkdir()
    (ws / "data-partial" / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    trial = ws / "data-nogames" / "json_2.1.1" / "valid_train" / "pick_and_place-X-None-Y-1" / "trial_1"
    trial.mkdir(parents=True)
    (trial / "traj_data.json").write_text('{"task_type": "pick_and_place_simple"}')
    (ws / "hf-home").mkdir()
    (ws / "home").mkdir()
    (ws / "ro").mkdir()
    (ws / "small").mkdir()
    # Qwen3-0.6B's shapes: 3 checkpoints need ~29 GB; a 1 MB volume (or, without a mount, a 10T model) cannot hold it
    big = can_mount()
    cfg = {"hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072, "num_attention_heads": 16,
           "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True}
    if not big:
        cfg.update(hidden_size=65536, num_hidden_layers=400, intermediate_size=262144)
    (ws / "model").mkdir()
    (ws / "model" / "config.json").write_text(json.dumps(cfg))
    return ws


def _case(id_, args, expect, env=None, wrap=None, skip=None):
    return pytest.param(args, expect, env or {}, wrap, id=id_,
                        marks=[pytest.mark.skipif(skip[0], reason=skip[1])] if skip else [])


NO_GPU = (gpu_driver(), "this machine has a GPU driver: no GPU cannot be made for real here")
CASES = [
    # the four measured in the issue
    _case("train-no-gpu", ["train", SPEC8B, "--backend", "trl", "--out", "{ws}/new", "--set", "resources.nodes=1",
                           "--set", "resources.gpus_per_node=1"], "GPUs: 0 on this node", skip=NO_GPU),
    _case("sft-plan-hub-unreachable", ["sft", "{repo}/experiments/sft-sciworld-qwen3-1.7b.yaml", "--plan"],
          "did not answer within 3 s", env={"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None,
                                            "HF_ENDPOINT": "http://127.0.0.1:{refused}", "HF_HOME": "{ws}/hf-home"}),
    _case("sweep-ray-refused", ["sweep", "{ws}/trl-run", "--spec", "{ws}/spec.yaml", "--out", "{ws}/new", "--ray",
                                "127.0.0.1:{refused}"], "--ray: '127.0.0.1:"),
    _case("train-executor-dead", ["train", SPEC8B, "--backend", "trl", "--out", "{ws}/new", *CPU8B, "--set",
                                  "executor.base_url=http://127.0.0.1:{refused}/v1"], "executor.base_url"),
    # the node
    _case("preflight-no-gpu", ["preflight", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new", "--set",
                               "resources.gpus_per_node=1"], "GPUs: 0 on this node", skip=NO_GPU),
    _case("sweep-device-cuda", ["sweep", "{ws}/trl-run", "--spec", "{ws}/spec.yaml", "--out", "{ws}/new",
                                "--device", "cuda"], "--device cuda", skip=NO_GPU),
    _case("train-read-only-out", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/ro/new"],
          "--out: ", wrap="ro"),
    _case("train-too-little-disk", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/small/new",
                                    "--set", "curator.model={ws}/model"], "disk for checkpoints", wrap="small"),
    # packages
    _case("train-alfworld-fails-to-import", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new"],
          "import alfworld: ", env={"PYTHONPATH": "{ws}/broken:{repo}"}),
    _case("train-deepspeed-fails-to-import", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new"],
          "import deepspeed: ", env={"PYTHONPATH": "{ws}/broken:{repo}", "ACCELERATE_USE_DEEPSPEED": "true"}),
    # models
    _case("train-hub-unreachable", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new", "--set",
                                    "curator.model=twinrun-test/absent-model"], "did not answer within 3 s",
          env={"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, "HF_ENDPOINT": "http://127.0.0.1:{refused}",
               "HF_HOME": "{ws}/hf-home"}),
    _case("train-hub-offline", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new", "--set",
                                "curator.model=twinrun-test/absent-model"], "HF_HUB_OFFLINE=1",
          env={"HF_HUB_OFFLINE": "1", "HF_HOME": "{ws}/hf-home"}),
    _case("sft-plan-hub-offline", ["sft", "{repo}/experiments/sft-sciworld-qwen3-1.7b.yaml", "--plan"],
          "sft.model: 'Qwen/Qwen3-1.7B' is not in the HF cache", env={"HF_HUB_OFFLINE": "1", "HF_HOME": "{ws}/hf-home"}),
    # endpoints
    _case("train-executor-another-model", ["train", SPEC8B, "--backend", "trl", "--out", "{ws}/new", *CPU8B, "--set",
                                           "executor.base_url={other}"], "it serves ['other-model']"),
    _case("train-executor-wrong-key", ["train", SPEC8B, "--backend", "trl", "--out", "{ws}/new", *CPU8B, "--set",
                                       "executor.base_url={keyed}"], "executor.api_key_env",
          env={"OPENAI_API_KEY": "a-wrong-key"}),
    _case("train-judge-dead", ["train", SPEC8B, "--backend", "trl", "--out", "{ws}/new", *CPU8B, "--set",
                               "executor.base_url={good}", "--set", "judge.base_url=http://127.0.0.1:{refused}/v1"],
          "judge.base_url"),
    _case("eval-agent-endpoint-dead", ["eval-agent", "--base-url", "http://127.0.0.1:{refused}/v1", "--model", "m",
                                       "--out", "{ws}/new"], "--base-url: "),
    # Ray
    _case("train-verl-ray-refused", ["train", "{ws}/spec.yaml", "--backend", "verl", "--out", "{ws}/new", "--set",
                                     "resources.ray_address=127.0.0.1:{refused}"], "resources.ray_address"),
    # data and Java
    _case("rose-no-java", ["rose", "{repo}/experiments/sft-sciworld-cpu.yaml", "--backend", "trl", "--out",
                           "{ws}/new"], "java: ", env={"PATH": "{ws}/home"}),
    _case("train-alfworld-unset", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new"],
          "ALFWORLD_DATA is not set", env={"ALFWORLD_DATA": None, "HOME": "{ws}/home"}),
    _case("train-alfworld-no-json", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new"],
          "has no json_2.1.1/", env={"ALFWORLD_DATA": "{ws}/data-empty"}),
    _case("train-alfworld-split-missing", ["train", "{ws}/spec.yaml", "--backend", "trl", "--out", "{ws}/new"],
          "environment.split valid_train", env={"ALFWORLD_DATA": "{ws}/data-partial"}),
    _case("sweep-alfworld-no-games", ["sweep", "{ws}/trl-run", "--spec", "{ws}/spec.yaml", "--out", "{ws}/new",
                                      "--split", "valid_train"], "holds no game",
          env={"ALFWORLD_DATA": "{ws}/data-nogames"}),
]


def test_the_table_is_large_enough():
    assert len(CASES) >= 15


def _wrapped(cmd: list[str], wrap: str | None, ws: Path) -> tuple[list[str], bool]:
    """The command inside a private mount namespace with a read-only or a 1 MB tmpfs on ws/ro or ws/small, when
    this user may mount; else (False) the fault is made without a mount (see the workspace)."""
    if wrap is None or not can_mount():
        return cmd, False
    opts = "ro,size=1m" if wrap == "ro" else "size=1m"
    script = f"mount -t tmpfs -o {opts} tmpfs {shlex.quote(str(ws / wrap))} && exec {shlex.join(cmd)}"
    return ["unshare", "-m", "sh", "-c", script], True


@pytest.mark.parametrize("args, expect, env, wrap", CASES)
def test_an_environment_fault_is_one_line_exit_2_within_seconds_and_changes_nothing(
        args, expect, env, wrap, workspace, servers, repo_root, alfworld_data, request):
    fill = {"ws": str(workspace), "repo": str(repo_root), "refused": str(refused_port()), **servers}
    args = [a.format(**fill) for a in args]
    environ = {**os.environ, "PYTHONPATH": str(repo_root), "ALFWORLD_DATA": str(alfworld_data), "HF_HUB_OFFLINE": "1"}
    for k, v in env.items():
        if v is None:
            environ.pop(k, None)
        else:
            environ[k] = v.format(**fill)
    cmd, mounted = _wrapped([sys.executable, "-m", "twinrun.cli", *args], wrap, workspace)
    if wrap == "ro" and not mounted:
        if os.geteuid() == 0:
            pytest.skip("root ignores folder permissions and may not mount here: no read-only folder to be had")
        (workspace / "ro").chmod(0o555)
    before = folder_digest(workspace)
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=120)
    finally:
        (workspace / "ro").chmod(0o755)
    took = time.monotonic() - t0
    TIMES[request.node.callspec.id] = took
    print(f"\n{request.node.callspec.id}: {took:.1f} s: {r.stderr.strip()}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    assert len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("twinrun: error: ") and "fix" in lines[0], lines[0]
    assert expect.format(**fill) in lines[0], lines[0]
    assert took < LIMIT_S, f"{took:.1f} s: {lines[0]}"
    assert folder_digest(workspace) == before, "a refused command changed or left a file"
    assert not (workspace / "new").exists()


def test_bf16_on_a_gpu_without_it_is_refused():
    """A GPU that lacks bf16 (pre-Ampere) cannot exist on this CPU machine: a named fake of torch.cuda stands in
    for one V100, and the dtype row names the field and the fix."""
    from twinrun.app.environment.machine import compute_dtype, gpus

    class FakeV100Cuda:  # a fake: the real thing cannot exist on CPU
        def is_available(self) -> bool:
            return True

        def device_count(self) -> int:
            return 1

        def is_bf16_supported(self) -> bool:
            return False

        def get_device_name(self, i: int) -> str:
            return "Tesla V100-SXM2-32GB"

    cuda = FakeV100Cuda()
    assert gpus(1, cuda=cuda)[0].status == "ok"
    row = compute_dtype("bf16", 1, cuda=cuda)[0]
    assert row.status == "fail" and "curator.precision" in row.why and "fp32" in row.why
    assert compute_dtype("fp32", 1, cuda=cuda)[0].status == "ok"


def test_an_endpoint_that_answers_is_accepted(servers):
    """The other side of the endpoint rows: the right model and the right key pass, so a refusal is the fault."""
    from twinrun.app.environment.network import endpoint

    assert endpoint("executor", servers["good"], "Qwen/Qwen3-8B", "K", {})[0].status == "ok"
    assert endpoint("executor", servers["keyed"], "Qwen/Qwen3-8B", "K", {"K": "the-right-key"})[0].status == "ok"
    assert endpoint("executor", servers["keyed"], "Qwen/Qwen3-8B", "K", {})[0].status == "fail"
