"""Skill memory: the curator's three operations and the repo they act on (the SKILL.md record itself is
:mod:`twinrun.core.skills.skill_md`, re-exported here).

:class:`SkillRepo` is what one curation rollout owns. The curator acts on it only through the paper's three
functions (:data:`CURATOR_FUNCTIONS`); each returns an :class:`OpResult` and is atomic: every check runs before
anything changes, so an invalid operation leaves the repo byte-identical. A curator controls names and content,
so names are restricted to ``[a-z0-9-]`` (nothing it writes can name a path outside the repo folder), content
size is bounded, and :meth:`SkillRepo.save` refuses symlinks in its target.

Human-written skills (:func:`import_human_skills`) sit in the same repo as immutable ``human`` skills.

The functions' schemas and :class:`OpResult` are :mod:`twinrun.core.skills.functions`; reading and writing skill
folders is :mod:`twinrun.core.skills.folders`. Both are re-exported here, so every old name still imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twinrun.core.records import atomic_write_text
from twinrun.core.skills.retrieval import DEFAULT_FIELDS, BM25Index, skill_document
from twinrun.core.skills.skill_md import (  # noqa: F401 (re-exported: callers import the record from here too)
    DESCRIPTION_MAX,
    MANIFEST_FILE,
    MANIFEST_VERSION,
    MAX_FLOW_DEPTH,
    NAME_MAX,
    NAME_RE,
    OWN_METADATA_KEYS,
    RESOURCE_DIRS,
    SKILL_FILE,
    Skill,
    SkillError,
    SkillFormatError,
    SkillMetadata,
    SkillPathError,
    SkillProvenance,
    description_problem,
    name_problem,
    parse_skill_md,
    render_for_prompt,
    resource_path_problem,
    write_skill_md,
)
from twinrun.core.skills.folders import (  # noqa: F401 (re-exported)
    _copy_resource,
    _list_resources,
    _read_manifest,
    _refuse_symlink,
    _resource_source,
    _safe_child,
    import_human_skills,
    read_skill_folder,
)
from twinrun.core.skills.functions import _SCHEMAS, CURATOR_FUNCTIONS, OpResult  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from twinrun.core.spec import ExperimentSpec, RetrievalSpec, SkillsSpec

# ------------------------------------------------------------------------------------------------------------
# The repo


class SkillRepo:
    """Skills in memory, in insertion order, with BM25 retrieval kept current after every operation.

    Limits: ``max_content_chars`` bounds one SKILL.md a curator writes; ``max_skills`` bounds the number of
    curated skills (human skills do not count: they are not the curator's to grow).
    """

    def __init__(
        self,
        skills: Iterable[Skill] = (),
        *,
        max_content_chars: int = 20000,
        max_skills: int = 200,
        retrieval_fields: Iterable[str] = DEFAULT_FIELDS,
        top_k: int = 5,
        bm25: Mapping[str, Any] | None = None,
    ):
        if max_content_chars < 1 or max_skills < 1 or top_k < 0:
            raise SkillError(
                f"SkillRepo: max_content_chars={max_content_chars}, max_skills={max_skills}, top_k={top_k} "
                "(fix: positive limits, top_k >= 0)"
            )
        self.max_content_chars = max_content_chars
        self.max_skills = max_skills
        self.top_k = top_k
        self.retrieval_fields = tuple(retrieval_fields)
        self._skills: dict[str, Skill] = {}
        # bm25: {k1, b, variant} (retrieval.bm25 of the spec); None = bm25s's defaults
        opts = dict(bm25 or {})
        self._index = BM25Index(k1=opts.get("k1", 1.5), b=opts.get("b", 0.75), method=opts.get("variant", "lucene"))
        for s in skills:
            self.add(s)

    @classmethod
    def from_spec(
        cls, skills: SkillsSpec, retrieval: RetrievalSpec, *, base_dir: str | Path | None = None
    ) -> SkillRepo:
        """An empty repo with the spec's limits, plus the spec's human skills (a path relative to base_dir)."""
        repo = cls(
            max_content_chars=skills.max_content_chars,
            max_skills=skills.max_skills,
            retrieval_fields=retrieval.fields,
            top_k=retrieval.top_k,
            bm25=retrieval.bm25.model_dump(),
        )
        if skills.human_skills:
            p = Path(skills.human_skills)
            if not p.is_absolute() and base_dir is not None:
                p = Path(base_dir) / p
            for s in import_human_skills(p):
                repo.add(s)
        return repo

    @classmethod
    def for_experiment(cls, spec: ExperimentSpec) -> SkillRepo:
        return cls.from_spec(spec.skills, spec.retrieval, base_dir=spec.source_dir)

    def copy(self) -> SkillRepo:
        """An independent repo with the same skills (skills are immutable records, so this is cheap)."""
        new = SkillRepo.__new__(SkillRepo)
        new.max_content_chars = self.max_content_chars
        new.max_skills = self.max_skills
        new.top_k = self.top_k
        new.retrieval_fields = self.retrieval_fields
        new._skills = dict(self._skills)
        new._index = self._index.copy()
        return new

    # -- reading
    def __len__(self) -> int:
        return len(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(list(self._skills.values()))

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def names(self) -> list[str]:
        return list(self._skills)

    @property
    def curated_count(self) -> int:
        return sum(1 for s in self._skills.values() if s.provenance == "curated")

    def text(self) -> str:
        """The whole repo as the models see it (for r_comp's |S_i| token count)."""
        return "\n\n".join(s.prompt_text() for s in self._skills.values())

    def state_hash(self) -> str:
        """sha256 of everything observable (order, SKILL.md text, flags, resources)."""
        h = hashlib.sha256()
        for s in self._skills.values():
            h.update(json.dumps([s.to_markdown(), s.mutable, list(s.resources)]).encode("utf-8"))
            h.update(b"\x00")
        return h.hexdigest()

    def retrieve(self, query: str, k: int | None = None) -> list[Skill]:
        """Top-k skills by BM25 over the configured fields; ties by name; skills sharing no term are not returned."""
        k = self.top_k if k is None else k
        return [self._skills[name] for name, _ in self._index.search(query, k)]

    def retrieve_scored(self, query: str, k: int | None = None) -> list[tuple[Skill, float]]:
        k = self.top_k if k is None else k
        return [(self._skills[name], score) for name, score in self._index.search(query, k)]

    # -- trusted writes (import, load)
    def add(self, skill: Skill) -> None:
        """Add a skill from a trusted source (human import, load). Raises SkillError on a duplicate name."""
        if skill.name in self._skills:
            raise SkillError(f"skill {skill.name}: already in the repo (fix: names must be unique)")
        self._commit(skill)

    def _commit(self, skill: Skill, replaces: str | None = None) -> None:
        if replaces is not None and replaces != skill.name:
            # a rename keeps the skill's place in the repo order
            self._skills = {(skill.name if n == replaces else n): (skill if n == replaces else s) for n, s in self._skills.items()}
            self._index.remove(replaces)
        else:
            self._skills[skill.name] = skill
        self._index.upsert(skill.name, skill_document(skill, self.retrieval_fields))

    # -- the curator's operations
    def _fail(self, function: str, skill_name: Any, error: str) -> OpResult:
        return OpResult(False, function, skill_name if isinstance(skill_name, str) else None, error)

    def _parse_curated(self, content: Any, expected_name: str, what: str) -> Skill | str:
        """Parse curator content, or return the error text."""
        if not isinstance(content, str):
            return f"{what} is a {type(content).__name__}, not a string (fix: the full SKILL.md text)"
        if len(content) > self.max_content_chars:
            return f"{what} has {len(content)} characters, more than {self.max_content_chars} (fix: shorten the skill)"
        try:
            skill = parse_skill_md(content)
        except SkillFormatError as e:
            return f"{what}: {e.problem}" + (f" (line {e.line})" if e.line else "")
        if skill.name != expected_name:
            return f"{what}: frontmatter name {skill.name!r} disagrees with {expected_name!r} (fix: make them equal)"
        if skill.provenance != "curated" or not skill.mutable:
            return f"{what}: a curator can only write curated, mutable skills (fix: drop metadata.provenance/mutable)"
        return skill

    def new_skill_insert(self, skill_name: str, content: str) -> OpResult:
        fn = "new_skill_insert"
        problem = name_problem(skill_name)
        if problem:
            return self._fail(fn, skill_name, f"skill_name: {problem}")
        if skill_name in self._skills:
            return self._fail(fn, skill_name, f"skill_name: {skill_name!r} already exists (fix: skill_update it)")
        if self.curated_count >= self.max_skills:
            return self._fail(fn, skill_name, f"the repo holds {self.max_skills} skills, the limit (fix: delete or update one)")
        parsed = self._parse_curated(content, skill_name, "content")
        if isinstance(parsed, str):
            return self._fail(fn, skill_name, parsed)
        self._commit(parsed)
        return OpResult(True, fn, skill_name, None, parsed)

    def skill_update(self, skill_name: str, new_name: str | None = None, new_content: str | None = None) -> OpResult:
        """Rename and/or replace content. An empty string counts as not given (models often fill optional
        fields with "")."""
        fn = "skill_update"
        problem = name_problem(skill_name)
        if problem:
            return self._fail(fn, skill_name, f"skill_name: {problem}")
        old = self._skills.get(skill_name)
        if old is None:
            return self._fail(fn, skill_name, f"skill_name: {skill_name!r} does not exist (fix: insert it, or name an existing skill)")
        if not old.mutable:
            return self._fail(fn, skill_name, f"skill_name: {skill_name!r} is a read-only {old.provenance} skill (fix: insert a new skill)")
        new_name = new_name or None
        new_content = new_content or None
        if new_name is None and new_content is None:
            return self._fail(fn, skill_name, "nothing to update (fix: give new_name, new_content or both)")
        target = skill_name
        if new_name is not None:
            problem = name_problem(new_name)
            if problem:
                return self._fail(fn, skill_name, f"new_name: {problem}")
            if new_name != skill_name and new_name in self._skills:
                return self._fail(fn, skill_name, f"new_name: {new_name!r} already exists (fix: another name)")
            target = new_name
        if new_content is not None:
            parsed = self._parse_curated(new_content, target, "new_content")
            if isinstance(parsed, str):
                return self._fail(fn, skill_name, parsed)
            updated = parsed
        else:
            updated = replace(old, name=target)
        self._commit(updated, replaces=skill_name)
        return OpResult(True, fn, skill_name, None, updated)

    def skill_delete(self, skill_name: str) -> OpResult:
        fn = "skill_delete"
        problem = name_problem(skill_name)
        if problem:
            return self._fail(fn, skill_name, f"skill_name: {problem}")
        old = self._skills.get(skill_name)
        if old is None:
            return self._fail(fn, skill_name, f"skill_name: {skill_name!r} does not exist (fix: name an existing skill)")
        if not old.mutable:
            return self._fail(fn, skill_name, f"skill_name: {skill_name!r} is a read-only {old.provenance} skill")
        del self._skills[skill_name]
        self._index.remove(skill_name)
        return OpResult(True, fn, skill_name, None, None)

    def apply(self, function_name: Any, arguments: Any) -> OpResult:
        """Dispatch one tool call; argument names and types are checked against :data:`CURATOR_FUNCTIONS`."""
        fname = function_name if isinstance(function_name, str) else repr(function_name)
        if function_name not in _SCHEMAS:
            return OpResult(
                False, fname, None, f"unknown function {fname!r} (fix: one of {', '.join(_SCHEMAS)})"
            )
        if not isinstance(arguments, dict):
            return OpResult(False, fname, None, f"arguments is a {type(arguments).__name__}, not an object")
        schema = _SCHEMAS[fname]
        skill_name = arguments.get("skill_name")
        unknown = [k for k in arguments if k not in schema["properties"]]
        if unknown:
            return self._fail(
                fname, skill_name, f"unknown argument {unknown[0]!r} (fix: only {', '.join(schema['properties'])})"
            )
        missing = [k for k in schema["required"] if k not in arguments]
        if missing:
            return self._fail(fname, skill_name, f"missing required argument {missing[0]!r}")
        for k, v in arguments.items():
            optional = k not in schema["required"]
            if not (isinstance(v, str) or (optional and v is None)):
                return self._fail(fname, skill_name, f"argument {k!r} is a {type(v).__name__}, not a string")
        return getattr(self, fname)(**arguments)

    # -- folders
    def save(self, root: str | Path) -> None:
        """Write one folder per skill (``<root>/<name>/SKILL.md`` + resources) and a manifest, atomically per
        file. Folders of skills deleted since the last save (listed in the old manifest) are removed; nothing
        else in ``root`` is touched. Refuses symlinks in the target."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise SkillPathError(f"save: {str(root)!r} is not a folder (fix: a folder path)")
        root.mkdir(parents=True, exist_ok=True)
        manifest_path = root / MANIFEST_FILE
        _refuse_symlink(manifest_path)
        previous = _read_manifest(root) or []
        for skill in self._skills.values():
            folder = _safe_child(root, skill.name)
            folder.mkdir(exist_ok=True)
            target = folder / SKILL_FILE
            _refuse_symlink(target)
            atomic_write_text(target, skill.to_markdown())
            for rel in skill.resources:
                _copy_resource(skill, rel, folder)
        manifest = {
            "schema_version": MANIFEST_VERSION,
            "skills": [{"name": s.name, "sha256": s.content_hash()} for s in self._skills.values()],
        }
        atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
        for name in previous:
            if name not in self._skills and NAME_RE.fullmatch(name):
                stale = root / name
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale)

    @classmethod
    def load(cls, root: str | Path, **limits: Any) -> SkillRepo:
        """Read a folder written by :meth:`save` (manifest order), or any folder of ``<name>/SKILL.md`` folders
        (name order). Provenance and mutability come from each SKILL.md."""
        root = Path(root)
        if not root.is_dir():
            raise SkillError(f"load: {str(root)!r} is not a folder (fix: a folder of skill folders)")
        names = _read_manifest(root)
        if names is None:
            names = sorted(p.parent.name for p in root.glob(f"*/{SKILL_FILE}"))
        repo = cls(**limits)
        for name in names:
            folder = _safe_child(root, name)
            repo.add(read_skill_folder(folder))
        return repo

