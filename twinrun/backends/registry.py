"""Backend name -> lazy import targets, with a dependency check that names the extra to install.

Like inspect_ai / lm-evaluation-harness plugins: nothing here imports a framework. `compile` targets are pure
python (usable by `twinrun plan` with only base dependencies); `train` targets import the framework when called.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twinrun.core.errors import DependencyMissing, TwinrunError


@dataclass(frozen=True)
class BackendEntry:
    name: str
    compile: str  # "module:function", pure python
    train: str  # "module:function", imports the framework
    requires: tuple[str, ...]  # import names checked before `train`
    extra: str  # pip extra that provides them
    replay: str = ""  # "module:function": recorded rollouts through the framework's update (`twinrun parity`)
    check: str = ""  # "module:function", pure python: refuses a spec the framework would reject only mid-run


BACKENDS: dict[str, BackendEntry] = {
    "trl": BackendEntry(
        name="trl",
        compile="twinrun.backends.trl.compile:compile_spec",
        train="twinrun.backends.trl.train:train",
        requires=("torch", "transformers", "trl", "datasets"),
        extra="trl",
        replay="twinrun.backends.trl.replay:replay",
    ),
    "verl": BackendEntry(
        name="verl",
        compile="twinrun.backends.verl.compile:compile_spec",
        train="twinrun.backends.verl.train:train",
        requires=("torch", "transformers", "verl", "ray"),
        extra="verl",
        replay="twinrun.backends.verl.replay:replay",
        check="twinrun.backends.verl.compile:check_runnable",
    ),
}


def entry(name: str) -> BackendEntry:
    try:
        return BACKENDS[name]
    except KeyError:
        raise TwinrunError(
            f"backend: {name!r} is not registered (fix: one of {', '.join(sorted(BACKENDS))})"
        ) from None


def missing_dependencies(name: str) -> list[str]:
    return [m for m in entry(name).requires if importlib.util.find_spec(m) is None]


def check_dependencies(name: str) -> None:
    missing = missing_dependencies(name)
    if missing:
        e = entry(name)
        raise DependencyMissing(
            f"backend {name}: {', '.join(missing)} not installed (fix: pip install 'twinrun[{e.extra}]')"
        )


def _load(target: str) -> Callable[..., Any]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_runnable(name: str, spec: Any) -> None:
    """Refuse up front (one line: field, value, fix) what the backend's framework would reject deep in its run."""
    target = entry(name).check
    if target:
        _load(target)(spec)


def compiler(name: str) -> Callable[..., Any]:
    return _load(entry(name).compile)


def trainer(name: str) -> Callable[..., Any]:
    check_dependencies(name)
    return _load(entry(name).train)


def replayer(name: str) -> Callable[..., Any]:
    """The backend's replay of recorded rollouts (`twinrun parity`); imports the framework when called."""
    e = entry(name)
    if not e.replay:
        raise TwinrunError(f"backend {name}: no replay of recorded rollouts (fix: `twinrun parity` needs trl and verl)")
    check_dependencies(name)
    return _load(e.replay)
