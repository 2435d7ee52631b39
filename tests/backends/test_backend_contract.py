"""Issue 54 item 3, the backend contract: a third framework is one registry entry. A fake backend registered in
this process (nothing else edited) is a choice of the spec, a column of `twinrun plan`'s knob table (its compile's
knobs and its spelling of the structural rows) and a source of the package checks; unregistered, it is gone. Each
real backend's hooks load and its metric names are neutral fields."""

from __future__ import annotations

import pytest

from twinrun.backends import registry
from twinrun.backends.compiled import CompiledBackend, KnobSetting
from twinrun.core.advantages.presets import PRESETS, EstimatorConfig, Preset
from twinrun.core.spec import SpecError, load_spec
from twinrun.core.spec.base import backend_names

FAKE_MODULE = "twinrun_fake_framework_engine"  # not installed anywhere: the package check must fail naming it


def fake_compile(spec):
    """The fake framework's native config: TRL's counts (so plan's counts agree) under its own spelling."""
    from twinrun.backends.trl.compile import compile_spec

    trl = compile_spec(spec)
    return CompiledBackend(backend="fake", framework="fake==0.0", config={"rate": spec.optimizer.lr},
                           counts=dict(trl.counts), knobs={"lr": KnobSetting(f"rate={spec.optimizer.lr}", spec.optimizer.lr)})


def fake_structural(spec):
    return {"log_ratio_clamp": "fake: no clamp, ever"}


def fake_train(spec, out, resume=False, cache_dir=None, **kw):
    raise AssertionError("not trained here")


FAKE = registry.BackendEntry(
    name="fake", compile=f"{__name__}:fake_compile", train=f"{__name__}:fake_train", requires=(), extra="fake",
    structural=f"{__name__}:fake_structural", preset="fake_grpo",
    presets=(Preset("fake_grpo", EstimatorConfig("grpo", eps=1e-5), "the fake framework's GRPO", "this test"),),
    packages=(registry.Package(FAKE_MODULE, "the fake framework's engine", fix="pip install twinrun-fake"),),
)


@pytest.fixture
def fake():
    registry.register(FAKE)
    try:
        yield FAKE
    finally:
        registry.unregister("fake")


def test_a_registered_backend_is_a_spec_choice(fake, smoke_spec_path):
    assert backend_names() == ("trl", "verl", "fake")
    assert load_spec(smoke_spec_path, ["backends=[trl,fake]"]).backends == ["trl", "fake"]
    with pytest.raises(SpecError, match=r"backends.0: 'nope' is not a backend \(fix: one of trl, verl, fake\)"):
        load_spec(smoke_spec_path, ["backends=[nope]"])
    assert "fake_grpo" in PRESETS and registry.default_presets()[:3] == ("trl", "verl", "fake_grpo")


def test_an_unregistered_backend_is_refused(smoke_spec_path):
    assert "fake" not in backend_names() and "fake_grpo" not in PRESETS
    with pytest.raises(SpecError, match=r"'fake' is not a backend \(fix: one of trl, verl\)"):
        load_spec(smoke_spec_path, ["backends=[trl,fake]"])


def test_a_registered_backend_is_a_column_of_plans_knob_table(fake, smoke_spec_path):
    from twinrun.app.plan import build_plan

    spec = load_spec(smoke_spec_path, ["backends=[trl,verl,fake]"])
    plan = build_plan(spec)
    rows = {k["name"]: k for k in plan["knobs"]}
    assert plan["backends"]["fake"]["framework"] == "fake==0.0" and plan["counts_equal"]
    assert rows["lr"]["fake"] == f"rate={spec.optimizer.lr}" and rows["lr"]["trl"].startswith("learning_rate")
    assert rows["steps"]["fake"] == "(not mapped)" and "fake has no mapping" in rows["steps"]["why"]
    assert rows["log_ratio_clamp"]["fake"] == "fake: no clamp, ever"  # its spelling of a structural row
    assert rows["log_ratio_clamp"]["verl"] == "clamp(logp-old, -20, 20)"
    assert rows["sample_unit"]["fake"] == "(not mapped)"


def test_a_registered_backends_packages_are_checked(fake, smoke_spec_path):
    from twinrun.app.environment import packages

    spec = load_spec(smoke_spec_path, ["backends=[fake]"])
    want = packages.needed(spec, ["fake"], {}, gpu=False, ray=False)
    assert (FAKE_MODULE, "the fake framework's engine", True) in want
    check = packages.importable(FAKE_MODULE, "the fake framework's engine")
    assert check.status == "fail" and "pip install twinrun-fake" in check.why
    assert FAKE_MODULE not in [m for m, _, _ in packages.needed(spec, ["trl"], {}, gpu=False, ray=False)]


def test_the_real_backends_packages_come_from_their_entries(smoke_spec_path):
    from twinrun.app.environment import packages

    spec = load_spec(smoke_spec_path)
    gpu = [m for m, _, _ in packages.needed(spec, ["trl", "verl"], {}, gpu=True, ray=False)]
    assert gpu == ["vllm", "flash_attn", "ray", "alfworld"]
    ds = [m for m, _, _ in packages.needed(spec, ["trl"], {"ACCELERATE_USE_DEEPSPEED": "true"}, gpu=False, ray=True)]
    assert ds == ["deepspeed", "ray", "alfworld"]


@pytest.mark.parametrize("name", ["trl", "verl"])
def test_a_real_backends_pure_hooks_load_and_name_neutral_metrics(name):
    """compile, structural, check and the metric names load with base dependencies (plan needs no framework);
    the metric names are StepMetrics fields; the preset is core's."""
    from twinrun.core.records import StepMetrics

    e = registry.entry(name)
    for hook in ("compile", "structural", "check", "metrics"):
        if getattr(e, hook):
            assert registry.load(getattr(e, hook)) is not None, (name, hook)
    assert set(registry.load(e.metrics)) <= set(StepMetrics.model_fields)
    assert e.preset in PRESETS


@pytest.mark.slow  # imports TRL and verl's trainers (tens of seconds)
@pytest.mark.trl
@pytest.mark.verl
@pytest.mark.parametrize("name", ["trl", "verl"])
def test_every_hook_of_a_real_backend_loads(name):
    """Each target of the entry names a real attribute (the framework hooks import the framework)."""
    pytest.importorskip(name)
    e = registry.entry(name)
    for hook in ("train", "rollout", "export", "sft", "replay"):
        if getattr(e, hook):
            assert registry.load(getattr(e, hook)) is not None, (name, hook)
