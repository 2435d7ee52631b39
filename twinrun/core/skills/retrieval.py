"""BM25 retrieval over the skill repo, with bm25s.

The executor sees the top-k skills for its task text (paper: BM25, k=5). Two properties matter more than speed:

* **Current after every operation.** Each insert/update/delete tokenizes and counts only the skill it touches
  (O(skill)); the vocabulary and per-document term counts are kept incrementally. BM25 weights depend on
  corpus-wide statistics (document frequencies, mean length), so any change moves every score; bm25s's eager
  score matrix is therefore reassembled, vectorised, from the cached counts on the first search after a change
  (no re-tokenization or re-counting; numpy over all postings).
* **Deterministic.** Documents are ordered by key (skill name) in the matrix and results are sorted by
  (score descending, key ascending), so ties always break by name, whatever bm25s's top-k selection would do.

Skills that share no term with the query (score 0) are not returned: a repo of 3 unrelated skills yields
fewer than k results rather than padding the executor's prompt with noise.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_FIELDS = ("name", "description", "body")
RETRIEVAL_FIELDS = frozenset(DEFAULT_FIELDS)

# bm25s's default token pattern (words of 2+ word characters); hyphens split skill names into words
TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")


@functools.cache
def english_stopwords() -> frozenset[str]:
    """bm25s's English stopword list (imported lazily: `import bm25s` pulls in scipy.sparse)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def tokenize(text: str, stopwords: frozenset[str] | None = None) -> list[str]:
    """Lowercased words of 2+ characters without English stopwords (bm25s's list unless given)."""
    stop = english_stopwords() if stopwords is None else stopwords
    return [t for t in TOKEN_RE.findall(text.lower()) if t not in stop]


def skill_document(skill: Any, fields: Iterable[str] = DEFAULT_FIELDS) -> str:
    """The text BM25 indexes for a skill: the chosen fields joined by newlines."""
    parts = []
    for f in fields:
        if f not in RETRIEVAL_FIELDS:
            raise ValueError(f"retrieval.fields: {f!r} is not a skill field (fix: name, description or body)")
        parts.append(getattr(skill, f))
    return "\n".join(parts)


@dataclass(frozen=True)
class _Doc:
    """One document's cached term statistics (computed once, at upsert)."""

    term_ids: np.ndarray  # [u] int32, unique vocabulary ids
    tf: np.ndarray  # [u] float32, term frequency of each
    length: int  # number of tokens (with repeats)


