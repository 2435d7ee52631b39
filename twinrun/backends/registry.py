"""The backend contract: the one place that lists backends, each as one :class:`BackendEntry` of lazy hooks.

Like inspect_ai / lm-evaluation-harness plugins: nothing here imports a framework. Each hook is a
``"module:attribute"`` target loaded when it is used; ``compile`` and ``structural`` are pure python (usable by
`twinrun plan` with only base dependencies), ``train`` imports the framework when called. Everything that used to
list ``trl`` and ``verl`` by hand is built from :data:`BACKENDS`: the names a spec may list (core's
``Backend``, registered here), `twinrun plan`'s knob table, the package checks, the SFT/ROSE trainers, `twinrun
parity`'s pair and `advdiff`'s default presets. A third framework is one folder and one :func:`register` call
(docs/layout.md, "A third backend").
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from typing import TYPE_CHECKING

from twinrun.core.errors import DependencyMissing, TwinrunError
from twinrun.core.spec.base import register_backend_name, unregister_backend_name

if TYPE_CHECKING:  # the presets module imports numpy and pandas: loaded only when a backend brings presets
    from twinrun.core.advantages.presets import Preset


@dataclass(frozen=True)
class Package:
    """An optional package the backend imports in some runs; checked before the first write (app/environment).

    when: ``always``, ``gpu`` (the spec trains on GPUs) or ``env:NAME`` (the variable NAME is 1/true/yes)."""

    module: str
    why: str
    when: Literal["always", "gpu"] | str = "always"
    load: bool = True  # import it (False: only find it; an import that takes seconds)
    dist: str = ""  # its distribution name (default: the module's, with - for _)
    fix: str = ""  # the install line the refusal names


@dataclass(frozen=True)
class BackendEntry:
    """What a framework supplies; each target is ``"module:attribute"``.

    compile: ``compile_spec(spec) -> CompiledBackend`` (native config, realised counts, knob settings; pure python).
    train: ``train(spec, out, resume, cache_dir, *, log, keep_row_tokens, hold_lock) -> summary``: runs inside core's
    run lifecycle (core.records.lifecycle) and imports the framework.
    rollout: the hook the framework generates the curator's turns through (core's position schedule drives it).
    export: how a framework checkpoint becomes ``checkpoints/step-NNNNNN`` (HF weights).
    metrics: ``{StepMetrics field: native metric name}`` of the training fields.
    preset: the core advantage preset that reproduces the framework's own default advantages; ``presets``: any
    further presets the backend brings (added to core's table at registration).
    structural: ``structural_settings(spec) -> {plan row: native spelling}`` for plan's structural rows (pure).
    requires / extra / packages: import names checked before ``train``, the pip extra providing them, and the
    optional packages some runs need.
    sft: ``train_sft(spec, out, *, resume, prepared, optimizer_from, ...)`` (SFT and ROSE), or "".
    replay: recorded rollouts through the framework's update (`twinrun parity`), or "".
    check: pure python: refuses a spec the framework would reject only mid-run, or ""."""

    name: str
    compile: str
    train: str
    requires: tuple[str, ...]
    extra: str
    rollout: str = ""
    export: str = ""
    metrics: str = ""
    preset: str = ""
    presets: tuple[Preset, ...] = ()
    structural: str = ""
    packages: tuple[Package, ...] = ()
    sft: str = ""
    replay: str = ""
    check: str = ""


BACKENDS: dict[str, BackendEntry] = {}


def register(entry: BackendEntry) -> BackendEntry:
    """Add a backend: its name becomes a spec choice, its presets join core's table; every table built from
    :data:`BACKENDS` shows it. (Its ``preset`` is checked against core's table by tests/backends/
    test_backend_contract.py, not here: this module stays cheap to import for every command.)"""
    if entry.presets:
        from twinrun.core.advantages.presets import PRESETS

        for p in entry.presets:
            PRESETS.setdefault(p.name, p)
    BACKENDS[entry.name] = entry
    register_backend_name(entry.name)
    return entry


def unregister(name: str) -> None:
    """Remove a backend registered in this process (tests)."""
    entry = BACKENDS.pop(name, None)
    unregister_backend_name(name)
    if entry and entry.presets:
        from twinrun.core.advantages.presets import PRESETS

        for p in entry.presets:
            PRESETS.pop(p.name, None)


_DEEPSPEED = "the accelerate launch's DeepSpeed ZeRO-3 (ACCELERATE_USE_DEEPSPEED)"

register(BackendEntry(
    name="trl",
    compile="twinrun.backends.trl.compile:compile_spec",
    train="twinrun.backends.trl.train:train",
    requires=("torch", "transformers", "trl", "datasets"),
    extra="trl",
    rollout="twinrun.backends.trl.per_position:PerPositionGRPOTrainer",
    export="twinrun.backends.trl.records:export_checkpoint",
    metrics="twinrun.backends.trl.records:TRL_NAMES",
    preset="trl",
    structural="twinrun.backends.trl.compile:structural_settings",
    packages=(Package("deepspeed", _DEEPSPEED, when="env:ACCELERATE_USE_DEEPSPEED", fix="pip install 'twinrun[cluster]'"),),
    sft="twinrun.backends.trl.sft:train_sft",
    replay="twinrun.backends.trl.replay:replay",
))
register(BackendEntry(
    name="verl",
    compile="twinrun.backends.verl.compile:compile_spec",
    train="twinrun.backends.verl.train:train",
    requires=("torch", "transformers", "verl", "ray"),
    extra="verl",
    rollout="twinrun.backends.verl.agent_loop:CuratorAgentLoop",
    export="twinrun.backends.verl.checkpoints:merge_to_hf",
    metrics="twinrun.backends.verl.metrics:VERL_NAMES",
    preset="verl",
    structural="twinrun.backends.verl.compile:structural_settings",
    packages=(
        Package("flash_attn", "verl's padding-free batches on GPUs (model.use_remove_padding)", when="gpu",
                dist="flash-attn", fix="pip install flash-attn --no-build-isolation (docs/cluster.md)"),
        Package("ray", "verl's workers", fix="pip install 'twinrun[verl]'"),
    ),
    sft="twinrun.backends.verl.sft:train_sft",
    replay="twinrun.backends.verl.replay:replay",
    check="twinrun.backends.verl.compile:check_runnable",
))


def entry(name: str) -> BackendEntry:
    try:
        return BACKENDS[name]
    except KeyError:
        raise TwinrunError(
            f"backend: {name!r} is not registered (fix: one of {', '.join(sorted(BACKENDS))})"
        ) from None


def names_with(hook: str) -> tuple[str, ...]:
    """The registered backends that supply ``hook`` (e.g. ``sft``, ``replay``), in registration order."""
    return tuple(n for n, e in BACKENDS.items() if getattr(e, hook))


def missing_dependencies(name: str) -> list[str]:
    return [m for m in entry(name).requires if importlib.util.find_spec(m) is None]


def check_dependencies(name: str) -> None:
    missing = missing_dependencies(name)
    if missing:
        e = entry(name)
        raise DependencyMissing(
            f"backend {name}: {', '.join(missing)} not installed (fix: pip install 'twinrun[{e.extra}]')"
        )


def load(target: str) -> Any:
    """The attribute a ``"module:attribute"`` target names (imports its module)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)



