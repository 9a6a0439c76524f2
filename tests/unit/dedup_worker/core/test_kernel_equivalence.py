"""The rewritten fingerprint and sketch kernels give exactly what the old ones gave.

Random batches (ASCII and UTF-8 bytes, capitals, digits, punctuation, words longer than 16
bytes, repeated words, empty and one-word segments, titles and headings) go through the live
kernels and through their pre-rewrite copies in ``tests.support.sketch_v1_reference``, under
random feature and sketch configurations; fingerprints and sketch rows must be identical.
"""

from __future__ import annotations

import numpy as np
import pytest

import tests.support.sketch_v1_reference as reference
from dedup_worker.core import _densify_kernel as densify_kernel
from dedup_worker.core import _simhash_kernel as simhash_kernel
from dedup_worker.core import _sketch_kernel as sketch_kernel
from dedup_worker.core.simhash import FeatureConfig, Fingerprinter, margins_for, no_margins

_PUNCTUATION = [b" ", b"  ", b", ", b". ", b"\n", b"-", b"'", b" (", b") ", b"\t"]


_ALPHABET = np.frombuffer(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789\xc3\xa9\xe6\x9d\xb1",
    dtype=np.uint8,
)


def _word(rng: np.random.Generator) -> bytes:
    length = int(rng.choice([1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 30]))
    return rng.choice(_ALPHABET, size=length).tobytes()


def _segment(rng: np.random.Generator, vocabulary: list[bytes]) -> bytes:
    """Words from a small vocabulary (repeats, so the term-frequency cap has work to do)."""
    words = int(rng.choice([0, 1, 2, 3, 4, 5, 50, 300, 1500]))
    chosen = rng.integers(len(vocabulary), size=words).tolist()
    gaps = rng.integers(len(_PUNCTUATION), size=words + 1).tolist()
    text = b"".join(_PUNCTUATION[g] + vocabulary[w] for g, w in zip(gaps, chosen, strict=False))
    ends = (b"", _PUNCTUATION[gaps[-1]])
    return text[int(rng.integers(2)) :] + ends[int(rng.integers(2))]


def _batch(
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    vocabulary = [_word(rng) for _ in range(int(rng.integers(1, 200)))]
    parts: list[bytes] = []
    weights: list[int] = []
    owners: list[int] = []
    docs = int(rng.integers(1, 12))
    for doc in range(docs):
        for _ in range(int(rng.integers(1, 4))):  # body, then title or headings
            parts.append(_segment(rng, vocabulary))
            weights.append(int(rng.choice([0, 1, 2, 3])))
            owners.append(doc)
    words, starts, ends = simhash_kernel.pack(parts)
    words = words.copy()  # pack's buffer is reused by the next call
    as_int = np.asarray
    return words, starts, ends, as_int(weights), as_int(owners, dtype=np.int64), docs


@pytest.mark.parametrize("seed", range(8))
def test_fused_kernel_matches_the_old_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        words, starts, ends, weights, owners, docs = _batch(rng)
        shingle = int(rng.choice([1, 1, 2, 4]))
        stop = Fingerprinter(FeatureConfig(drop_stop_words=bool(rng.random() < 0.2)))._stop_table
        log2_bins = int(rng.integers(4, 13))
        bits = int(rng.choice([1, 2, 4, 8, 16]))
        tf_cap = int(rng.choice([0, 1, 2, 4, 64]))
        args = (words, starts, ends, weights, owners, docs, shingle, stop, log2_bins, bits, tf_cap)
        tables = (densify_kernel.probe_table(log2_bins), densify_kernel.probe_chains(log2_bins))
        fused_margins = margins_for(docs)
        new_fps, new_rows = sketch_kernel.fingerprint_sketch_segments(*args, *tables, fused_margins)
        old_fps, old_rows = reference.fingerprint_sketch_segments(*args)
        assert new_fps.tolist() == old_fps.tolist()
        assert np.array_equal(new_rows, old_rows)
        simhash_args = (words, starts, ends, weights, owners, docs, shingle, stop, tf_cap)
        simhash_margins = margins_for(docs)
        assert (
            simhash_kernel.simhash_segments(*simhash_args, simhash_margins).tolist()
            == reference.simhash_segments(*simhash_args).tolist()
        )
        # Both kernels give the same margins; asking for none changes no fingerprint.
        assert np.array_equal(fused_margins, simhash_margins)
        assert simhash_kernel.simhash_segments(*simhash_args, no_margins()).tolist() == (
            new_fps.tolist()
        )
        assert np.array_equal(
            sketch_kernel.oph_sketch_segments(words, starts, ends, log2_bins, bits, *tables),
            reference.oph_sketch_segments(words, starts, ends, log2_bins, bits),
        )
        _assert_same_shingle_hashes(words, starts, ends)


def _assert_same_shingle_hashes(words: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """The evaluation's word 4-shingle hashes, segment by segment, against the old tokeniser."""
    hashes, offsets = sketch_kernel.shingle_hashes(words, starts, ends)
    for s in range(starts.size):
        bounds = np.empty(int(ends[s] - starts[s]) + 2, dtype=np.int64)
        n = reference._segment_words(words, starts[s], ends[s], bounds)
        n = reference._shingles(bounds, n, 4)
        assert hashes[offsets[s] : offsets[s + 1]].tolist() == bounds[:n].view(np.uint64).tolist()


def test_word_bytes_classify_every_byte_at_every_position() -> None:
    """The eight-at-a-time byte classes are those of the old per-byte table."""
    buf = np.zeros(40, dtype=np.uint8)
    classes = reference.byte_classes()
    for value in range(256):
        for position in range(8):
            buf[:] = np.frombuffer(b"a-" * 20, dtype=np.uint8)  # neighbours of both classes
            buf[position] = value
            bits = int(simhash_kernel._word_bytes(buf[:8].view(np.uint64)[0]))
            expected = [int(classes[byte] != 0) for byte in buf[:8]]
            assert [(bits >> k) & 1 for k in range(8)] == expected
