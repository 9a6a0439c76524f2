"""Numba kernels for resemblance sketches of word 4-shingles (sketch version 1).

Words and shingle hashes are exactly those of fingerprint version 1 (``_simhash_kernel``'s
``_transitions``, ``_word_hashes`` and ``_shingles``), so a sketch, the simhash and the exact
reference of ``neardup.evaluation.quality`` all see the same tokens (``shingle_hashes``).

* One-permutation hashing (OPH, Li, Owen and Zhang 2012): every shingle hash is used once; its
  top ``log2 m`` bits choose a bin, the bin keeps its smallest hash. Empty bins borrow the value
  of a bin chosen by a fixed pseudo-random probe sequence (Shrivastava's optimal densification,
  2017; ``_densify_kernel``), so two pages agree on an empty bin exactly as often as on a full
  one. Only the low
  ``b`` bits of each minimum are kept (b-bit minwise hashing, Li and König 2010): for
  near-duplicates, many short samples estimate resemblance better than few long ones.
* ``fingerprint_sketch_segments``: the simhash of ``simhash_segments`` and the OPH sketch in one
  pass, so the words are found and hashed once per page.

Every constant here defines sketch version 1; the golden values in
``tests/unit/dedup_worker/core/test_sketch.py`` pin it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core._densify_kernel import EMPTY, _densify
from dedup_worker.core._simhash_kernel import (
    BOUNDS_SLACK,
    _in_table,
    _majority,
    _margins,
    _shingles,
    _transitions,
    _vote,
    _word_hashes,
    shingle_hash,
)
from dedup_worker.core._tf_cap_kernel import cap_table, cap_votes

U64 = np.uint64
#: Word shingle size of the reference resemblance and of every sketch.
SHINGLE = 4
_NO_STOP = np.zeros(0, dtype=np.uint64)
SKETCH_VERSION = 1
#: Bytes before the packed bins: version, format, shingle count (2).
HEADER = 4


@njit(cache=True)
def _segment_words(words: np.ndarray, start: int, end: int, bounds: np.ndarray) -> int:
    """Hashes of every word of one byte segment into bounds[:n] (no stop-word removal)."""
    n = _transitions(words.view(np.uint8), start, end, bounds) // 2
    return int(_word_hashes(words, bounds, n, _NO_STOP))


@njit(cache=True)
def shingle_hashes(
    words: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """All word 4-shingle hashes of each segment, concatenated; returns (hashes, offsets)."""
    total = 0
    longest = 0
    for s in range(starts.size):
        total += ends[s] - starts[s]
        longest = max(longest, ends[s] - starts[s])
    out = np.empty(total // 2 + starts.size + 1, dtype=np.uint64)
    offsets = np.zeros(starts.size + 1, dtype=np.int64)
    bounds = np.empty(longest + BOUNDS_SLACK, dtype=np.int64)
    at = 0
    for s in range(starts.size):
        n = _shingles(bounds, _segment_words(words, starts[s], ends[s], bounds), SHINGLE)
        out[at : at + n] = bounds[:n].view(np.uint64)
        at += n
        offsets[s + 1] = at
    return out[:at], offsets


# ---- one-permutation hashing ----------------------------------------------------------------


@njit(cache=True, inline="always")
def _oph_shingles(mins: np.ndarray, words: np.ndarray, n: int, shift: U64) -> int:
    """The hash of each word 4-shingle of words[:n] (those of ``_shingles``) lands in the bin
    named by its top bits and keeps the bin's minimum; returns the shingle count. The word
    hashes are left as they are, and no shingle hash is stored."""
    if n == 0:
        return 0
    if n < SHINGLE:  # a text shorter than one shingle gives one of all its words
        h = shingle_hash(words, 0, n)
        mins[h >> shift] = h
        return 1
    count = n - SHINGLE + 1
    for i in range(count):
        h = shingle_hash(words, i, SHINGLE)  # a constant size: the loop over words unrolls
        b = h >> shift
        mins[b] = min(mins[b], h)
    return count


@njit(cache=True)
def _pack(values: np.ndarray, bits: int, out: np.ndarray) -> None:
    """The low ``bits`` bits of each value, little-endian bit order, into the bytes of out.

    Value i occupies bits [i * bits, (i + 1) * bits) of the little-endian bit string: built
    64 bits at a time and stored byte by byte (whole words without a bounds test, so the
    compiler merges the eight stores).
    """
    mask = (U64(1) << U64(bits)) - U64(1)
    per = 64 // bits
    whole = min(values.size // per, out.size // 8)
    for q in range(whole):
        word = U64(0)
        for k in range(per):
            word |= (values[q * per + k] & mask) << U64(k * bits)
        for b in range(8):
            out[8 * q + b] = np.uint8((word >> U64(8 * b)) & U64(255))
    at = 8 * whole
    for first in range(whole * per, values.size, per):
        word = U64(0)
        for k in range(min(per, values.size - first)):
            word |= (values[first + k] & mask) << U64(k * bits)
        for b in range(8):
            if at < out.size:
                out[at] = np.uint8((word >> U64(8 * b)) & U64(255))
                at += 1
    while at < out.size:
        out[at] = 0
        at += 1


@njit(cache=True)
def _finish_sketch(
    mins: np.ndarray,
    dense: np.ndarray,
    probes: np.ndarray,
    todo: np.ndarray,
    shift: U64,
    bits: int,
    count: int,
    row: np.ndarray,
    chains: np.ndarray,
) -> None:
    """The header and the packed densified bins into ``row``.

    Header: sketch version, log2(bins) << 4 | log2(bits), shingle count (uint16 LE, saturating):
    a sketch names its own format, so ``verify`` never compares sketches of different kinds.
    """
    _densify(mins, dense, shift, probes, todo, chains)
    count = min(count, 65535)
    row[0] = np.uint8(SKETCH_VERSION)
    row[1] = np.uint8(((64 - int(shift)) << 4) | _log2(bits))
    row[2] = np.uint8(count & 255)
    row[3] = np.uint8(count >> 8)
    _pack(dense, bits, row[HEADER:])


@njit(cache=True, inline="always")
def _log2(x: int) -> int:
    r = 0
    while (1 << r) < x:
        r += 1
    return r


@njit(cache=True, nogil=True)
def oph_sketch_segments(
    words: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    log2_bins: int,
    bits: int,
    probes: np.ndarray,
    chains: np.ndarray,
) -> np.ndarray:
    """One OPH sketch row (header + m * b / 8 bytes) per segment (``probes`` and ``chains``:
    ``probe_table`` and ``probe_chains`` of ``log2_bins``)."""
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    rows = np.zeros((starts.size, HEADER + m * bits // 8), dtype=np.uint8)
    longest = 0
    for s in range(starts.size):
        longest = max(longest, ends[s] - starts[s])
    bounds = np.empty(longest + BOUNDS_SLACK, dtype=np.int64)
    mins = np.empty(m, dtype=np.uint64)
    dense = np.empty(m, dtype=np.uint64)
    todo = np.empty(m, dtype=np.int64)
    for s in range(starts.size):
        n = _segment_words(words, starts[s], ends[s], bounds)
        _sketch_words(bounds, n, mins, dense, probes, todo, shift, bits, rows[s], chains)
    return rows


@njit(cache=True)
def _sketch_words(
    hashes: np.ndarray,
    n: int,
    mins: np.ndarray,
    dense: np.ndarray,
    probes: np.ndarray,
    todo: np.ndarray,
    shift: U64,
    bits: int,
    row: np.ndarray,
    chains: np.ndarray,
) -> None:
    """The sketch of a segment's ``n`` word hashes into ``row``."""
    mins[:] = EMPTY
    count = _oph_shingles(mins, hashes, n, shift)
    _finish_sketch(mins, dense, probes, todo, shift, bits, count, row, chains)