def check_runnable(name: str, spec: Any) -> None:
    """Refuse up front (one line: field, value, fix) what the backend's framework would reject deep in its run."""
    target = entry(name).check
    if target:
        load(target)(spec)


def compiler(name: str) -> Callable[..., Any]:
    return load(entry(name).compile)


def structural(name: str, spec: Any) -> dict[str, str]:
    """The backend's native spelling of each of plan's structural rows ({} when it states none)."""
    target = entry(name).structural
    return dict(load(target)(spec)) if target else {}


def trainer(name: str) -> Callable[..., Any]:
    check_dependencies(name)
    return load(entry(name).train)


def sft_trainer(name: str) -> Callable[..., Any]:
    """The backend's SFT trainer (`twinrun sft`, ROSE rounds)."""
    e = entry(name)
    if not e.sft:
        raise TwinrunError(f"--backend: {name!r} has no SFT trainer (fix: one of {', '.join(names_with('sft'))})")
    return load(e.sft)


def replayer(name: str) -> Callable[..., Any]:
    """The backend's replay of recorded rollouts (`twinrun parity`); imports the framework when called."""
    e = entry(name)
    if not e.replay:
        raise TwinrunError(f"backend {name}: no replay of recorded rollouts (fix: `twinrun parity` needs trl and verl)")
    check_dependencies(name)
    return load(e.replay)


def default_presets() -> tuple[str, ...]:
    """`advdiff`'s default presets: each backend's own, then GiGPO's and the paper's."""
    own = tuple(dict.fromkeys(e.preset for e in BACKENDS.values() if e.preset))
    return (*own, *(p for p in ("verl_agent_gigpo", "twinrun_paper") if p not in own))
