"""BM25 retrieval: hand-computed scores, ranking on a hand-built corpus, ties, incremental updates, spec fields."""

from __future__ import annotations

import math

import pytest

from twinrun.core.skills.retrieval import BM25Index, skill_document, tokenize
from twinrun.core.skills.repository import Skill, SkillRepo
from twinrun.core.spec import RetrievalSpec, SkillsSpec


def md(name: str, description: str, body: str = "- step\n- step\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}"


def test_tokenize_lowercases_splits_hyphens_and_drops_stopwords() -> None:
    assert tokenize("Heat-Then-Place: put the Apple in a microwave, x 2") == ["heat", "place", "put", "apple", "microwave"]


def test_scores_match_the_lucene_formula_by_hand() -> None:
    # N=3, avgdl=3, k1=1.5, b=0.75; idf = ln(1 + (N - df + .5)/(df + .5)); tf part = tf/(tf + k1(1 - b + b dl/avgdl))
    ix = BM25Index(stopwords=frozenset())
    ix.upsert("d1", "apple apple banana")
    ix.upsert("d2", "banana cherry")
    ix.upsert("d3", "cherry cherry cherry date")
    idf1, idf2 = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5)
    assert ix.search("apple", 5) == [("d1", pytest.approx(idf1 * 2 / (2 + 1.5), rel=1e-6))]  # 0.56047
    got = ix.search("banana cherry", 5)
    assert [k for k, _ in got] == ["d2", "d3", "d1"]
    d2 = 2 * idf2 * 1 / (1 + 1.5 * (0.25 + 0.75 * 2 / 3))
    d3 = idf2 * 3 / (3 + 1.5 * (0.25 + 0.75 * 4 / 3))
    d1 = idf2 * 1 / (1 + 1.5)
    assert [s for _, s in got] == pytest.approx([d2, d3, d1], rel=1e-6)  # 0.44236, 0.28923, 0.18800
    assert ix.search("durian", 5) == []  # no shared term: nothing returned


@pytest.fixture
def corpus() -> SkillRepo:
    repo = SkillRepo(top_k=3)
    for name, desc, body in [
        ("heat-then-place", "Heat an object with the microwave, then put it somewhere.", "- take it\n- heat it with microwave\n"),
        ("cool-then-place", "Cool an object with the fridge, then put it somewhere.", "- take it\n- cool it with fridge\n"),
        ("clean-then-place", "Clean an object in the sinkbasin, then put it somewhere.", "- take it\n- clean it with sinkbasin\n"),
        ("examine-in-light", "Look at an object under the desklamp.", "- take it\n- use desklamp\n"),
        ("find-two-objects", "Put two objects of one type in a receptacle.", "- find first\n- find second\n"),
    ]:
        assert repo.new_skill_insert(name, md(name, desc, body)).ok
    return repo


@pytest.mark.parametrize(
    "query,top",
    [
        ("heat some egg and put it in garbagecan", "heat-then-place"),
        ("put a cool mug in cabinet", "cool-then-place"),
        ("clean the knife and put it in drawer", "clean-then-place"),
        ("examine the book with the desklamp", "examine-in-light"),
        ("find two pillow and put them in sofa", "find-two-objects"),
    ],
)
def test_ranking_on_a_hand_built_corpus(corpus: SkillRepo, query: str, top: str) -> None:
    got = corpus.retrieve(query)
    assert got[0].name == top
    assert len(got) <= 3  # k from the repo (spec.retrieval.top_k)


def test_ties_break_by_name_whatever_the_insertion_order() -> None:
    for order in (["b-skill", "c-skill", "a-skill"], ["c-skill", "a-skill", "b-skill"]):
        repo = SkillRepo()
        for n in order:
            assert repo.new_skill_insert(n, md(n, "Same words here.", "- identical body\n- identical body\n")).ok
        # names differ, so give them equal-length, term-free names: the skill names tokenise to 'skill' each
        assert [s.name for s in repo.retrieve("identical words", 2)] == ["a-skill", "b-skill"]
        assert [s.name for s in repo.retrieve("identical words", 10)] == ["a-skill", "b-skill", "c-skill"]


def test_index_is_current_after_every_operation(corpus: SkillRepo) -> None:
    assert corpus.new_skill_insert("slice-food", md("slice-food", "Slice bread with a knife.")).ok
    assert corpus.retrieve("slice the bread", 1)[0].name == "slice-food"
    assert corpus.skill_update("slice-food", new_content=md("slice-food", "Toast bread in the toaster.")).ok
    assert all(s.name != "slice-food" for s in corpus.retrieve("knife"))  # its old text is gone
    assert corpus.retrieve("toaster", 1)[0].name == "slice-food"
    assert corpus.skill_update("slice-food", new_name="toast-bread").ok
    assert [s.name for s in corpus.retrieve("toaster")] == ["toast-bread"]
    assert corpus.skill_delete("toast-bread").ok
    assert corpus.retrieve("toaster") == []
    # a failed op leaves retrieval as it was
    before = [s.name for s in corpus.retrieve("heat microwave")]
    assert not corpus.new_skill_insert("heat-then-place", md("heat-then-place", "microwave microwave")).ok
    assert [s.name for s in corpus.retrieve("heat microwave")] == before


