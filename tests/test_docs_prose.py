"""Issue 52: docs that lead with the task. No sentence of README.md or docs/*.md is over ~60 words (code blocks,
tables and generated blocks aside); the README states no measured timing or count (those live in
docs/measured.md); each task page opens with what a reader does with it; the glossary is generated from the one
list the report uses, and the README links it."""

from __future__ import annotations

import re
from pathlib import Path

from twinrun.testing.doc_prose import MAX_WORDS, long_sentences, sentences

# generated from the CLI's --help text (tests/test_docs_run_as_written.py keeps it current): not prose written here
GENERATED_PAGES = {"commands.md"}
# sections another change is rewriting as this test lands (issue 50 rewrites findings.md's control sections): left
# out by name until that rewrite is merged, then this entry goes (the test below fails if the heading disappears)
PENDING_SECTIONS: dict[str, str] = {}


def _measured_text(page: Path) -> str:
    """The page's text with a pending section blanked (from its heading to the next one of the same level)."""
    text = page.read_text(encoding="utf-8")
    head = PENDING_SECTIONS.get(page.name)
    if head is None:
        return text
    before, sep, after = text.partition(f"\n## {head}\n")
    assert sep, f"{page.name}: no section '## {head}' (fix: drop it from PENDING_SECTIONS)"
    rest = after.split("\n## ", 1)
    blank = "\n" * (sep + rest[0]).count("\n")  # keeps the line numbers of what follows
    return before + blank + ("\n## " + rest[1] if len(rest) > 1 else "")


def _pages(repo_root: Path) -> list[Path]:
    return [repo_root / "README.md"] + [p for p in sorted((repo_root / "docs").glob("*.md"))
                                        if p.name not in GENERATED_PAGES]


def test_no_sentence_in_readme_or_docs_is_over_sixty_words(repo_root: Path) -> None:
    found = [f"{p.relative_to(repo_root)}:{line}: {n} words: {start}"
             for p in _pages(repo_root) for line, n, start in long_sentences(_measured_text(p))]
    assert not found, f"{len(found)} sentence(s) over {MAX_WORDS} words (fix: split them):\n" + "\n".join(found)


def test_the_sentence_counter_sees_prose_and_skips_the_rest() -> None:
    """Cut the splitter or the skipping and these fail: each case is what a docs page holds."""
    long = " ".join(["word"] * 61) + "."
    assert [n for _, n, _ in long_sentences(long)] == [61]
    assert long_sentences(" ".join(["word"] * 30) + ". " + " ".join(["Word"] * 30) + ".") == []
    assert long_sentences(f"```bash\n{long}\n```\n| {long} |\n# {long}\n") == []
    assert long_sentences(f"<!-- x:start (generated) -->\n{long}\n<!-- x:end -->\n") == []
    assert [n for _, n, _ in long_sentences(f"- {' '.join(['a'] * 40)}\n  {' '.join(['b'] * 30)}.\n")] == [70]
    assert len(sentences("It ran, e.g. twice. Then it stopped; (p 0.2) and `a. B` held.")) == 2


def test_the_readme_states_no_measured_timing_or_count(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    timings = re.findall(r"\b\d[\d,.]*\s*(?:s|sec|seconds?|min|minutes?|h|hours?)\b", prose)
    counts = re.findall(r"\b\d[\d,]*\s+(?:tests?|passed|skipped|failed)\b", prose)
    commits = re.findall(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b", prose)
    assert not (timings or counts or commits), (timings, counts, commits, "README: measured numbers belong in "
                                                "docs/measured.md (fix: 'a few minutes', linking it)")
    assert "a few minutes" in prose and "docs/measured.md" in prose


def _opening(page: Path) -> str:
    """What a page says before its first section heading."""
    return page.read_text(encoding="utf-8").split("\n## ", 1)[0]


def test_each_task_page_opens_with_what_the_reader_does_with_it(repo_root: Path) -> None:
    docs = repo_root / "docs"
    assert "| command | what it shows | time | output folder |" in _opening(docs / "running.md")
    compare = _opening(docs / "compare.md")
    assert "| verdict | what it means | what to do next |" in compare
    from twinrun.core.compare.verdict import VERDICTS

    assert all(f"| **{v}** |" in compare for v in VERDICTS)
    findings = (docs / "findings.md").read_text(encoding="utf-8")
    opening = _opening(docs / "findings.md")
    assert "**The answer:" in opening.split("\n\n")[1]  # the takeaway, in the page's first paragraph
    assert "| passes |" in opening
    # provenance at the end, before only the generated block (analyse.py findings --write keeps that last)
    assert re.findall(r"^## (.+)$", findings, re.M)[-2].startswith("Provenance")
    assert re.findall(r"^## (.+)$", findings, re.M)[-1] == "The generated block"


def test_the_glossary_is_the_reports_list_and_the_readme_links_it(repo_root: Path) -> None:
    from twinrun.core.compare.glossary import TERMS, render_markdown

    text = (repo_root / "docs" / "glossary.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- glossary:start[^>]*-->\n(.*?)<!-- glossary:end -->", text, re.S)
    assert block, "docs/glossary.md: the generated block's markers are missing"
    assert block.group(1).strip() == "\n".join(render_markdown()[2:]).strip(), (
        "docs/glossary.md is stale (fix: render twinrun.core.compare.glossary.render_markdown into its block)")
    names = {t for t, _ in TERMS}
    assert {"arm", "stream", "cell", "lift", "block", "look", "seed pairing"} <= names
    assert "(docs/glossary.md)" in (repo_root / "README.md").read_text(encoding="utf-8")
