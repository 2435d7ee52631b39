"""SKILL.md round trip, curator operations (atomic, table-driven), path-escape protection, save/load, human skills."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinrun.core.errors import TwinrunError
from twinrun.core.skills.repository import (
    CURATOR_FUNCTIONS,
    MANIFEST_FILE,
    NAME_MAX,
    Skill,
    SkillError,
    SkillFormatError,
    SkillMetadata,
    SkillPathError,
    SkillRepo,
    import_human_skills,
    parse_skill_md,
    render_for_prompt,
)
from twinrun.core.spec import RetrievalSpec, SkillsSpec


def md(name: str, description: str = "Use when the task asks to heat something.", body: str = "1. go\n2. do\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}"


# ------------------------------------------------------------------------------------------------------------
# SKILL.md round trip (hypothesis)

# text without NUL and lone surrogates (the only characters a Skill refuses)
safe_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300)
names = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,63}\Z")
descriptions = safe_text.filter(lambda s: s.strip() and len(s) <= 1024)
scalars = st.one_of(safe_text, st.integers(-(10**6), 10**6), st.booleans(), st.none())
yaml_values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.from_regex(r"\A[a-z_]{1,8}\Z"), scalars, max_size=3))
extra_keys = st.from_regex(r"\A[a-z][a-z_-]{0,11}\Z").filter(lambda k: k not in ("name", "description", "metadata"))
meta_keys = st.from_regex(r"\A[a-z][a-z_-]{0,11}\Z").filter(lambda k: k not in ("provenance", "source", "taxonomy", "mutable"))


@st.composite
def skills(draw: st.DrawFn) -> Skill:
    provenance = draw(st.sampled_from(["curated", "human"]))
    meta = SkillMetadata(
        provenance=provenance,
        source=draw(st.one_of(st.none(), safe_text)),
        taxonomy=draw(st.one_of(st.none(), safe_text)),
        extra=draw(st.dictionaries(meta_keys, yaml_values, max_size=3)),
    )
    return Skill(
        name=draw(names),
        description=draw(descriptions),
        body=draw(st.one_of(safe_text, st.sampled_from(["", "\n", "---\nx\n---\n", "\r\n# W\r\n- a\r\n", "\n\n# T"]))),
        metadata=meta,
        mutable=draw(st.one_of(st.none(), st.booleans())),
        extra=draw(st.dictionaries(extra_keys, yaml_values, max_size=3)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skills())
def test_skill_md_round_trip_is_lossless(skill: Skill) -> None:
    text = skill.to_markdown()
    parsed = parse_skill_md(text)
    assert parsed == skill
    assert parsed.to_markdown() == text  # the canonical text is a fixed point
    assert parse_skill_md(parsed.prompt_text()).body == skill.body


@pytest.mark.parametrize(
    "text",
    [
        md("heat-then-place"),
        "---\r\nname: a1\r\ndescription: d\r\n---\r\nbody\r\n",  # CRLF file
        "\ufeff---\nname: bom\ndescription: d\n---\n",  # BOM, no body
        "---\nname: '123'\ndescription: \"yes\"\nlicense: MIT\nallowed-tools: [bash]\nmetadata:\n  author: x\n---\nb",
    ],
)
def test_parse_write_parse_examples(text: str) -> None:
    once = parse_skill_md(text)
    assert parse_skill_md(once.to_markdown()) == once


def test_plain_scalars_stay_text() -> None:
    s = parse_skill_md("---\nname: 123\ndescription: yes\nversion: 1.0\n---\nb")
    assert (s.name, s.description, s.extra) == ("123", "yes", {"version": 1.0})


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("name: x\ndescription: y\n", 1, "does not start with"),
        ("---\nname: x\ndescription: y\n", 1, "never closed"),
        ("---\nname: x\ndescription: [unclosed\n---\n", 3, "not valid YAML"),
        ("---\nname: x\ndescription: y\n  bad: indent\n---\n", 4, "not valid YAML"),
        ("---\n- a\n- b\n---\n", 2, "not a mapping"),
        ("---\nname: x\nname: y\ndescription: d\n---\n", 3, "appears twice"),
        ("---\ndescription: d\n---\n", 2, "no 'name:'"),
        ("---\nname: x\n---\n", 2, "no 'description:'"),
        ("---\nname: Bad Name\ndescription: d\n---\n", 2, "lowercase"),
        ("---\nname: x\n\ndescription: '   '\n---\n", 4, "empty"),
        ("---\nname: x\ndescription: [a, b]\n---\n", 3, "single text value"),
        ("---\nname: x\ndescription: d\nmetadata: 5\n---\n", 4, "not a mapping"),
        ("---\nname: x\ndescription: d\nmetadata:\n  provenance: robot\n---\n", 4, "curated or human"),
        ("---\nname: x\ndescription: " + "d" * 1025 + "\n---\n", 3, "more than 1024"),
        ("---\nname: x\ndescription: d\na: &a [1, 2]\nb: [*a, *a]\n---\n", 5, "alias"),
        ("---\nname: x\ndescription: d\nz: " + "[" * 5000 + "]" * 5000 + "\n---\n", 2, "nested too deeply"),
    ],
)
def test_malformed_frontmatter_names_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(SkillFormatError) as err:
        parse_skill_md(text, source="x/SKILL.md")
    assert err.value.line == line
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"x/SKILL.md line {line}: ")
    assert "\n" not in str(err.value)
    assert isinstance(err.value, TwinrunError)


def test_name_rules() -> None:
    Skill("a" * NAME_MAX, "d")
    for bad in ["", "a" * (NAME_MAX + 1), "-a", "A", "a_b", "a.b", "a b", "../a", "a/b", "a\x00"]:
        with pytest.raises(SkillError):
            Skill(bad, "d")


def test_human_skills_are_immutable_by_default() -> None:
    assert Skill("a", "d", metadata=SkillMetadata(provenance="human")).mutable is False
    assert Skill("a", "d").mutable is True


# ------------------------------------------------------------------------------------------------------------
# Operations: a table of valid / invalid calls; every invalid one leaves the repo byte-identical


@pytest.fixture
def repo(tmp_path: Path) -> SkillRepo:
    r = SkillRepo(max_content_chars=400, max_skills=3)
    assert r.new_skill_insert("heat-then-place", md("heat-then-place")).ok
    assert r.new_skill_insert("cool-then-place", md("cool-then-place", "Use when the task says cool.")).ok
    r.add(Skill("human-guide", "Read-only guide for any task.", "- step\n- step\n", SkillMetadata(provenance="human")))
    return r


OPS = [
    # (function, arguments, ok, error fragment)
    ("new_skill_insert", {"skill_name": "clean-then-place", "content": md("clean-then-place")}, True, None),
    ("new_skill_insert", {"skill_name": "heat-then-place", "content": md("heat-then-place")}, False, "already exists"),
    ("new_skill_insert", {"skill_name": "Bad", "content": md("bad")}, False, "lowercase"),
    ("new_skill_insert", {"skill_name": "other-name", "content": md("clean-then-place")}, False, "disagrees"),
    ("new_skill_insert", {"skill_name": "x1", "content": "no frontmatter"}, False, "does not start"),
    ("new_skill_insert", {"skill_name": "x1", "content": md("x1", description="''")}, False, "empty"),
    ("new_skill_insert", {"skill_name": "x1", "content": md("x1", body="z" * 500)}, False, "more than 400"),
    ("new_skill_insert", {"skill_name": "x1", "content": md("x1") .replace("---\n\n", "metadata:\n  provenance: human\n---\n\n")}, False, "curated, mutable"),
    ("new_skill_insert", {"skill_name": "x1", "content": md("x1").replace("---\n\n", "metadata:\n  mutable: false\n---\n\n")}, False, "curated, mutable"),
    ("new_skill_insert", {"skill_name": "human-guide", "content": md("human-guide")}, False, "already exists"),
    ("new_skill_insert", {"skill_name": "x1"}, False, "missing required argument 'content'"),
    ("new_skill_insert", {"skill_name": "x1", "content": 5}, False, "not a string"),
    ("new_skill_insert", {"skill_name": "x1", "content": md("x1"), "extra": "y"}, False, "unknown argument"),
    ("skill_update", {"skill_name": "heat-then-place", "new_content": md("heat-then-place", body="- a\n- b\n")}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "heat-object"}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "heat-object", "new_content": md("heat-object")}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "heat-then-place", "new_content": md("heat-then-place")}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "", "new_content": md("heat-then-place")}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": None, "new_content": md("heat-then-place")}, True, None),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "heat-object", "new_content": md("heat-then-place")}, False, "disagrees"),
    ("skill_update", {"skill_name": "heat-then-place", "new_content": md("heat-object")}, False, "disagrees"),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "cool-then-place"}, False, "already exists"),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "../up"}, False, "new_name"),
    ("skill_update", {"skill_name": "heat-then-place"}, False, "nothing to update"),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": "", "new_content": ""}, False, "nothing to update"),
    ("skill_update", {"skill_name": "missing-skill", "new_name": "x"}, False, "does not exist"),
    ("skill_update", {"skill_name": "human-guide", "new_name": "mine"}, False, "read-only human"),
    ("skill_update", {"skill_name": "heat-then-place", "new_content": "---\nname: heat-then-place\n"}, False, "never closed"),
    ("skill_update", {"skill_name": "heat-then-place", "new_content": md("heat-then-place", body="z" * 500)}, False, "more than 400"),
    ("skill_update", {"skill_name": "heat-then-place", "new_name": 3}, False, "not a string"),
    ("skill_delete", {"skill_name": "cool-then-place"}, True, None),
    ("skill_delete", {"skill_name": "missing-skill"}, False, "does not exist"),
    ("skill_delete", {"skill_name": "human-guide"}, False, "read-only human"),
    ("skill_delete", {}, False, "missing required argument 'skill_name'"),
    ("skill_delete", {"skill_name": "cool-then-place", "new_name": "x"}, False, "unknown argument"),
    ("skill_search", {"query": "x"}, False, "unknown function"),
    ("new_skill_insert", ["skill_name", "x"], False, "not an object"),
]


@pytest.mark.parametrize("function,arguments,ok,fragment", OPS)
def test_operation_table(repo: SkillRepo, tmp_path: Path, function: str, arguments, ok: bool, fragment: str | None) -> None:
    before_hash, before_text, before_names = repo.state_hash(), repo.text(), repo.names()
    repo.save(tmp_path / "before")
    result = repo.apply(function, arguments)
    assert result.ok is ok, result.error
    assert result.function == function
    if ok:
        assert result.error is None
        return
    assert fragment in result.error
    assert "\n" not in result.error
    # atomic: nothing observable changed, and a save is byte-identical to the one before
    assert (repo.state_hash(), repo.text(), repo.names()) == (before_hash, before_text, before_names)
    repo.save(tmp_path / "after")
    assert _tree_bytes(tmp_path / "before") == _tree_bytes(tmp_path / "after")


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_successful_operations_change_what_they_say(repo: SkillRepo) -> None:
    r = repo.skill_update("heat-then-place", new_name="heat-object")
    assert r.ok and r.skill.name == "heat-object" and r.writes_content
    assert repo.names() == ["heat-object", "cool-then-place", "human-guide"]  # a rename keeps the place
    assert parse_skill_md(repo.get("heat-object").to_markdown()).name == "heat-object"
    r = repo.skill_update("heat-object", new_content=md("heat-object", body="- one\n- two\n"))
    assert repo.get("heat-object").body == "- one\n- two\n"
    assert repo.skill_delete("cool-then-place").ok
    assert repo.names() == ["heat-object", "human-guide"]
    assert not repo.skill_delete("cool-then-place").writes_content


def test_max_skills_counts_curated_only(repo: SkillRepo) -> None:
    assert repo.new_skill_insert("third", md("third")).ok  # 3 curated + 1 human
    before = repo.state_hash()
    r = repo.new_skill_insert("fourth", md("fourth"))
    assert not r.ok and "limit" in r.error and repo.state_hash() == before


def test_curator_functions_are_the_papers_three() -> None:
    assert [f["function"]["name"] for f in CURATOR_FUNCTIONS] == ["new_skill_insert", "skill_update", "skill_delete"]
    req = {f["function"]["name"]: f["function"]["parameters"]["required"] for f in CURATOR_FUNCTIONS}
    assert req == {"new_skill_insert": ["skill_name", "content"], "skill_update": ["skill_name"], "skill_delete": ["skill_name"]}
    json.dumps(CURATOR_FUNCTIONS)


def test_render_for_prompt_hides_bookkeeping(repo: SkillRepo) -> None:
    text = render_for_prompt([repo.get("human-guide"), repo.get("heat-then-place")])
    assert "provenance" not in text and "name: human-guide" in text and "name: heat-then-place" in text
    assert render_for_prompt([]) == "(none)"
    assert repo.text().count("---\nname:") == 3


def test_copy_is_independent(repo: SkillRepo) -> None:
    other = repo.copy()
    assert other.new_skill_insert("new-one", md("new-one")).ok
    assert other.skill_delete("heat-then-place").ok
    assert "new-one" not in repo and "heat-then-place" in repo
    assert [s.name for s in repo.retrieve("heat", 5)] == ["heat-then-place"]
    assert [s.name for s in other.retrieve("heat", 5)] == ["new-one"]


# ------------------------------------------------------------------------------------------------------------
# Path escape: nothing a curator writes leaves the repo folder

ESCAPES = ["../evil", "..", ".", "/etc/passwd", "/tmp/x", "a/b", "a\\b", "evil\x00", "~root", "C:evil", " evil", "evil\n"]


@pytest.mark.parametrize("name", ESCAPES)
def test_escaping_names_are_refused(tmp_path: Path, name: str) -> None:
    r = SkillRepo()
    assert r.new_skill_insert("ok-skill", md("ok-skill")).ok
    before = r.state_hash()
    assert not r.new_skill_insert(name, md("x")).ok
    assert not r.skill_update("ok-skill", new_name=name).ok
    assert not r.skill_delete(name).ok
    # content whose frontmatter name escapes is refused too (quoted so YAML keeps it as written)
    assert not r.new_skill_insert("ok-two", f"---\nname: {json.dumps(name)}\ndescription: d\n---\n").ok
    assert r.state_hash() == before
    r.save(tmp_path / "repo")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == sorted([MANIFEST_FILE, "ok-skill"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_save_refuses_a_symlinked_skill_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    (root / "evil").symlink_to(outside, target_is_directory=True)
    r = SkillRepo()
    assert r.new_skill_insert("evil", md("evil")).ok
    with pytest.raises(SkillPathError, match="symlink"):
        r.save(root)
    assert list(outside.iterdir()) == []


def test_save_refuses_a_symlinked_skill_file_and_manifest(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    root = tmp_path / "repo"
    (root / "a1").mkdir(parents=True)
    (root / "a1" / "SKILL.md").symlink_to(outside)
    r = SkillRepo()
    assert r.new_skill_insert("a1", md("a1")).ok
    with pytest.raises(SkillPathError):
        r.save(root)
    assert outside.read_text() == "keep"
    (root / "a1" / "SKILL.md").unlink()
    (root / MANIFEST_FILE).symlink_to(outside)
    with pytest.raises(SkillPathError):
        r.save(root)
    assert outside.read_text() == "keep"


def test_resource_paths_must_stay_inside(tmp_path: Path) -> None:
    for bad in ["../x", "/abs/x", "references/../../x", "other/x", "references", "references/a\\b", "references/\x00"]:
        with pytest.raises(SkillError):
            Skill("a", "d", resources=(bad,))


def test_load_refuses_a_manifest_naming_a_path(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"schema_version": 1, "skills": [{"name": "../x"}]}))
    with pytest.raises(SkillPathError):
        SkillRepo.load(tmp_path)


# ------------------------------------------------------------------------------------------------------------
# Save / load and human-written skills


def write_skill(folder: Path, name: str, description: str = "Use it when needed.", body: str = "- a\n- b\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(md(name, description, body), encoding="utf-8")
    return folder


@pytest.fixture
def skillgym(tmp_path: Path) -> Path:
    root = tmp_path / "skillgym"
    a = write_skill(root / "household" / "kitchen" / "skills" / "heat-food", "heat-food", "Heat food in a microwave.")
    (a / "references").mkdir()
    (a / "references" / "microwave.md").write_text("open, put, close, heat")
    (a / "scripts" / "sub").mkdir(parents=True)
    (a / "scripts" / "sub" / "run.sh").write_text("echo hi\n")
    (a / "notes.txt").write_text("not a resource")
    write_skill(root / "household" / "bath" / "skills" / "clean-sink", "clean-sink", "Clean things in the sink.")
    write_skill(root / "science" / "lab" / "skills" / "measure-temp", "measure-temp", "Measure temperature.")
    return root


def test_import_skillgym_layout(skillgym: Path) -> None:
    skills = import_human_skills(skillgym)
    assert [s.name for s in skills] == ["clean-sink", "heat-food", "measure-temp"]
    heat = skills[1]
    assert heat.provenance == "human" and heat.mutable is False
    assert heat.metadata.taxonomy == "household/kitchen"
    assert heat.metadata.source == "household/kitchen/skills/heat-food"
    assert heat.resources == ("references/microwave.md", "scripts/sub/run.sh")


def test_import_plain_folder_and_single_skill(tmp_path: Path) -> None:
    write_skill(tmp_path / "plain" / "b-skill", "b-skill")
    write_skill(tmp_path / "plain" / "a-skill", "a-skill")
    (tmp_path / "plain" / "not-a-skill").mkdir()
    skills = import_human_skills(tmp_path / "plain")
    assert [(s.name, s.metadata.taxonomy, s.mutable) for s in skills] == [("a-skill", None, False), ("b-skill", None, False)]
    assert [s.name for s in import_human_skills(tmp_path / "plain" / "a-skill")] == ["a-skill"]


def test_import_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="not a folder"):
        import_human_skills(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match="no SKILL.md"):
        import_human_skills(tmp_path / "empty")
    write_skill(tmp_path / "dup" / "x" / "y" / "skills" / "one", "same")
    write_skill(tmp_path / "dup" / "two", "same")
    with pytest.raises(SkillError, match="in both"):
        import_human_skills(tmp_path / "dup")
    bad = tmp_path / "bad" / "s"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text("---\nname: s\ndescription: [\n---\n")
    with pytest.raises(SkillFormatError) as err:
        import_human_skills(tmp_path / "bad")
    assert err.value.line == 3 and str(bad / "SKILL.md") in str(err.value)


def test_import_refuses_resource_links_out_of_the_skill(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s")
    folder = write_skill(tmp_path / "h" / "s1", "s1")
    (folder / "assets").mkdir()
    (folder / "assets" / "leak").symlink_to(secret)
    with pytest.raises(SkillPathError):
        import_human_skills(tmp_path / "h")


def test_human_and_curated_share_a_repo_and_round_trip_through_a_folder(skillgym: Path, tmp_path: Path) -> None:
    repo = SkillRepo.from_spec(SkillsSpec(human_skills="skillgym"), RetrievalSpec(top_k=2), base_dir=skillgym.parent)
    assert repo.top_k == 2 and len(repo) == 3
    assert repo.new_skill_insert("heat-then-place", md("heat-then-place")).ok
    assert not repo.skill_delete("heat-food").ok
    out = tmp_path / "saved"
    repo.save(out)
    assert (out / "heat-food" / "references" / "microwave.md").read_text() == "open, put, close, heat"
    assert (out / "heat-food" / "scripts" / "sub" / "run.sh").is_file()
    loaded = SkillRepo.load(out)
    assert loaded.names() == repo.names()
    assert [loaded.get(n) for n in loaded.names()] == [repo.get(n) for n in repo.names()]
    assert loaded.state_hash() == repo.state_hash()
    assert loaded.get("heat-food").mutable is False and not loaded.skill_update("heat-food", new_name="x").ok
    # saving a loaded repo back into its own folder is a no-op on bytes
    before = _tree_bytes(out)
    loaded.save(out)
    assert _tree_bytes(out) == before


def test_save_removes_only_its_own_deleted_skills(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    repo = SkillRepo()
    for n in ("one", "two"):
        assert repo.new_skill_insert(n, md(n)).ok
    repo.save(root)
    (root / "user-file.txt").write_text("mine")
    (root / "foreign").mkdir()
    assert repo.skill_delete("one").ok
    repo.save(root)
    assert sorted(p.name for p in root.iterdir()) == sorted([MANIFEST_FILE, "two", "user-file.txt", "foreign"])
    assert SkillRepo.load(root).names() == ["two"]
    assert not any(p.name.startswith(".") for p in root.rglob("*"))  # no temp files left behind


def test_load_plain_folder_without_manifest(tmp_path: Path) -> None:
    write_skill(tmp_path / "zeta", "zeta")
    write_skill(tmp_path / "alpha", "alpha")
    assert SkillRepo.load(tmp_path, max_content_chars=100).names() == ["alpha", "zeta"]
    with pytest.raises(SkillError):
        SkillRepo.load(tmp_path / "nope")


def test_skill_with_unsavable_text_is_refused() -> None:
    for body in ["a\x00b", "a\ud800b"]:
        with pytest.raises(SkillError):
            Skill("a", "d", body)
    r = SkillRepo()
    assert not r.new_skill_insert("a", md("a", body="x\x00y")).ok


def test_save_target_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SkillPathError):
        SkillRepo().save(f)


def test_symlinked_resource_dir_on_save(skillgym: Path, tmp_path: Path) -> None:
    repo = SkillRepo(import_human_skills(skillgym))
    root = tmp_path / "out"
    (root / "heat-food").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "heat-food" / "references")
    with pytest.raises(SkillPathError):
        repo.save(root)
    assert list(elsewhere.iterdir()) == []


def test_a_value_shared_twice_is_written_out_not_aliased() -> None:
    shared = ["a", "b"]
    s = Skill("a1", "d", extra={"x": shared, "y": shared})
    assert "*" not in s.to_markdown() and parse_skill_md(s.to_markdown()) == s
