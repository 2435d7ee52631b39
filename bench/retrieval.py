"""Retrieval benchmark: twinrun's skill retrieval (bm25s) vs rank_bm25 on the same corpus, in the same run.

    .venv/bin/python bench/retrieval.py                 # 10,000 synthetic skills, 1,000 queries
    .venv/bin/python bench/retrieval.py --skills 2000 --queries 200

Prints ms/query for each and the ratio (rank_bm25 / twinrun: how many times faster twinrun is), the cost of
building each index, and the cost of an operation followed by a retrieval (the curation loop's pattern: the
repo changes after every position). Both sides tokenise with twinrun's tokenizer, index the same fields
(name, description, body) and return the top 5. They use different BM25 variants (bm25s Lucene vs rank_bm25
Okapi), so the top-5 overlap is printed as a sanity check, not expected to be 100%.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from twinrun.core.skills.retrieval import skill_document, tokenize
from twinrun.core.skills.repository import Skill, SkillRepo

ALFWORLD_WORDS = (
    "apple egg mug cup plate bowl knife fork spoon pan pot kettle lettuce tomato potato bread book pen pencil "
    "cd cellphone laptop pillow towel soapbar candle vase statue watch keychain creditcard alarmclock desklamp "
    "floorlamp microwave fridge sinkbasin stoveburner countertop cabinet drawer shelf sidetable diningtable "
    "coffeetable desk bed sofa armchair garbagecan toilet bathtubbasin dresser safe heat cool clean put take "
    "find examine look open close go use toggle slice place two some hot cold clean"
).split()


def synthetic_words(rng: np.random.Generator, n: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set(ALFWORLD_WORDS)
    while len(words) < n:
        words.add("".join(rng.choice(letters, size=int(rng.integers(3, 10)))))
    return sorted(words)


def zipf_sampler(rng: np.random.Generator, vocab: list[str]):
    ranks = np.arange(1, len(vocab) + 1)
    p = 1.0 / ranks**1.1
    p /= p.sum()
    order = rng.permutation(len(vocab))

    def sample(k: int) -> list[str]:
        return [vocab[order[i]] for i in rng.choice(len(vocab), size=k, p=p)]

    return sample


def make_corpus(n_skills: int, n_queries: int, seed: int) -> tuple[list[Skill], list[str]]:
    rng = np.random.default_rng(seed)
    vocab = synthetic_words(rng, 5000)
    words = zipf_sampler(rng, vocab)
    skills = []
    for i in range(n_skills):
        name = "-".join(words(int(rng.integers(2, 4)))).lower()[:55] + f"-{i}"
        description = "Use when " + " ".join(words(int(rng.integers(10, 20)))) + "."
        steps = [f"{j + 1}. " + " ".join(words(int(rng.integers(5, 12)))) for j in range(int(rng.integers(4, 10)))]
        skills.append(Skill(name, description, "# Workflow\n" + "\n".join(steps) + "\n"))
    queries = ["Your task is to: " + " ".join(words(int(rng.integers(4, 10)))) for _ in range(n_queries)]
    return skills, queries


def ms(seconds: float, n: int) -> float:
    return 1000.0 * seconds / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skills", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1_000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--op-cycles", type=int, default=20, help="operation+retrieval cycles timed on the full corpus")
    args = ap.parse_args()

    import bm25s  # noqa: F401  (imported before any timing: the import itself is not what we measure)
    from rank_bm25 import BM25Okapi

    skills, queries = make_corpus(args.skills, args.queries, args.seed)
    print(f"corpus: {len(skills)} skills, {len(queries)} queries, k={args.k}, seed={args.seed}")

    # --- build
    t = time.perf_counter()
    repo = SkillRepo(max_skills=len(skills) + args.op_cycles + 10, top_k=args.k)
    for s in skills:
        repo.add(s)
    repo.retrieve("warm up", args.k)  # the bm25s matrix is built on the first search
    t_build_twin = time.perf_counter() - t

    t = time.perf_counter()
    docs = [tokenize(skill_document(s)) for s in skills]
    bm = BM25Okapi(docs)
    t_build_rank = time.perf_counter() - t

    # --- queries (both sides tokenise the query inside the timed loop)
    t = time.perf_counter()
    twin_top = [[s.name for s in repo.retrieve(q, args.k)] for q in queries]
    t_twin = time.perf_counter() - t

    names = [s.name for s in skills]
    t = time.perf_counter()
    rank_top = []
    for q in queries:
        scores = bm.get_scores(tokenize(q))
        rank_top.append([names[i] for i in np.argsort(scores)[::-1][: args.k]])
    t_rank = time.perf_counter() - t

    overlap = statistics.mean(len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(twin_top, rank_top) if a)
    q_twin, q_rank = ms(t_twin, len(queries)), ms(t_rank, len(queries))
    print(f"build    twinrun (bm25s) {t_build_twin * 1000:9.1f} ms   rank_bm25 {t_build_rank * 1000:9.1f} ms")
    print(f"query    twinrun (bm25s) {q_twin:9.3f} ms/query   rank_bm25 {q_rank:9.3f} ms/query")
    print(f"ratio    rank_bm25 / twinrun = {q_rank / q_twin:.1f}x   (top-{args.k} overlap {overlap:.2f})")

    # --- the curation pattern: one operation, then one retrieval, on the full corpus
    rng = np.random.default_rng(args.seed + 1)
    t = time.perf_counter()
    for i in range(args.op_cycles):
        name = f"new-skill-{i}"
        r = repo.new_skill_insert(name, f"---\nname: {name}\ndescription: Use when heating an egg {i}.\n---\n- a\n- b\n")
        assert r.ok, r.error
        repo.retrieve(queries[int(rng.integers(len(queries)))], args.k)
    t_cycle_twin = time.perf_counter() - t
    t = time.perf_counter()
    n_rank_cycles = max(1, min(args.op_cycles, 5))  # rank_bm25 has no update: rebuild from tokenised docs
    for i in range(n_rank_cycles):
        docs.append(tokenize(f"new-skill-{i} Use when heating an egg {i}. - a - b"))
        bm = BM25Okapi(docs)
        bm.get_scores(tokenize(queries[int(rng.integers(len(queries)))]))
    t_cycle_rank = time.perf_counter() - t
    c_twin, c_rank = ms(t_cycle_twin, args.op_cycles), ms(t_cycle_rank, n_rank_cycles)
    print(f"op+query twinrun (bm25s) {c_twin:9.1f} ms/cycle   rank_bm25 {c_rank:9.1f} ms/cycle (rebuild)   ratio {c_rank / c_twin:.1f}x")

    # --- the same cycle at the spec's repo bound (200 skills: what a curation rollout actually holds)
    small = SkillRepo(max_skills=400, top_k=args.k)
    for s in skills[:200]:
        small.add(s)
    t = time.perf_counter()
    n = 200
    for i in range(n):
        name = f"cyc-{i}"
        small.new_skill_insert(name, f"---\nname: {name}\ndescription: Use when cooling a mug {i}.\n---\n- a\n- b\n")
        small.retrieve(queries[i % len(queries)], args.k)
    c_small = ms(time.perf_counter() - t, n)
    small_docs = [tokenize(skill_document(s)) for s in skills[:200]]
    t = time.perf_counter()
    for i in range(n):
        small_docs.append(tokenize(f"cyc-{i} Use when cooling a mug {i}. - a - b"))
        BM25Okapi(small_docs).get_scores(tokenize(queries[i % len(queries)]))
    c_small_rank = ms(time.perf_counter() - t, n)
    print(
        f"op+query at 200-400 skills: twinrun {c_small:7.2f} ms/cycle   rank_bm25 {c_small_rank:7.2f} ms/cycle   "
        f"ratio {c_small_rank / c_small:.1f}x"
    )


if __name__ == "__main__":
    main()
