"""Typer options built from a settings model's fields, so an option's default and help are written once: on the
field. A command lists which fields it exposes; ``check_defaults`` (run by tests/test_cli_options.py) says where
a command's options and its models disagree.

    EVAL = FieldOptions(AgentEvalSettings, flags={"skill_top_k": "--top-k"}, omit={"top_p": "why not exposed"})
    def eval_agent(passes: int = EVAL("passes"), top_k: int = EVAL("skill_top_k"), ...): ...

Two kinds of model:
- ``FieldOptions(Model)``: the option's default is the field's default and its help the field's description
  (pydantic ``Field(description=...)``, or a dataclass ``field(metadata={"help": ...})``). A bool field is a
  ``--name/--no-name`` switch. A list field whose default is None is an empty repeatable option on the CLI
  (the command maps ``[]`` back to None).
- ``SpecOptions("sweep")``: a field of the experiment spec's section. The option's default is None (the spec
  file's value holds unless the option is given), a bool field a one-way ``--name`` flag, and its help is the
  field's description ending "(default: the spec's sweep.streams, 1)", the default read from the spec model.

Overrides, each named where it is used: ``flags`` (a CLI name other than the field's: a short or singular name
the CLI already had), ``more`` (a remark about other options, appended to the help), ``to_cli`` (the CLI shows
the value in other units than the model, e.g. percentage points for a fraction). The option's value type is the
command's own annotation, as typer reads it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Any

import typer


@dataclasses.dataclass(frozen=True)
class Bound:
    """One option built from a field: its flag, and how the CLI shows the field's value (None: as it is)."""

    flag: str
    to_cli: Callable[[Any], Any] | None = None


def _fields(model: type) -> dict[str, tuple[Any, str, Any]]:
    """field name -> (default, help, annotation) of a pydantic model or a dataclass."""
    if hasattr(model, "model_fields"):
        return {name: (info.get_default(call_default_factory=True), info.description or "", info.annotation)
                for name, info in model.model_fields.items()}
    hints = typing.get_type_hints(model)
    out = {}
    for f in dataclasses.fields(model):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        out[f.name] = (default, f.metadata.get("help", ""), hints[f.name])
    return out


def _is_list(annotation: Any) -> bool:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) in (list, tuple) or any(typing.get_origin(a) in (list, tuple) for a in args)


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or set(typing.get_args(annotation)) == {bool, type(None)}


def shown(value: Any) -> str:
    """A default as the spec file writes it: null, true/false, a list's items joined."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


class FieldOptions:
    """Options from the fields of one settings model (see the module docstring)."""

    spec = False

    def __init__(self, model: type, *, flags: Mapping[str, str] | None = None,
                 omit: Mapping[str, str] | None = None) -> None:
        self.model, self.fields = model, _fields(model)
        self.flags, self.omit = dict(flags or {}), dict(omit or {})
        unknown = sorted((set(self.flags) | set(self.omit)) - set(self.fields))
        if unknown:
            raise ValueError(f"{model.__name__}: no field {unknown[0]!r} (fix: one of {sorted(self.fields)})")
        self.bound: dict[str, Bound] = {}  # field -> its option (check_defaults reads them)

    def flag_of(self, field: str) -> str:
        """The CLI flag of a field (for error messages naming what the user typed)."""
        return self.flags.get(field, "--" + field.replace("_", "-"))

    def __call__(self, field: str, *, more: str = "", to_cli: Callable[[Any], Any] | None = None,
                 **typer_kw: Any) -> Any:
        if field not in self.fields:
            raise ValueError(f"{self.model.__name__}: no field {field!r} (fix: one of {sorted(self.fields)})")
        default, help_, annotation = self.fields[field]
        flag = self.flag_of(field)
        cli_default, decl = self._option(default, annotation, flag)
        if to_cli is not None:
            cli_default = to_cli(cli_default)
        self.bound[field] = Bound(flag, to_cli)
        help_ = " ".join(x for x in (help_, more, self._shown_default(field, default)) if x)
        return typer.Option(cli_default, decl, help=help_, **typer_kw)

    def _option(self, default: Any, annotation: Any, flag: str) -> tuple[Any, str]:
        """(the CLI default, the flag declaration)."""
        if _is_bool(annotation):
            return default, f"{flag}/--no-{flag[2:]}"
        return _cli_value(default, annotation), flag

    def _shown_default(self, field: str, default: Any) -> str:
        return ""  # typer shows a value option's default itself


class SpecOptions(FieldOptions):
    """Options that override a field of one spec section (``sweep``, ``environment``); see the module docstring."""

    spec = True

    def __init__(self, section: str, *, flags: Mapping[str, str] | None = None,
                 omit: Mapping[str, str] | None = None) -> None:
        from twinrun.core.spec import ExperimentSpec

        self.section = section
        super().__init__(ExperimentSpec.model_fields[section].annotation, flags=flags, omit=omit)

    def _option(self, default: Any, annotation: Any, flag: str) -> tuple[Any, str]:
        return (False if _is_bool(annotation) else None), flag

    def _shown_default(self, field: str, default: Any) -> str:
        return f"(default: the spec's {self.section}.{field}, {shown(default)})"


def check_defaults(command: Any, sources: list[FieldOptions]) -> list[str]:
    """Where a click command and its settings models disagree, one line each: a model field with no option that
    is not listed as omitted; a bound flag the command lacks; an option whose default is not the field's (a
    default written a second time, by hand); a spec option whose help does not show the spec's default."""
    params = {o: p for p in command.params for o in getattr(p, "opts", ())}
    problems = []
    for src in sources:
        name = src.model.__name__
        for field in sorted(set(src.fields) - set(src.bound) - set(src.omit)):
            problems.append(f"{name}.{field}: no option and not in omit (fix: a {name} option, or omit it with why)")
        for field, b in src.bound.items():
            p = params.get(b.flag)
            if p is None:
                problems.append(f"{name}.{field}: {b.flag} is not an option of {command.name}")
                continue
            default = src.fields[field][0]
            if src.spec:
                want = False if _is_bool(src.fields[field][2]) else None
                if p.default != want:
                    problems.append(f"{b.flag}: default {p.default!r}, a spec option's is {want!r} (the spec's holds)")
                if src._shown_default(field, default) not in (p.help or ""):
                    problems.append(f"{b.flag}: help does not end {src._shown_default(field, default)!r}")
                continue
            want = _cli_value(default, src.fields[field][2])
            want = b.to_cli(want) if b.to_cli else want
            if _cli_value(p.default, None) != want:
                problems.append(f"{b.flag}: default {p.default!r} but {name}.{field} is {default!r} (fix: take it "
                                f"from the field)")
    return problems


def _cli_value(value: Any, annotation: Any) -> Any:
    if value is None and annotation is not None and _is_list(annotation):
        return []
    return list(value) if isinstance(value, tuple) else value
