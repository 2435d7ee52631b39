"""The CLI's options are built from the settings models (twinrun/commands/_options.py): each default and help is
written once, on the field. These tests go red when a default is written a second time by hand and differs, when a
field is neither an option nor listed as left out, and when a spec option's help does not show the spec's default."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from twinrun.commands._options import FieldOptions, SpecOptions, check_defaults


def _command(name: str):
    from twinrun.cli import app

    return typer.main.get_command(app).commands[name]


def _sources(name: str) -> list[FieldOptions]:
    from twinrun.commands import compare, eval_agent, sweep

    return {"eval-agent": [eval_agent.EVAL], "sweep": [sweep.SWEEP, sweep.ENV], "compare": [compare.COMPARE]}[name]


@pytest.mark.parametrize("name", ["eval-agent", "sweep", "compare"])
def test_every_option_default_is_its_fields(name: str) -> None:
    cmd, sources = _command(name), _sources(name)
    assert check_defaults(cmd, sources) == []
    assert sum(len(s.bound) for s in sources) >= 7  # the wiring is there: the check looked at options, not none


def test_eval_agent_options_are_agent_eval_settings() -> None:
    """Default and help of each protocol option, as `twinrun eval-agent --help` prints them, are the field's."""
    from twinrun.core.sft.agent_eval import AgentEvalSettings

    cmd = _command("eval-agent")
    params = {o: p for p in cmd.params for o in p.opts}
    model = AgentEvalSettings()
    for field, info in AgentEvalSettings.model_fields.items():
        if field == "top_p":  # not a CLI option (omitted, with why)
            continue
        p = params[_sources("eval-agent")[0].flag_of(field)]
        assert p.help.startswith(info.description), field
        want = getattr(model, field)
        assert p.default == ([] if want is None else want), field
    from twinrun.cli import app

    res = CliRunner().invoke(app, ["eval-agent", "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for shown in ("[default: 4]", "[default: 200]", "[default: 0.4]", "[default: 10000]", "[default: open/close OBJ]"):
        assert shown in res.output, shown


def test_compare_options_are_compare_settings() -> None:
    """Every CompareSettings field is an option of `twinrun compare` whose default is the field's (--delta in
    percentage points) and whose help starts with the field's; the defaults `--help` prints are the model's."""
    from twinrun.core.compare.model import CompareSettings

    cmd = _command("compare")
    params = {o: p for p in cmd.params for o in p.opts}
    model = CompareSettings()
    for f in dataclasses.fields(CompareSettings):
        p = params[_sources("compare")[0].flag_of(f.name)]
        assert f.metadata["help"] and p.help.startswith(f.metadata["help"]), f.name
        want = getattr(model, f.name)
        want = want * 100 if f.name == "delta" else list(want) if isinstance(want, tuple) else want
        assert p.default == want, f.name
    assert params["--max-streams"].min == 2  # typer's own keywords pass through
    from twinrun.cli import app

    res = CliRunner().invoke(app, ["compare", "--help"], terminal_width=200, env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for shown in ("[default: 0.05]", "[default: 5.0]", "[default: 10000]", "[default: 64]", "[default: auto]"):
        assert shown in res.output, shown


def test_importing_compares_settings_loads_no_statistics() -> None:
    """The CLI imports CompareSettings at start-up to build compare's options: that import pulls no scipy (the
    statistics modules load when compare runs), so `twinrun --help` does not slow down."""
    code = ("import sys; import twinrun.commands.compare, twinrun.core.compare as c; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy' or m.startswith('twinrun.core.compare')));"
            " c.compare_games; print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded, later = out.stdout.strip().splitlines()
    assert loaded == "['twinrun.core.compare', 'twinrun.core.compare.model']"
    assert later == "True"  # the lazy name loads its module (the check above is not vacuous)


def test_sweep_spec_options_show_the_specs_defaults() -> None:
    from twinrun.core.spec import SweepSpec

    params = {o: p for p in _command("sweep").params for o in p.opts}
    for flag, field in (("--streams", "streams"), ("--max-streams", "max_streams"),
                        ("--streams-per-look", "streams_per_look"), ("--until-decided", "until_decided")):
        default = SweepSpec.model_fields[field].default
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        assert params[flag].help.endswith(f"(default: the spec's sweep.{field}, {shown})"), flag
        assert params[flag].default in (None, False), flag  # the spec's value holds unless the option is given
    assert "environment.eval_split, valid_seen" in params["--split"].help


def test_sweep_own_knobs_are_sweep_functions_defaults() -> None:
    """--ray-retries, --device and --progress are sweep()'s keyword defaults (the CLI does not import sweep() at
    start-up, so they are written in both places and held equal here)."""
    from twinrun.core.sweeps.sweep import sweep

    params = {p.name: p for p in _command("sweep").params}
    sig = inspect.signature(sweep).parameters
    for cli, kw in (("ray_retries", "ray_retries"), ("device", "device"), ("progress", "progress")):
        assert params[cli].default == sig[kw].default, cli


@dataclasses.dataclass(frozen=True)
class Toy:
    alpha: float = dataclasses.field(default=0.05, metadata={"help": "test level"})
    delta: float = dataclasses.field(default=0.05, metadata={"help": "margin (fraction)"})
    names: tuple[str, ...] = dataclasses.field(default=(), metadata={"help": "names"})
    on: bool = dataclasses.field(default=True, metadata={"help": "switch"})


def _toy_app(opts: FieldOptions, alpha_option: object) -> object:
    app = typer.Typer()

    @app.command()
    def toy(alpha: float = alpha_option, delta: float = opts("delta", to_cli=lambda d: d * 100),  # type: ignore[assignment]
            names: list[str] = opts("names"), on: bool = opts("on")) -> None:
        pass

    @app.command()
    def other() -> None:
        pass

    return typer.main.get_command(app).commands["toy"]


def test_a_dataclass_model_gives_default_help_and_switch() -> None:
    opts = FieldOptions(Toy)
    cmd = _toy_app(opts, opts("alpha"))
    params = {p.name: p for p in cmd.params}
    assert (params["alpha"].default, params["alpha"].help) == (0.05, "test level")
    assert params["delta"].default == pytest.approx(5.0)  # to_cli: the CLI's units
    assert params["names"].default in ([], ())
    assert params["on"].opts == ["--on"] and params["on"].secondary_opts == ["--no-on"]
    assert check_defaults(cmd, [opts]) == []


def test_a_default_written_twice_that_differs_is_caught() -> None:
    opts = FieldOptions(Toy)
    opts("alpha")  # bound to the field, but the command writes its own default below
    cmd = _toy_app(opts, typer.Option(0.1, "--alpha", help="test level"))
    assert check_defaults(cmd, [opts]) == ["--alpha: default 0.1 but Toy.alpha is 0.05 (fix: take it from the field)"]


def test_a_field_left_out_without_saying_why_is_caught() -> None:
    opts = FieldOptions(Toy)
    cmd = _toy_app(opts, typer.Option(0.05, "--alpha"))  # a hand-written option: the field is not bound
    assert check_defaults(cmd, [opts]) == ["Toy.alpha: no option and not in omit (fix: a Toy option, or omit it "
                                           "with why)"]
    said = FieldOptions(Toy, omit={"alpha": "the command's own"})
    assert check_defaults(_toy_app(said, typer.Option(0.05, "--alpha")), [said]) == []


def test_a_spec_option_with_its_own_default_is_caught() -> None:
    opts = SpecOptions("sweep", omit={f: "x" for f in ("curator_dtype", "batch_streams", "arms_per_gpu",
                                                       "curator_server", "curator_endpoints", "curator_server_command",
                                                       "curator_server_timeout_s", "until_decided", "max_streams",
                                                       "streams_per_look")})
    opts("streams")
    app = typer.Typer()

    @app.command()
    def s(streams: int = typer.Option(3, "--streams", help="streams (default: the spec's sweep.streams, 3)")) -> None:
        pass

    @app.command()
    def other() -> None:
        pass

    problems = check_defaults(typer.main.get_command(app).commands["s"], [opts])
    assert problems == ["--streams: default 3, a spec option's is None (the spec's holds)",
                        "--streams: help does not end \"(default: the spec's sweep.streams, 1)\""]


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match="no field 'alhpa'"):
        FieldOptions(Toy, flags={"alhpa": "--a"})
    with pytest.raises(ValueError, match="no field 'bogus'"):
        FieldOptions(Toy)("bogus")
