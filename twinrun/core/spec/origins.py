"""Where each spec value came from: a line of the spec file (with the comment that cites its source), a `--set`
override, or the field's default. `twinrun plan` shows it next to every value, so a reader can tell a stated
value from an inherited one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import yaml


@dataclass(frozen=True)
class FieldOrigin:
    source: str  # "spec line N" | "--set" | "default"
    note: str = ""  # the YAML comment on (or directly above) the line, if any


@dataclass
class SpecOrigins:
    """Dotted field path -> (1-based line, comment) for every key written in the spec file; paths --set."""

    lines: dict[str, tuple[int, str]] = field(default_factory=dict)
    sets: tuple[str, ...] = ()

    def of(self, path: str) -> FieldOrigin:
        if any(s == path or s.startswith(path + ".") or path.startswith(s + ".") for s in self.sets):
            return FieldOrigin("--set")
        if path in self.lines:
            line, note = self.lines[path]
            parent = path
            while not note and "." in parent:  # a key inside a one-line flow mapping: the line's comment
                parent = parent.rsplit(".", 1)[0]
                if self.lines.get(parent, (0, ""))[0] == line:
                    note = self.lines[parent][1]
            return FieldOrigin(f"spec line {line}", note)
        inside = [p for p in self.lines if p.startswith(path + ".")]  # a mapping field written key by key
        if inside:
            return FieldOrigin(f"spec line {min(self.lines[p][0] for p in inside)}")
        return FieldOrigin("default")


def _comment_after(text: str) -> str:
    """The comment in the rest of a line after a key or value (leading ':' of a block key skipped)."""
    rest = text.lstrip().removeprefix(":").lstrip()
    return rest[1:].strip() if rest.startswith("#") else ""


def _comment_above(lines: list[str], line: int, column: int) -> list[str]:
    """Full-line comments directly above `line` at the key's own indentation (a citation block)."""
    out: list[str] = []
    i = line - 1
    while i >= 0:
        raw = lines[i]
        stripped = raw.lstrip()
        if not stripped.startswith("#") or len(raw) - len(stripped) != column:
            break
        out.append(stripped[1:].strip())
        i -= 1
    return list(reversed(out))


def yaml_origins(text: str, sets: Iterable[str] = ()) -> SpecOrigins:
    """Origins of a spec's YAML text. Unparsable text yields no lines (loading reports the YAML error)."""
    origins = SpecOrigins(sets=tuple(s.split("=", 1)[0].strip() for s in sets))
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return origins
    lines = text.splitlines()

    def walk(node: yaml.Node, prefix: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            return
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            path = prefix + str(key.value)
            block = isinstance(value, yaml.CollectionNode) and not value.flow_style
            end = key.end_mark if block else value.end_mark
            trailing = _comment_after(lines[end.line][end.column:]) if end.line < len(lines) else ""
            above = _comment_above(lines, key.start_mark.line, key.start_mark.column)
            note = " ".join(p for p in (*above, trailing) if p)
            origins.lines[path] = (key.start_mark.line + 1, note)
            walk(value, path + ".")

    if root is not None:
        walk(root, "")
    return origins
