"""The exact reference (prefix-filter join) against brute force, and the scoring rules."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.core.simhash import Document
from dedup_worker.core.text import words
from dedup_worker.errors import ConfigError
from neardup.evaluation import quality
from neardup.evaluation.detectors import parse_spec, run


def _shingles(text: str) -> set[tuple[str, ...]]:
    """The reference in plain Python: sets of word 4-shingles (one shingle if fewer words)."""
    tokens = words(text)
    if len(tokens) < 4:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i : i + 4]) for i in range(len(tokens) - 3)}


def _brute(texts: list[str], threshold: float) -> list[tuple[int, int, float]]:
    sets = [_shingles(t) for t in texts]
    out = []
    for i, j in itertools.combinations(range(len(texts)), 2):
        union = sets[i] | sets[j]
        value = len(sets[i] & sets[j]) / len(union) if union else 1.0
        if value >= threshold:
            out.append((i, j, value))
    return out


def _corpus(seed: int, pages: int) -> list[str]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)] + ["Straße", "café", "東京"]
    texts: list[str] = []
    for _ in range(pages):
        if texts and rng.random() < 0.5:
            base = rng.choice(texts).split()
            for _ in range(rng.randrange(3)):
                if base:
                    base[rng.randrange(len(base))] = rng.choice(vocab)
            texts.append(" ".join(base))
        else:
            texts.append(" ".join(rng.choice(vocab) for _ in range(rng.randrange(0, 50))))
    return texts


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([0.9, 0.75, 0.5]))
def test_similar_pairs_equal_brute_force(seed: int, threshold: float) -> None:
    texts = _corpus(seed, 30)
    found = quality.similar_pairs(quality.shingle_sets(texts), threshold)
    expected = _brute(texts, threshold)
    assert list(zip(found.left.tolist(), found.right.tolist(), strict=True)) == [
        (i, j) for i, j, _ in expected
    ]
    assert found.value.tolist() == pytest.approx([v for *_, v in expected])


def test_scores_per_pair_and_per_page() -> None:
    reference = quality.Pairs(np.array([0, 0, 2]), np.array([1, 3, 3]), np.ones(3))
    labels = quality.make_labels(5, reference, overrides=[(3, 2, False), (4, 1, True)])
    assert labels.positive_pairs == 3  # (0,1), (0,3), (1,4)
    assert labels.positive_pages.tolist() == [False, True, False, True, True]
    left, right = np.array([0, 2, 1]), np.array([1, 3, 2])
    pair = quality.score_pairs(left, right, labels)
    assert (pair.predicted, pair.true_positive, pair.positives) == (3, 1, 3)
    page = quality.score_pages(left, right, labels)  # pages 1, 3, 2 predicted; 1 and 3 right
    assert (page.predicted, page.true_positive, page.positives) == (3, 2, 3)
    assert page.precision == pytest.approx(2 / 3) and page.recall == pytest.approx(2 / 3)


def test_curve_recall_grows_with_k() -> None:
    texts = _corpus(11, 60)
    documents = [Document(t) for t in texts]
    labels = quality.make_labels(len(texts), quality.similar_pairs(quality.shingle_sets(texts)))
    result = run(parse_spec("simhash:k=3"), documents)
    rows = quality.curve(result.pairs, result.accepted, labels)
    recalls = [row["pair"]["recall"] for row in rows]  # type: ignore[index]
    assert [row["k"] for row in rows] == list(range(13))
    assert recalls == sorted(recalls)


def test_parse_spec() -> None:
    spec = parse_spec("hybrid:title_weight=0,k=5,bins=256,bits=4,threshold=0.88")
    assert (spec.kind, spec.k, spec.features.title_weight) == ("hybrid", 5, 0)
    assert (spec.sketch.log2_bins, spec.sketch.bits, spec.sketch.threshold) == (8, 4, 0.88)
    assert spec.bytes_per_page == 8 + 4 + 128
    assert parse_spec("minhash:groups=4,size=3,match=1").supers.permutations == 12
    for bad in ("bogus", "simhash:nope=1", "simhash:k=x", "simhash:shingle=0"):
        with pytest.raises(ConfigError):
            parse_spec(bad)