class BM25Index:
    """BM25 (bm25s's scoring, Lucene variant by default, k1=1.5, b=0.75) over documents keyed by a string.

    ``upsert``/``remove`` are O(document): they tokenize, map tokens to vocabulary ids and count them, once.
    ``search`` reassembles bm25s's eager score matrix from those cached counts only when something changed
    since the last search: a vectorised O(postings) pass that uses bm25s's own term-frequency and idf scorers
    and CSC builder (tests check it equals ``bm25s.BM25.index`` on the same corpus), then scores the query with
    ``bm25s.BM25.get_scores_from_ids``.
    """

    METHODS = ("robertson", "lucene", "atire")  # bm25l / bm25+ need a non-occurrence term we do not build

    def __init__(
        self, *, k1: float = 1.5, b: float = 0.75, method: str = "lucene", stopwords: frozenset[str] | None = None
    ):
        if method not in self.METHODS:
            raise ValueError(f"BM25 method: {method!r} is not supported (fix: one of {', '.join(self.METHODS)})")
        self.k1 = k1
        self.b = b
        self.method = method
        self.stopwords = english_stopwords() if stopwords is None else stopwords
        self._vocab: dict[str, int] = {}  # grows only: ids stay valid for cached documents
        self._docs: dict[str, _Doc] = {}
        self._model: Any = None  # a bm25s.BM25 whose matrix rows are _order
        self._order: list[str] = []
        self._dirty = False

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, key: object) -> bool:
        return key in self._docs

    def copy(self) -> BM25Index:
        """An independent index; cached documents and the built bm25s model are shared (never mutated, only
        replaced) until either side changes."""
        new = BM25Index.__new__(BM25Index)
        new.k1, new.b, new.method, new.stopwords = self.k1, self.b, self.method, self.stopwords
        new._vocab = dict(self._vocab)
        new._docs = dict(self._docs)
        new._model = self._model
        new._order = self._order
        new._dirty = self._dirty
        return new

    def upsert(self, key: str, text: str) -> None:
        vocab = self._vocab
        ids = [vocab.setdefault(t, len(vocab)) for t in tokenize(text, self.stopwords)]
        term_ids, tf = np.unique(np.asarray(ids, dtype=np.int32), return_counts=True)
        self._docs[key] = _Doc(term_ids.astype(np.int32), tf.astype(np.float32), len(ids))
        self._dirty = True

    def remove(self, key: str) -> None:
        if self._docs.pop(key, None) is not None:
            self._dirty = True

    def _rebuild(self) -> None:
        import bm25s
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

        self._order = sorted(self._docs)
        self._model = None
        self._dirty = False
        if not self._order:
            return
        docs = [self._docs[k] for k in self._order]
        n_docs, n_vocab = len(docs), len(self._vocab)
        lengths = np.array([d.length for d in docs], dtype=np.float64)
        per_doc = np.array([d.term_ids.size for d in docs], dtype=np.int64)
        cols = np.concatenate([d.term_ids for d in docs]) if per_doc.sum() else np.zeros(0, np.int32)
        tf = np.concatenate([d.tf for d in docs]) if per_doc.sum() else np.zeros(0, np.float32)
        rows = np.repeat(np.arange(n_docs, dtype=np.int32), per_doc)
        avg_len = float(lengths.mean())

        df = np.bincount(cols, minlength=n_vocab)
        idf_fn = _select_idf_scorer(self.method)
        idf = np.zeros(n_vocab, dtype=np.float32)
        present = np.flatnonzero(df)
        # bm25s's idf scorers are scalar; few distinct document frequencies exist, so score each once
        distinct, where = np.unique(df[present], return_inverse=True)
        idf[present] = np.array([idf_fn(int(d), N=n_docs) for d in distinct], dtype=np.float32)[where]
        # avg_len == 0 only when no document has a token; then there is no posting to score
        tfc = _select_tfc_scorer(self.method)(
            tf_array=tf, l_d=lengths[rows].astype(np.float32), l_avg=np.float32(avg_len or 1.0), k1=self.k1, b=self.b
        )
        data = (idf[cols] * tfc).astype(np.float32)
        data, indices, indptr = bm25s.BM25._np_csc(data=data, rows=rows, cols=cols, shape=(n_docs, n_vocab))

        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        model.scores = {"data": data.astype(np.float32), "indices": indices, "indptr": indptr, "num_docs": n_docs}
        model.vocab_dict = dict(self._vocab)
        model.nonoccurrence_array = None
        self._model = model

    def scores(self, query: str) -> tuple[list[str], np.ndarray]:
        """(keys in name order, BM25 score of each for `query`) — shape [n_docs]."""
        if self._dirty:
            self._rebuild()
        vocab = self._vocab
        ids = [vocab[t] for t in tokenize(query, self.stopwords) if t in vocab]
        if self._model is None:
            return [], np.zeros(0, dtype=np.float32)
        if not ids:
            return self._order, np.zeros(len(self._order), dtype=np.float32)
        return self._order, self._model.get_scores_from_ids(ids)

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        """Top-k (key, score) with score > 0, by score descending then key ascending."""
        if k <= 0:
            return []
        keys, scores = self.scores(query)
        cand = np.flatnonzero(scores > 0)
        if cand.size == 0:
            return []
        cand_scores = scores[cand]
        if cand.size > k:
            # keep everything tied with the k-th score, then order exactly: O(n) selection + O(c log c) sort
            kth = np.partition(cand_scores, cand.size - k)[cand.size - k]
            keep = cand_scores >= kth
            cand, cand_scores = cand[keep], cand_scores[keep]
        order = np.lexsort((cand, -cand_scores))[:k]  # cand index order == key order
        return [(keys[int(cand[i])], float(cand_scores[i])) for i in order]
