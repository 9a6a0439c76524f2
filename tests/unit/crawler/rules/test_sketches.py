"""A rule check's direct comparison is stricter than the detector's verification: a check
vouches for pages nobody will fetch, so a pair the sketch accepts by a hair is no evidence."""

from __future__ import annotations

from crawler.rules.sketches import CHECK_SKETCH, MemorySketchStore, PageComparer
from dedup_worker.core.sketch import DEFAULT_SKETCH, verify

WORDS = [f"w{i}" for i in range(600)]


def edited(changes: int) -> str:
    """The 600 distinct words with ``changes`` of them replaced, 50 apart: each replaced word
    takes 4 of the 597 word 4-shingles away, so J = (597 - 4c) / (597 + 4c)."""
    words = list(WORDS)
    for j in range(changes):
        words[25 + 50 * j] = f"x{j}"
    return " ".join(words)


def test_the_check_threshold_is_two_standard_errors_above_the_detectors() -> None:
    error = DEFAULT_SKETCH.standard_error(DEFAULT_SKETCH.threshold)
    assert CHECK_SKETCH.threshold == round(DEFAULT_SKETCH.threshold + 2 * error, 3) == 0.922
    assert CHECK_SKETCH.version_tag == DEFAULT_SKETCH.version_tag  # the same stored sketches


def test_a_pair_just_below_the_threshold_that_verification_accepts_is_no_clean_check() -> None:
    comparer = PageComparer(MemorySketchStore())
    comparer.remember("http://a.test/x", " ".join(WORDS))
    comparer.remember("http://a.test/near", edited(8))  # J 0.898
    comparer.remember("http://a.test/close", edited(4))  # J 0.948
    near = comparer._sketches(["http://a.test/x", "http://a.test/near"])
    assert near[0] is not None and near[1] is not None
    accepted, estimate = verify(near[0], near[1], DEFAULT_SKETCH)
    assert accepted and DEFAULT_SKETCH.threshold <= estimate < CHECK_SKETCH.threshold
    assert comparer.resembles("http://a.test/x", "http://a.test/near") is False
    assert comparer.resembles("http://a.test/x", "http://a.test/close") is True


def test_a_pages_length_is_known_from_its_sketch_without_a_round_trip() -> None:
    """The shingle count in a sketch's header tells a short page (``crawler.rules.short_pages``);
    a sketch another process stored is known here once a comparison fetched it."""
    store = MemorySketchStore()
    other = PageComparer(store)
    other.remember("http://a.test/long", " ".join(WORDS))  # 600 words: 597 shingles
    other.flush()
    comparer = PageComparer(store)
    comparer.remember("http://a.test/short", " ".join(WORDS[:120]))
    assert comparer.shingle_count("http://a.test/short") == 117
    assert comparer.shingle_count("http://a.test/long") is None  # not fetched here yet
    assert comparer.resembles("http://a.test/short", "http://a.test/long") is False
    assert comparer.shingle_count("http://a.test/long") == 597