@njit(cache=True, nogil=True)
def fingerprint_sketch_segments(
    words: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    seg_weight: np.ndarray,
    seg_doc: np.ndarray,
    n_docs: int,
    shingle: int,
    stop_table: np.ndarray,
    log2_bins: int,
    bits: int,
    tf_cap: int,
    probes: np.ndarray,
    chains: np.ndarray,
    margins: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``simhash_segments``'s fingerprints (and margins) plus an OPH sketch of each document's
    first segment.

    The first segment of a document is its body text (the reference compares visible text
    only); titles and headings vote in the simhash as usual. ``probes`` and ``chains`` are
    ``probe_table`` and ``probe_chains`` of ``log2_bins`` (built once per ``Sketcher``).
    """
    buf = words.view(np.uint8)
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    fps = np.zeros(n_docs, dtype=np.uint64)
    rows = np.zeros((n_docs, HEADER + m * bits // 8), dtype=np.uint8)
    longest = 0
    for s in range(seg_start.size):
        longest = max(longest, seg_end[s] - seg_start[s])
    bounds = np.empty(longest + BOUNDS_SLACK, dtype=np.int64)
    features = np.empty(longest + 2, dtype=np.int64)
    table = cap_table(longest, tf_cap)
    counts = np.zeros(64, dtype=np.int64)
    mins = np.empty(m, dtype=np.uint64)
    dense = np.empty(m, dtype=np.uint64)
    todo = np.empty(m, dtype=np.int64)
    s = 0
    while s < seg_start.size:
        doc = seg_doc[s]
        counts[:] = 0
        total = 0
        first = True
        while s < seg_start.size and seg_doc[s] == doc:
            n = _transitions(buf, seg_start[s], seg_end[s], bounds) // 2
            n = _word_hashes(words, bounds, n, _NO_STOP)
            kept, copied = _features(bounds, n, features, shingle, stop_table)
            if tf_cap > 0:  # straight from the word hashes, or in place, into features
                kept = cap_votes(features if copied else bounds, kept, features, tf_cap, table, s)
                copied = True
            if seg_weight[s] > 0:
                _vote(features if copied else bounds, kept, seg_weight[s], counts)
                total += kept * seg_weight[s]
            if first:
                _sketch_words(bounds, n, mins, dense, probes, todo, shift, bits, rows[doc], chains)
                first = False
            s += 1
        fps[doc] = _majority(counts, total) if total > 0 else U64(0)
        _margins(counts, total, margins, doc)
    return fps, rows


@njit(cache=True, inline="always")
def _features(
    hashes: np.ndarray,
    n: int,
    out: np.ndarray,
    shingle: int,
    stop_table: np.ndarray,
) -> tuple[int, bool]:
    """The simhash features of a segment's word hashes: (count, whether they are in ``out``).

    Single words without stop-word removal vote straight from the word hashes (no copy); the
    word hashes themselves stay intact for the sketch's 4-shingles.
    """
    if shingle == 1 and stop_table.size == 0:
        return n, False
    kept = 0
    for i in range(n):
        h = U64(hashes[i])
        if stop_table.size == 0 or not _in_table(stop_table, h):
            out[kept] = hashes[i]
            kept += 1
    return int(_shingles(out, kept, shingle)), True


def _lane_table() -> np.ndarray:
    """Row b (1, 2, 4, 8): how many b-bit lanes of a byte are not zero, for each byte value:
    of two sketches' XOR, the bins of that byte that differ."""
    table = np.zeros((9, 256), dtype=np.int64)
    for bits in (1, 2, 4, 8):
        lane = (1 << bits) - 1
        for value in range(256):
            table[bits, value] = sum(1 for at in range(0, 8, bits) if (value >> at) & lane)
    return table


_LANES = _lane_table()


@njit(cache=True)
def bin_matches(rows: np.ndarray, left: np.ndarray, right: np.ndarray, bits: int) -> np.ndarray:
    """For each pair (left[p], right[p]) of sketch rows: how many bins agree.

    A byte at a time: the XOR of the two bytes, its differing lanes read from a table (bins of
    16 bits: two bytes at a time). One bin at a time cost ~5 us a pair at 1024 bins; the
    worker verifies ~2 candidates a page.
    """
    out = np.zeros(left.size, dtype=np.int64)
    payload = rows.shape[1] - HEADER
    m = payload * 8 // bits
    lanes = _LANES[min(bits, 8)]
    for p in range(left.size):
        a = rows[left[p]]
        b = rows[right[p]]
        differing = 0
        if bits <= 8:
            for i in range(HEADER, HEADER + payload):
                differing += lanes[a[i] ^ b[i]]
        else:
            for i in range(HEADER, HEADER + payload, 2):
                differing += 1 if (a[i] ^ b[i]) | (a[i + 1] ^ b[i + 1]) else 0
        out[p] = m - differing
    return out
