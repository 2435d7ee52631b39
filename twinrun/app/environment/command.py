"""Which checks a command needs, in the order a user would fix them (the folder, the node, the data, the
packages, the models, the endpoints, the disk), produced lazily so the first failure stops the rest."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from twinrun.app.environment import data, machine, network, packages
from twinrun.app.environment.rows import Check, raise_first_failure

TRAINING = ("train", "run", "preflight", "parity")
SCIWORLD = ("rose", "eval-agent")
KINDS = (*TRAINING, "sweep", "sft", "sft-plan", *SCIWORLD)


def _spec_endpoints(spec: Any, environ: Mapping[str, str]) -> Iterator[Check]:
    """The executor and the judge the spec names (kind openai)."""
    ex, judge = spec.executor, spec.judge
    if ex.kind == "openai":
        yield from network.endpoint("executor", ex.base_url, ex.model, ex.api_key_env, environ)
    if judge.kind == "openai":
        yield from network.endpoint("judge", judge.base_url, judge.model, judge.api_key_env, environ)


def _packages(spec: Any, backends: Sequence[str], environ: Mapping[str, str], *, gpu: bool, ray: bool) -> Iterator[Check]:
    for module, why, load in packages.needed(spec, list(backends), dict(environ), gpu=gpu, ray=ray):
        yield packages.importable(module, why, load=load)


def _environment_data(spec: Any, environ: Mapping[str, str], splits: Sequence[tuple[str, str]]) -> Iterator[Check]:
    name = spec.environment.name
    if name == "alfworld":
        yield from data.alfworld(environ, splits)
    elif name == "scienceworld":
        yield from machine.java()


def environment_rows(kind: str, spec: Any = None, *, out: Path | None = None, backends: Sequence[str] = (),
                     environ: Mapping[str, str] | None = None, ray: str | None = None, device: str = "cpu",
                     split: str | None = None, runs: int = 1, models: Sequence[str] = (),
                     teacher: tuple[str, str, str] | None = None, cuda: Any = None) -> Iterator[Check]:
    """The rows of one command ``kind`` (KINDS). ``backends``: those it trains; ``runs``: training runs it writes
    (backends x seeds, for the disk); ``split``: a sweep's --split; ``models``: further model ids (eval-agent's
    --checkpoint); ``teacher``: (base URL, model, key variable) of an SFT teacher; ``cuda``: a stand-in for
    torch.cuda (tests only: a CPU machine cannot be a GPU node)."""
    if kind not in KINDS:
        raise ValueError(f"environment check: unknown command kind {kind!r}")
    environ = os.environ if environ is None else environ
    if out is not None and kind != "sft-plan":
        yield from machine.out_writable(out)
    if kind in TRAINING:
        want = spec.resources.gpus_per_node
        yield from machine.gpus(want, cuda=cuda)
        yield from machine.compute_dtype(spec.curator.precision, want, cuda=cuda)
        splits = [("environment.split", spec.environment.split)]
        if kind == "run":
            splits.append(("environment.eval_split", spec.environment.eval_split))
        # the data before the packages: importing alfworld without ALFWORLD_DATA creates ~/.cache/alfworld
        yield from _environment_data(spec, environ, splits)
        yield from _packages(spec, backends, environ, gpu=bool(want),
                             ray=bool(spec.resources.ray_address) and "verl" in backends)
        yield from network.model_id("curator.model", spec.curator.model, environ)
        if spec.executor.kind == "hf":
            yield from network.model_id("executor.model", spec.executor.model, environ)
        for m in models:  # parity --model: the checkpoint both trainers start from
            yield from network.model_id("--model", m, environ)
        yield from _spec_endpoints(spec, environ)
        if "verl" in backends:
            yield from network.ray_address(spec.resources.ray_address, "resources.ray_address")
        if out is not None and kind in ("train", "run"):
            saves = -(-spec.steps // spec.checkpoint_every) * max(runs, 1)
            yield from machine.disk(out, spec.curator.model, saves)
    elif kind == "sweep":
        on_gpu = device.startswith("cuda")
        yield from machine.gpus(1 if on_gpu else 0, field=f"--device {device}", cuda=cuda, cpu_fix="--device cpu")
        yield from _environment_data(spec, environ, [("--split" if split else "environment.eval_split",
                                                      split or spec.environment.eval_split)])
        yield from _packages(spec, (), environ, gpu=False, ray=bool(ray) and ray != "local")
        if spec.executor.kind == "hf":
            yield from network.model_id("executor.model", spec.executor.model, environ)
        yield from _spec_endpoints(spec, environ)
        yield from network.ray_address(ray)
    elif kind in ("sft", "sft-plan"):
        model = spec.sft.model or spec.curator.model
        field = "sft.model" if spec.sft.model else "curator.model"
        if kind == "sft":
            want = spec.resources.gpus_per_node
            yield from machine.gpus(want, cuda=cuda)
            yield from machine.compute_dtype(spec.sft.precision, want, field="sft.precision", cuda=cuda)
        yield from network.model_id(field, model, environ)
        if kind == "sft" and out is not None:
            yield from machine.disk(out, model, spec.sft.epochs, field="sft.epochs")
    else:  # ScienceWorld agents: rose trains, eval-agent plays
        yield packages.importable("scienceworld", "the ScienceWorld simulator")
        yield from machine.java()
        if spec is not None:
            yield from network.model_id("sft.model" if spec.sft.model else "curator.model",
                                        spec.sft.model or spec.curator.model, environ)
        for m in models:
            yield from network.model_id("--checkpoint", m, environ)
        if teacher is not None:
            role = "sft.teacher" if kind == "rose" else "--base-url"
            yield from network.endpoint(role, teacher[0], teacher[1], teacher[2], environ)


def check_environment(kind: str, spec: Any = None, **kw: Any) -> None:
    """Raise the first failed check of ``kind`` as one line (exit 2 at the CLI); nothing is written."""
    raise_first_failure(environment_rows(kind, spec, **kw))


__all__ = ["KINDS", "check_environment", "environment_rows"]
