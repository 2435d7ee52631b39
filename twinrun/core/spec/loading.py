"""Loading a spec: YAML, dotted `--set` overrides, and validation errors as one line each."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from twinrun.core.spec.base import SPEC_VERSION, SpecError
from twinrun.core.spec.experiment import ExperimentSpec
from twinrun.core.spec.origins import SpecOrigins, yaml_origins


def _all_field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append(path)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_all_field_paths(ann, path + "."))
    return out


def _closest(path: str) -> str | None:
    candidates = _all_field_paths(ExperimentSpec)
    parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
    siblings = [c for c in candidates if c.startswith(parent) and c.count(".") == path.count(".")]
    match = difflib.get_close_matches(path, siblings or candidates, n=1, cutoff=0.5)
    if not match:
        leaf = path.rsplit(".", 1)[-1]
        match = difflib.get_close_matches(leaf, [c.rsplit(".", 1)[-1] for c in candidates], n=1, cutoff=0.6)
        match = [m for m in candidates if m.endswith("." + match[0]) or m == match[0]][:1] if match else []
    return match[0] if match else None


_FULL_LINE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z0-9_]+)*: ")
_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_KINDS = {"model": "a section (mapping)", "dict": "a mapping", "float": "a number", "int": "an integer",
          "bool": "true or false", "string": "text", "list": "a list", "tuple": "a list"}


def _format_error(err: ValidationError) -> str:
    """The first validation error as one line: `field.path: value rule (fix: ...)`."""
    # an unknown key first: a typo of a required key (groups_per_stepp) is reported with its suggestion, not as
    # the required key missing
    e = min(err.errors(), key=lambda x: x["type"] != "extra_forbidden")
    loc = ".".join(str(p) for p in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        hint = _closest(loc)
        return f"{loc}: unknown key (fix: {f'did you mean {hint!r}?' if hint else 'remove it'})"
    if e["type"] == "missing":
        return f"{loc}: missing required field (fix: add it; see experiments/smoke-cpu.yaml)"
    if e["type"] == "value_error":
        # our validators write either a whole line (cross-field) or "<value> <rule> (fix: ...)"
        return msg if _FULL_LINE.match(msg) else f"{loc}: {msg}"
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        fix = f"one of {ctx['expected']}"
    elif any(k in ctx for k in _BOUNDS):
        fix = "use a value " + " and ".join(f"{_BOUNDS[k]} {v}" for k, v in ctx.items() if k in _BOUNDS)
    elif "pattern" in ctx:
        fix = f"match {ctx['pattern']}"
    elif e["type"] == "finite_number":
        fix = "a finite number"
    elif e["type"].endswith("_type") or e["type"].endswith("_parsing"):
        fix = _KINDS.get(e["type"].split("_")[0], "see experiments/smoke-cpu.yaml")
    else:
        fix = "see experiments/smoke-cpu.yaml"
    return f"{loc}: {e.get('input')!r} is invalid: {msg} (fix: {fix})"


def _coerce(raw: str) -> Any:
    """`--set a.b=value` values are YAML scalars (so 1e-6, true, null, [a,b] work)."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def apply_overrides(data: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply dotted `key.path=value` overrides to a raw spec dict (before validation)."""
    if sets and not isinstance(data, dict):
        raise SpecError(f"spec: top level is {type(data).__name__}, not a mapping (fix: a YAML mapping of sections)")
    for item in sets:
        if "=" not in item:
            raise SpecError(f"--set: {item!r} is not key=value (fix: e.g. --set optimizer.lr=1e-6)")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise SpecError(f"--set: {'.'.join(parts[: i + 1])} is not a section (fix: set a leaf field)")
            node = nxt
        node[parts[-1]] = _coerce(raw)
    return data


def spec_from_dict(data: dict[str, Any], source_dir: Path | None = None,
                   origins: SpecOrigins | None = None) -> ExperimentSpec:
    if not isinstance(data, dict):
        raise SpecError(f"spec: top level is {type(data).__name__}, not a mapping (fix: a YAML mapping of sections)")
    if "version" in data and data["version"] != SPEC_VERSION:
        raise SpecError(
            f"version: {data['version']!r} is not supported by this twinrun (fix: version: {SPEC_VERSION})"
        )
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_error(err)) from None
    spec._source_dir = str(source_dir or Path.cwd())
    if origins is not None:
        spec._origins = origins
    return spec


def load_spec(path: str | Path, sets: list[str] | None = None) -> ExperimentSpec:
    """Load a YAML spec, apply `--set` overrides, validate. Raises SpecError with a one-line message."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"spec: {str(p)!r} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}; fix: "
                        "save it as UTF-8)") from None
    except IsADirectoryError:
        raise SpecError(f"spec: {str(p)!r} is a folder (fix: pass the spec's YAML file)") from None
    except OSError as e:
        raise SpecError(f"spec: {str(p)!r} cannot be read ({e.strerror}; fix: pass an existing YAML file)") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SpecError(f"spec: {str(p)!r}{where} is not valid YAML (fix: {getattr(e, 'problem', e)})") from None
    data = apply_overrides(data, sets or [])
    return spec_from_dict(data, p.resolve().parent, yaml_origins(text, sets or []))
