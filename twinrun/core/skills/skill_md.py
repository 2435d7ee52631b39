"""The SKILL.md record: a markdown file with YAML frontmatter (``name``, ``description``, optional keys) and a
markdown body; the format of Anthropic / agentskills.io SKILL.md. :func:`parse_skill_md` and
:meth:`Skill.to_markdown` round-trip losslessly at the record level: ``parse(write(parse(x))) == parse(x)``.

The checks here (names, descriptions, resource paths) are what keep a curator's writes inside its repo folder;
:mod:`twinrun.core.skills.repository` holds the repo and the curator's three operations on it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from twinrun.core.errors import TwinrunError

SKILL_FILE = "SKILL.md"
MANIFEST_FILE = "skills.json"
MANIFEST_VERSION = 1
RESOURCE_DIRS = ("references", "scripts", "assets")
NAME_MAX = 64
MAX_FLOW_DEPTH = 32  # [ / { nesting allowed in frontmatter
DESCRIPTION_MAX = 1024
# lowercase letters, digits, hyphens; never starts with a hyphen. Also what makes a name safe as a folder name:
# no dots (so no '..'), no separators, no NUL, not absolute.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
# frontmatter metadata keys twinrun owns; everything else in the file is preserved as written
OWN_METADATA_KEYS = ("provenance", "source", "taxonomy", "mutable")

SkillProvenance = Literal["curated", "human"]


class SkillError(TwinrunError, ValueError):
    """A skill or skill folder that cannot be used (one line: where, what, fix)."""


class SkillFormatError(SkillError):
    """SKILL.md text that does not parse; ``line`` is the 1-based line in the file (None: whole file)."""

    def __init__(self, message: str, line: int | None = None, source: str | None = None):
        self.line = line
        self.source = source
        self.problem = message
        where = source or "SKILL.md"
        if line is not None:
            where += f" line {line}"
        super().__init__(f"{where}: {message}")


class SkillPathError(SkillError):
    """A write that would leave the repo folder (path escape, symlink in the target)."""


# ------------------------------------------------------------------------------------------------------------
# The record


@dataclass(frozen=True)
class SkillMetadata:
    """Where a skill came from. Written under the frontmatter's ``metadata`` map (agentskills.io convention)."""

    provenance: SkillProvenance = "curated"
    source: str | None = None  # e.g. the human skill's folder relative to the imported root
    taxonomy: str | None = None  # e.g. SkillGym "<major>/<minor>"
    extra: dict[str, Any] = field(default_factory=dict)  # other metadata keys, kept as written


