"""The words a comparison uses, defined once: the report's "Words used here" section and docs/glossary.md's
generated block are both rendered from TERMS (tests/test_docs_prose.py checks the page)."""

from __future__ import annotations

TERMS: tuple[tuple[str, str], ...] = (
    ("run", "One training of the spec under one framework (TRL or verl) and one seed, with its checkpoints."),
    ("arm", "One thing a sweep plays on the held-out games: a checkpoint of a run (`trl@3`), or the no-memory "
            "baseline. Stream r of an arm is named `trl@3#r{r}`. (docs/running.md also says \"an arm\" for the "
            "spec under test, as in running an arm.)"),
    ("baseline", "The arm without skill memory, played in the same sweep on the same games: every lift is "
                 "measured against it."),
    ("stream", "The held-out games played in order through one skill repository that starts empty. The first "
               "skills a stream writes serve all its later games, so its games are not independent draws. A sweep "
               "plays R streams per arm (`sweep --streams R`), and every test uses the variance between them."),
    ("cell", "One (run, checkpoint) pair: the R streams of that checkpoint together."),
    ("lift", "A checkpoint's success rate minus the baseline's on the same games, in percentage points (pp)."),
    ("block", "Stream r of every arm is played with one plan (game order, executor and curator seeds). That shared "
              "part is a block: it cancels when two checkpoints of a run are compared."),
    ("look", "One of the points at which `sweep --until-decided` tests the verdict while it adds streams. The "
             "threshold at each look is set so that stopping early keeps the error rate stated."),
    ("seed pairing", "Seed i of every framework shares its warm start, its task-group order and the sweep's plans, "
                     "so the frameworks' runs at seed i form a pair. A framework contrast is then tested within "
                     "seed."),
    ("verdict", "The answer for a pair of curves, by a rule stated before looking: shapes agree, shapes differ, "
                "co-move (a shared trend, different ups and downs), or no evidence either way at this sample size."),
)


def render_markdown(level: str = "##") -> list[str]:
    """The terms as a markdown list (one item per term), under a heading of `level`."""
    return [f"{level} Words used here", ""] + [f"- **{term}**: {text}" for term, text in TERMS] + [""]
