"""Detection quality, exactly: the reference relation, labels, and precision/recall.

The reference: two pages are near-duplicates iff the Jaccard resemblance of their sets of word
4-shingles (of the visible text, tokenised exactly as the fingerprint does) is >= 0.9.
``similar_pairs`` finds every such pair without comparing all pairs, and without missing one:
with tokens ordered rarest first, two sets of resemblance >= t share a token among the first
|x| - ceil(t |x|) + 1 of each (the prefix filter of Chaudhuri et al. 2006 / Bayardo et al.
2007), and their sizes are within a factor t (the length filter). Candidates are then compared
element by element.

Scores come per pair and per page. A page is positive iff an *earlier* page (corpus order) is
its near-duplicate, and predicted iff the detector matches it to an earlier page: exactly the
engine's rule, where a page is suppressed only as a copy of an earlier one.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dedup_worker.core.sketch import shingle_hashes
from neardup.evaluation import _quality_kernel as qk

logger = logging.getLogger(__name__)

#: Resemblance at or above which a pair is a near-duplicate.
THRESHOLD = 0.9
#: Hamming distances of the per-distance curves (Manku et al., Figure 1).
DISTANCES = tuple(range(13))

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ShingleSets:
    """Every page's distinct word 4-shingle hashes, sorted, concatenated: page d is
    ``values[offsets[d]:offsets[d + 1]]``."""

    values: U64Array
    offsets: I64Array

    @property
    def sizes(self) -> I64Array:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return self.offsets.size - 1


def shingle_sets(texts: Sequence[str]) -> ShingleSets:
    """The reference's shingle sets of the given texts (64-bit hashes of word 4-shingles)."""
    values, new_offsets = qk.sorted_sets(*shingle_hashes(texts))
    return ShingleSets(values, new_offsets)


def intersections(sets: ShingleSets, left: I64Array, right: I64Array) -> I64Array:
    """How many shingles each pair of pages shares."""
    return np.asarray(qk.intersections(sets.values, sets.offsets, left, right), dtype=np.int64)


def jaccard(sets: ShingleSets, left: I64Array, right: I64Array) -> F64Array:
    """Exact resemblance of each pair; two empty pages resemble each other fully."""
    same = intersections(sets, left, right).astype(np.float64)
    union = sets.sizes[left] + sets.sizes[right] - same
    with np.errstate(invalid="ignore", divide="ignore"):
        result = np.where(union > 0, same / np.maximum(union, 1), 1.0)
    return np.asarray(result, dtype=np.float64)


@dataclass(frozen=True)
class Pairs:
    """Pairs of pages (left < right) with one value each (resemblance, distance, estimate)."""

    left: I64Array
    right: I64Array
    value: F64Array

    def __len__(self) -> int:
        return int(self.left.size)

    def where(self, keep: BoolArray) -> Pairs:
        return Pairs(self.left[keep], self.right[keep], self.value[keep])


def similar_pairs(sets: ShingleSets, threshold: float = THRESHOLD) -> Pairs:
    """Every pair of pages with resemblance >= threshold (exact: prefix and length filters)."""
    token, doc = _prefix_tokens(sets, threshold)
    left, right = qk.posting_pairs(token, doc, sets.sizes, threshold)
    left, right = _unique_pairs(left, right, len(sets))
    similarity = jaccard(sets, left, right)
    keep = similarity >= threshold - 1e-12
    empty = _empty_pairs(sets)
    found = Pairs(left[keep], right[keep], similarity[keep])
    logger.debug("%d candidate pairs, %d similar", left.size, int(keep.sum()))
    return _merge(found, empty, len(sets))


def _prefix_tokens(sets: ShingleSets, threshold: float) -> tuple[I64Array, I64Array]:
    """(token rank, page) for the prefix of every page, sorted by token rank."""
    unique, inverse, counts = np.unique(sets.values, return_inverse=True, return_counts=True)
    order = np.lexsort((unique, counts))  # rarest first; ties by hash, so deterministic
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    ranks = rank[inverse]
    sizes = sets.sizes
    pages = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    ranks_sorted = ranks[np.lexsort((ranks, pages))]
    position = np.arange(ranks.size) - np.repeat(sets.offsets[:-1], sizes)
    prefix = np.array([s - math.ceil(threshold * s - 1e-9) + 1 for s in sizes.tolist()])
    keep = position < np.repeat(prefix, sizes)
    token, doc = ranks_sorted[keep], pages[keep]
    by_token = np.lexsort((doc, token))
    return token[by_token], doc[by_token]


def _empty_pairs(sets: ShingleSets) -> Pairs:
    """Pages without a single word are all alike (resemblance 1): the prefix filter misses them."""
    empty = np.flatnonzero(sets.sizes == 0)
    left, right = np.triu_indices(empty.size, k=1)
    return Pairs(empty[left], empty[right], np.ones(left.size))


def _unique_pairs(left: I64Array, right: I64Array, n: int) -> tuple[I64Array, I64Array]:
    keys = np.unique(pair_keys(left, right, n))
    return keys // max(n, 1), keys % max(n, 1)