@dataclass(frozen=True)
class Skill:
    """One skill. ``mutable`` defaults to False for human skills and True otherwise.

    ``resources`` are relative POSIX paths under ``references/``, ``scripts/`` or ``assets/`` of the skill's
    folder; they live in ``origin`` (the folder the skill was read from), not in the SKILL.md text.
    ``extra`` holds frontmatter keys other than name/description/metadata, in file order.
    """

    name: str
    description: str
    body: str = ""
    metadata: SkillMetadata = field(default_factory=SkillMetadata)
    mutable: bool | None = None
    resources: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    origin: Path | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mutable is None:
            object.__setattr__(self, "mutable", self.metadata.provenance != "human")
        problem = name_problem(self.name)
        if problem:
            raise SkillError(f"skill name: {problem}")
        problem = description_problem(self.description)
        if problem:
            raise SkillError(f"skill {self.name} description: {problem}")
        for what, text in (("body", self.body), ("description", self.description)):
            bad = _unsavable_char(text)
            if bad:
                raise SkillError(f"skill {self.name} {what}: contains {bad} (fix: remove it)")
        for rel in self.resources:
            problem = resource_path_problem(rel)
            if problem:
                raise SkillError(f"skill {self.name} resource {rel!r}: {problem}")

    @property
    def provenance(self) -> SkillProvenance:
        return self.metadata.provenance

    def frontmatter(self, *, with_own_metadata: bool = True) -> dict[str, Any]:
        """The frontmatter mapping in write order: name, description, extra keys, metadata."""
        fm: dict[str, Any] = {"name": self.name, "description": self.description}
        fm.update(self.extra)
        meta: dict[str, Any] = {}
        if with_own_metadata:
            if self.metadata.provenance != "curated":
                meta["provenance"] = self.metadata.provenance
            if self.metadata.source is not None:
                meta["source"] = self.metadata.source
            if self.metadata.taxonomy is not None:
                meta["taxonomy"] = self.metadata.taxonomy
            if self.mutable != (self.metadata.provenance != "human"):
                meta["mutable"] = self.mutable
        meta.update(self.metadata.extra)
        if meta:
            fm["metadata"] = meta
        return fm

    def to_markdown(self) -> str:
        """The SKILL.md text (canonical form)."""
        return _write(self.frontmatter(), self.body)

    def prompt_text(self) -> str:
        """What a model sees: the SKILL.md without twinrun's own bookkeeping (provenance, source, ...)."""
        return _write(self.frontmatter(with_own_metadata=False), self.body)

    def content_hash(self) -> str:
        return hashlib.sha256(self.to_markdown().encode("utf-8")).hexdigest()


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid skill name (None when it is)."""
    if not isinstance(name, str):
        return f"{name!r} is a {type(name).__name__}, not a string (fix: a lowercase-hyphen name)"
    if not name:
        return "'' is empty (fix: a lowercase-hyphen name such as 'heat-then-place')"
    if len(name) > NAME_MAX:
        return f"{name[:20]!r}... has {len(name)} characters, more than {NAME_MAX} (fix: shorten it)"
    if not NAME_RE.fullmatch(name):
        return (
            f"{name!r} is not lowercase letters, digits and hyphens starting with a letter or digit "
            "(fix: e.g. 'heat-then-place'; no '/', '.', spaces or capitals)"
        )
    return None


def description_problem(description: object) -> str | None:
    if not isinstance(description, str):
        return f"{description!r} is a {type(description).__name__}, not a string (fix: say when to use the skill)"
    if not description.strip():
        return "is empty (fix: one sentence saying when to use the skill)"
    if len(description) > DESCRIPTION_MAX:
        return f"has {len(description)} characters, more than {DESCRIPTION_MAX} (fix: shorten it)"
    return None


def _unsavable_char(text: str) -> str | None:
    # NUL breaks tools that read the file as C strings; a lone surrogate cannot be encoded as UTF-8 at all
    if "\x00" in text:
        return "a NUL character"
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return "a lone surrogate (not encodable as UTF-8)"
    return None


def resource_path_problem(rel: object) -> str | None:
    """Why `rel` is not a safe resource path: relative, POSIX, under references/ scripts/ or assets/."""
    if not isinstance(rel, str) or not rel:
        return "is not a non-empty string"
    if "\x00" in rel or "\\" in rel:
        return "contains NUL or a backslash (fix: a relative POSIX path)"
    p = PurePosixPath(rel)
    if p.is_absolute():
        return "is absolute (fix: a path relative to the skill folder)"
    if any(part in ("..", ".", "") for part in rel.split("/")):
        return "has an empty, '.' or '..' component (fix: a plain relative path)"
    if p.parts[0] not in RESOURCE_DIRS or len(p.parts) < 2:
        return f"is not under {', '.join(d + '/' for d in RESOURCE_DIRS)}"
    return None


# ------------------------------------------------------------------------------------------------------------
# SKILL.md parse / write

_NULL_TAG = "tag:yaml.org,2002:null"


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # the parser refuses aliases, so a value used twice is written out twice


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # PyYAML writes NEL (U+0085) raw inside single quotes with allow_unicode, and reads it back folded to a
    # space; double quotes escape it ("\N"), which round-trips.
    if "\x85" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style='"')
    return dumper.represent_str(data)


_Dumper.add_representer(str, _represent_str)


def _write(frontmatter: Mapping[str, Any], body: str) -> str:
    fm = yaml.dump(
        dict(frontmatter),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=2**31 - 1,  # never fold long lines: keeps a description on one line
    )
    # One blank line separates frontmatter and body; the parser strips exactly one leading newline.
    return f"---\n{fm}---\n" + (f"\n{body}" if body else "")


def _split(text: str, source: str | None) -> tuple[str, str]:
    """(frontmatter text, body) of a SKILL.md; errors name the line."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        raise SkillFormatError(
            "does not start with a '---' frontmatter line (fix: begin with ---, then name: and description:, then ---)",
            line=1,
            source=source,
        )
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r") == "---":
            fm = "\n".join(lines[1:i])
            rest = "\n".join(lines[i + 1 :])
            if rest.startswith("\n"):
                rest = rest[1:]
            elif rest.startswith("\r\n"):
                rest = rest[2:]
            return fm, rest
    raise SkillFormatError(
        "frontmatter opened here is never closed (fix: add a '---' line after the frontmatter)", line=1, source=source
    )


def _bracket_depth(text: str) -> int:
    """Deepest nesting of [ and { (quotes ignored: it can only overcount, and only for absurd values)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _first_alias_line(fm_text: str) -> int | None:
    """0-based frontmatter line of the first YAML alias (``*name``, also what a merge key uses)."""
    for event in yaml.parse(fm_text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            return event.start_mark.line
    return None


def _scalar_text(node: yaml.Node) -> str | None:
    """A scalar's text as written (so `name: 123` or `description: yes` stay strings); None for null."""
    if node.tag == _NULL_TAG and node.style is None:
        return None
    return node.value


