"""Skill folders on disk: the saved repo's manifest, safe child paths and resource copies (no write through a
symlink, no resource outside its skill), reading one skill folder, and importing human-written skills."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path, PurePosixPath

from twinrun.core.skills.skill_md import (
    MANIFEST_FILE,
    RESOURCE_DIRS,
    SKILL_FILE,
    Skill,
    SkillError,
    SkillPathError,
    name_problem,
    parse_skill_md,
    resource_path_problem,
)

# ------------------------------------------------------------------------------------------------------------
# Writing a repo folder safely

def _read_manifest(root: Path) -> list[str] | None:
    p = root / MANIFEST_FILE
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        names = [row["name"] for row in data["skills"]]
    except (ValueError, KeyError, TypeError) as e:
        raise SkillError(f"{p}: not a twinrun skill manifest ({e}; fix: delete it to load the folders by name)") from None
    for n in names:
        if name_problem(n):
            raise SkillPathError(f"{p}: skill name {n!r} is not a safe name (fix: repair the manifest)")
    return names


def _refuse_symlink(p: Path) -> None:
    if p.is_symlink():
        raise SkillPathError(f"save: {str(p)!r} is a symlink (fix: remove it; a skill repo never writes through links)")


def _safe_child(root: Path, name: str) -> Path:
    """root/name, only if name is a safe skill name and root/name is not a symlink."""
    problem = name_problem(name)
    if problem:
        raise SkillPathError(f"skill folder: {problem}")
    child = root / name
    _refuse_symlink(child)
    if child.parent != root:  # belt and braces: NAME_RE already excludes separators and dots
        raise SkillPathError(f"skill folder: {name!r} leaves {str(root)!r}")
    return child


def _copy_resource(skill: Skill, rel: str, folder: Path) -> None:
    problem = resource_path_problem(rel)
    if problem:
        raise SkillPathError(f"skill {skill.name} resource {rel!r}: {problem}")
    if skill.origin is None:
        raise SkillError(f"skill {skill.name} resource {rel!r}: the skill has no origin folder to copy it from")
    src = _resource_source(skill.origin, rel)
    dst = folder
    for part in PurePosixPath(rel).parts[:-1]:
        dst = dst / part
        _refuse_symlink(dst)
        dst.mkdir(exist_ok=True)
    dst = dst / PurePosixPath(rel).name
    _refuse_symlink(dst)
    if src.resolve() == dst.resolve():
        return  # saving a repo into the folder it was loaded from
    tmp = dst.with_name(f".{dst.name}.tmp.{os.getpid()}")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _resource_source(origin: Path, rel: str) -> Path:
    src = origin / rel
    base = origin.resolve()
    real = src.resolve()
    if not real.is_relative_to(base) or not real.is_file():
        raise SkillPathError(f"resource {str(src)!r}: not a file inside {str(origin)!r} (fix: no links out of the skill)")
    return src


# ------------------------------------------------------------------------------------------------------------
# Reading skill folders and human-written skills


def _list_resources(folder: Path) -> tuple[str, ...]:
    out: list[str] = []
    base = folder.resolve()
    for d in RESOURCE_DIRS:
        top = folder / d
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            dirnames.sort()
            for fn in sorted(filenames):
                p = Path(dirpath) / fn
                if not p.resolve().is_relative_to(base) or not p.resolve().is_file():
                    raise SkillPathError(f"{p}: links outside its skill folder (fix: copy the file in)")
                rel = p.relative_to(folder).as_posix()
                if resource_path_problem(rel) is None:
                    out.append(rel)
    return tuple(out)


def read_skill_folder(folder: Path) -> Skill:
    """A skill folder (SKILL.md + optional references/ scripts/ assets/) as a Skill with resources."""
    path = folder / SKILL_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SkillError(f"{path}: cannot be read ({e}; fix: a UTF-8 SKILL.md)") from None
    skill = parse_skill_md(text, source=str(path))
    return replace(skill, resources=_list_resources(folder), origin=folder)


def import_human_skills(root: str | Path) -> list[Skill]:
    """Read human-written skills as immutable ``human`` skills, sorted by name.

    Layouts: SkillGym ``<major>/<minor>/skills/<skill>/SKILL.md`` (taxonomy ``<major>/<minor>``), and a plain
    folder of ``<skill>/SKILL.md`` folders (or ``root`` itself being one skill folder). ``source`` is the skill
    folder relative to ``root``.
    """
    root = Path(root)
    if not root.is_dir():
        raise SkillError(f"human skills: {str(root)!r} is not a folder (fix: point skills.human_skills at one)")
    found: list[tuple[Path, str | None]] = []
    if (root / SKILL_FILE).is_file():
        found.append((root, None))
    for p in sorted(root.glob(f"*/*/skills/*/{SKILL_FILE}")):
        rel = p.parent.relative_to(root).parts
        found.append((p.parent, f"{rel[0]}/{rel[1]}"))
    for p in sorted(root.glob(f"*/{SKILL_FILE}")):
        found.append((p.parent, None))
    if not found:
        raise SkillError(
            f"human skills: no SKILL.md under {str(root)!r} (fix: <skill>/SKILL.md or "
            "<major>/<minor>/skills/<skill>/SKILL.md folders)"
        )
    skills: dict[str, Skill] = {}
    where: dict[str, Path] = {}
    for folder, taxonomy in found:
        source = folder.relative_to(root).as_posix()
        skill = read_skill_folder(folder)
        skill = replace(
            skill,
            metadata=replace(
                skill.metadata, provenance="human", source=source, taxonomy=taxonomy or skill.metadata.taxonomy
            ),
            mutable=False,
        )
        if skill.name in skills:
            raise SkillError(
                f"human skills: name {skill.name!r} in both {where[skill.name]} and {folder} (fix: rename one)"
            )
        skills[skill.name] = skill
        where[skill.name] = folder
    return [skills[n] for n in sorted(skills)]