def test_k_and_fields_come_from_the_spec() -> None:
    repo = SkillRepo.from_spec(SkillsSpec(), RetrievalSpec(top_k=1, fields=["name"]))
    assert repo.new_skill_insert("heat-object", md("heat-object", "About cooling.", "- fridge\n- fridge\n")).ok
    assert repo.new_skill_insert("cool-object", md("cool-object", "About heating.", "- microwave\n- microwave\n")).ok
    assert [s.name for s in repo.retrieve("heat")] == ["heat-object"]  # only names are indexed
    assert repo.retrieve("microwave") == []
    assert len(repo.retrieve("object")) == 1
    assert len(repo.retrieve("object", k=5)) == 2
    assert repo.retrieve("object", k=0) == []
    body_only = SkillRepo.from_spec(SkillsSpec(), RetrievalSpec(fields=["body"]))
    assert body_only.new_skill_insert("heat-object", md("heat-object", "About cooling.", "- fridge\n- fridge\n")).ok
    assert body_only.retrieve("heat") == [] and body_only.retrieve("fridge")[0].name == "heat-object"


def test_empty_repo_and_empty_query() -> None:
    repo = SkillRepo()
    assert repo.retrieve("anything") == []
    assert repo.new_skill_insert("a1", md("a1", "Some words.")).ok
    assert repo.retrieve("") == [] and repo.retrieve("the a of") == []


def test_skill_document_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="retrieval.fields"):
        skill_document(Skill("a", "d"), ["title"])


def test_index_copy_is_independent() -> None:
    ix = BM25Index()
    ix.upsert("a1", "alpha beta")
    ix.search("alpha", 1)  # build
    other = ix.copy()
    other.upsert("b1", "alpha alpha alpha")
    other.remove("a1")
    assert [k for k, _ in ix.search("alpha", 5)] == ["a1"]
    assert [k for k, _ in other.search("alpha", 5)] == ["b1"]
    assert len(ix) == 1 and "b1" not in ix


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_incremental_matrix_equals_bm25s_own_index(method: str) -> None:
    """The matrix reassembled from cached counts is what `bm25s.BM25.index` builds from scratch."""
    import bm25s
    import numpy as np

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(60)]
    ix = BM25Index(method=method, stopwords=frozenset())
    texts = {}
    for i in range(80):
        texts[f"d{i:02d}"] = " ".join(rng.choice(words, size=int(rng.integers(0, 30))))
        ix.upsert(f"d{i:02d}", texts[f"d{i:02d}"])
    for i in range(0, 80, 7):  # churn: updates and deletes after a build
        ix.search("w1", 3)
        ix.remove(f"d{i:02d}")
        del texts[f"d{i:02d}"]
        ix.upsert(f"d{i + 1:02d}", "w3 w3 w4")
        texts[f"d{i + 1:02d}"] = "w3 w3 w4"
    keys = sorted(texts)
    ref = bm25s.BM25(method=method)
    ref.index([texts[k].split() for k in keys], show_progress=False)
    for q in ["w1", "w3 w4", "w5 w6 w7 w8", "w59 w0 w0"]:
        order, got = ix.scores(q)
        assert order == keys
        np.testing.assert_allclose(got, ref.get_scores(q.split()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["atire", "robertson", "lucene"])
def test_bm25_k1_b_and_variant_come_from_the_spec(variant: str) -> None:
    """retrieval.bm25 reaches the index: scores equal each variant's formula by hand with k1=1.2, b=0.5 (not the
    defaults 1.5/0.75, so a spec that did not reach the index would score differently)."""
    k1, b = 1.2, 0.5
    spec = RetrievalSpec(fields=["body"], bm25={"k1": k1, "b": b, "variant": variant})
    repo = SkillRepo.from_spec(SkillsSpec(), spec)
    bodies = {"d1": "apple apple banana", "d2": "banana cherry", "d3": "cherry cherry cherry date"}
    for name, body in bodies.items():
        assert repo.new_skill_insert(name, md(name, "A test document here.", body)).ok
    n, avgdl = 3, 3.0
    idf = {  # df: apple 1, banana 2
        "atire": lambda df: math.log(n / df),
        "robertson": lambda df: math.log(max(1.0, (n - df + 0.5) / (df + 0.5))),  # floored at 0
        "lucene": lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5)),
    }[variant]

    def tfc(tf: float, dl: int) -> float:
        part = tf / (tf + k1 * (1 - b + b * dl / avgdl))
        return part * (k1 + 1) if variant == "atire" else part

    got = {s.name: score for s, score in repo.retrieve_scored("apple banana", 5)}
    want = {"d1": idf(1) * tfc(2, 3) + idf(2) * tfc(1, 3), "d2": idf(2) * tfc(1, 2)}
    want = {k: v for k, v in want.items() if v > 0}  # robertson: banana (df 2 of 3) has idf 0
    assert got == pytest.approx(want, rel=1e-5)