def parse_skill_md(text: str, *, source: str | None = None) -> Skill:
    """Parse SKILL.md text into a :class:`Skill` (resources empty: they are files, not text).

    Raises SkillFormatError with the file line of the first problem.
    """
    if not isinstance(text, str):
        raise SkillFormatError(f"content is a {type(text).__name__}, not text (fix: pass the SKILL.md text)", source=source)
    fm_text, body = _split(text, source)
    first = 2  # frontmatter line 1 is file line 2

    depth = _bracket_depth(fm_text)
    if depth > MAX_FLOW_DEPTH:
        # PyYAML's scanner is O(length x flow depth): a 20k-character '[[[[...' takes tens of seconds
        raise SkillFormatError(
            f"frontmatter is nested too deeply ({depth} open brackets, at most {MAX_FLOW_DEPTH}; fix: flat key: value lines)",
            first,
            source,
        )
    try:
        alias_line = _first_alias_line(fm_text)
        if alias_line is not None:
            # aliases let a few bytes expand into an exponentially large structure (billion laughs)
            raise SkillFormatError(
                "frontmatter uses a YAML alias (*name) (fix: write the value out)", first + alias_line, source
            )
        node = yaml.compose(fm_text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(fm_text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = first + mark.line if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SkillFormatError(f"frontmatter is not valid YAML ({problem}; fix: quote the value)", line, source) from None
    except RecursionError:
        raise SkillFormatError("frontmatter is nested too deeply (fix: flat key: value lines)", first, source) from None
    if not isinstance(node, yaml.MappingNode) or not isinstance(data, dict):
        raise SkillFormatError(
            "frontmatter is not a mapping of keys (fix: lines like 'name: my-skill' and 'description: ...')",
            first,
            source,
        )

    key_nodes: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            raise SkillFormatError("frontmatter key is not a plain string", first + k.start_mark.line, source)
        if k.value in key_nodes:
            raise SkillFormatError(f"frontmatter key {k.value!r} appears twice (fix: keep one)", first + k.start_mark.line, source)
        key_nodes[k.value] = (k, v)
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise SkillFormatError(f"frontmatter key {bad_keys[0]!r} is not a string (fix: quote it)", first, source)

    def field_str(key: str, required: bool) -> str | None:
        if key not in key_nodes:
            if required:
                raise SkillFormatError(f"frontmatter has no '{key}:' (fix: add it)", first, source)
            return None
        knode, vnode = key_nodes[key]
        line = first + knode.start_mark.line
        if not isinstance(vnode, yaml.ScalarNode):
            raise SkillFormatError(f"'{key}:' is not a single text value (fix: one line of text)", line, source)
        return _scalar_text(vnode)

    name = field_str("name", True)
    name_line = first + key_nodes["name"][0].start_mark.line
    problem = name_problem(name if name is not None else "")
    if problem:
        raise SkillFormatError(f"name: {problem}", name_line, source)
    description = field_str("description", True)
    desc_line = first + key_nodes["description"][0].start_mark.line
    problem = description_problem(description if description is not None else "")
    if problem:
        raise SkillFormatError(f"description: {problem}", desc_line, source)

    metadata = SkillMetadata()
    mutable: bool | None = None
    if "metadata" in key_nodes:
        knode, vnode = key_nodes["metadata"]
        mline = first + knode.start_mark.line
        raw = data["metadata"]
        if raw is None:
            raw = {}
        if not isinstance(raw, dict) or not isinstance(vnode, (yaml.MappingNode, yaml.ScalarNode)):
            raise SkillFormatError("metadata: is not a mapping (fix: indented 'key: value' lines)", mline, source)
        sub = {k.value: v for k, v in vnode.value} if isinstance(vnode, yaml.MappingNode) else {}
        if any(not isinstance(k, str) for k in raw):
            raise SkillFormatError("metadata: has a key that is not a string (fix: quote it)", mline, source)
        extra_meta = {k: v for k, v in raw.items() if k not in OWN_METADATA_KEYS}

        def meta_str(key: str) -> str | None:
            if key not in raw:
                return None
            if not isinstance(sub.get(key), yaml.ScalarNode):
                raise SkillFormatError(f"metadata.{key}: is not a single text value", mline, source)
            return _scalar_text(sub[key])

        provenance = meta_str("provenance") or "curated"
        if provenance not in ("curated", "human"):
            raise SkillFormatError(
                f"metadata.provenance: {provenance!r} is not curated or human (fix: one of them)", mline, source
            )
        if "mutable" in raw:
            if not isinstance(raw["mutable"], bool):
                raise SkillFormatError(f"metadata.mutable: {raw['mutable']!r} is not true/false", mline, source)
            mutable = raw["mutable"]
        metadata = SkillMetadata(
            provenance=provenance,  # type: ignore[arg-type]
            source=meta_str("source"),
            taxonomy=meta_str("taxonomy"),
            extra=extra_meta,
        )
    extra = {k: v for k, v in data.items() if k not in ("name", "description", "metadata")}
    try:
        return Skill(name=name, description=description, body=body, metadata=metadata, mutable=mutable, extra=extra)  # type: ignore[arg-type]
    except SkillError as e:
        raise SkillFormatError(str(e), None, source) from None


def write_skill_md(skill: Skill) -> str:
    return skill.to_markdown()


def render_for_prompt(skills: Iterable[Skill]) -> str:
    """Retrieved skills as one prompt section (their SKILL.md text, blank-line separated); '(none)' if empty."""
    texts = [s.prompt_text() for s in skills]
    return "\n\n".join(texts) if texts else "(none)"