def _merge(a: Pairs, b: Pairs, n: int) -> Pairs:
    left = np.concatenate([a.left, b.left])
    right = np.concatenate([a.right, b.right])
    order = np.argsort(pair_keys(left, right, n), kind="stable")
    return Pairs(left[order], right[order], np.concatenate([a.value, b.value])[order])


def pair_keys(left: I64Array, right: I64Array, n: int) -> I64Array:
    """One int64 per pair (left < right), for set operations on pairs."""
    return np.asarray(left, dtype=np.int64) * max(n, 1) + np.asarray(right, dtype=np.int64)


# ---- labels and scores -------------------------------------------------------------------


@dataclass(frozen=True)
class Labels:
    """The positive pairs (sorted keys) and positive pages of a corpus of ``n`` pages."""

    n: int
    positive_keys: I64Array
    positive_pages: BoolArray

    @property
    def positive_pairs(self) -> int:
        return int(self.positive_keys.size)


def make_labels(
    n: int, reference: Pairs, overrides: Iterable[tuple[int, int, bool]] = ()
) -> Labels:
    """Labels from the reference, where a labelled pair (i, j, is_duplicate) overrides it."""
    keys = set(pair_keys(reference.left, reference.right, n).tolist())
    for i, j, positive in overrides:
        key = int(pair_keys(np.array([min(i, j)]), np.array([max(i, j)]), n)[0])
        if positive:
            keys.add(key)
        else:
            keys.discard(key)
    sorted_keys = np.array(sorted(keys), dtype=np.int64)
    pages = np.zeros(n, dtype=bool)
    pages[sorted_keys % max(n, 1)] = True  # the later page of each positive pair
    return Labels(n, sorted_keys, pages)


@dataclass(frozen=True)
class Score:
    """Precision and recall of a set of predictions against the labels."""

    predicted: int
    true_positive: int
    positives: int

    @property
    def precision(self) -> float:
        return self.true_positive / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.true_positive / self.positives if self.positives else 1.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "predicted": self.predicted,
            "true_positive": self.true_positive,
            "positives": self.positives,
        }


def score_pairs(left: I64Array, right: I64Array, labels: Labels) -> Score:
    """Pair-level score of the predicted pairs (left < right, no repeats)."""
    hits = np.isin(pair_keys(left, right, labels.n), labels.positive_keys)
    return Score(int(left.size), int(hits.sum()), labels.positive_pairs)


def score_pages(left: I64Array, right: I64Array, labels: Labels) -> Score:
    """Page-level score: a page is predicted iff it is the later page of a predicted pair."""
    predicted = np.zeros(labels.n, dtype=bool)
    predicted[right] = True
    hits = predicted & labels.positive_pages
    return Score(int(predicted.sum()), int(hits.sum()), int(labels.positive_pages.sum()))


def score_pages_by_group(
    left: I64Array, right: I64Array, labels: Labels, groups: Sequence[str]
) -> dict[str, Score]:
    """``score_pages`` within each group of pages (``groups[i]`` names page i's: its source,
    host or family), so one can see where a detector loses precision or recall."""
    predicted = np.zeros(labels.n, dtype=bool)
    predicted[right] = True
    names = np.asarray(groups, dtype=object)
    scores: dict[str, Score] = {}
    for name in sorted(set(groups)):
        mine = names == name
        scores[name] = Score(
            int((predicted & mine).sum()),
            int((predicted & labels.positive_pages & mine).sum()),
            int((labels.positive_pages & mine).sum()),
        )
    return scores


def curve(
    pairs: Pairs, accepted: BoolArray, labels: Labels, distances: Sequence[int] = DISTANCES
) -> list[dict[str, object]]:
    """Pair and page scores when matching at Hamming distance <= k, for each k.

    ``pairs.value`` holds the distances; ``accepted`` says which pairs the verifier keeps
    (all of them for a bare simhash).
    """
    rows: list[dict[str, object]] = []
    for k in distances:
        keep = (pairs.value <= k) & accepted
        rows.append(
            {
                "k": k,
                "pair": score_pairs(pairs.left[keep], pairs.right[keep], labels).as_dict(),
                "page": score_pages(pairs.left[keep], pairs.right[keep], labels).as_dict(),
            }
        )
    return rows


def hamming_pairs(fingerprints: U64Array, limit: int = max(DISTANCES)) -> Pairs:
    """Every pair of fingerprints within ``limit`` bits (exhaustive scan)."""
    left, right, dist = qk.hamming_pairs(np.ascontiguousarray(fingerprints, np.uint64), limit)
    return Pairs(left, right, dist.astype(np.float64))


def resemblance_histogram(
    values: F64Array, edges: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0)
) -> dict[str, int]:
    """Counts of pair resemblances per bin (the last bin holds J == 1 exactly)."""
    out: dict[str, int] = {}
    for low, high in itertools.pairwise(edges):
        out[f"[{low},{high})"] = int(((values >= low) & (values < high)).sum())
    out["1.0"] = int((values >= 1.0).sum())
    return out
