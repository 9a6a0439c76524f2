"""The fingerprint and sketch kernels as they were before issue 11's speed work: the oracle
for ``test_kernel_equivalence`` (fingerprint version 1 and sketch version 1 must not change).

Verbatim copies of main's functions (commit 9561ef5) that the speed work rewrote, and of the
entry points that call them; helpers it left alone are imported from the live kernels. When a
kernel changes again, copy its old body here first.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core._simhash_kernel import (
    _in_table,
    _majority,
    _shingles,
    _transitions,
    _vote,
    _word_hashes,
    cap_table,
    fmix64,
)
from dedup_worker.core._sketch_kernel import (
    _NO_STOP,
    _PROBE_MUL,
    EMPTY,
    HEADER,
    SHINGLE,
    SKETCH_VERSION,
    _log2,
    _oph_update,
    _pack,
    _segment_words,
)

U64 = np.uint64


@njit(cache=True, inline="always")
def cap_votes(
    features: np.ndarray,
    n: int,
    tf_cap: int,
    table: tuple[np.ndarray, np.ndarray],
    stamp: int,
) -> int:
    """Keep only the first ``tf_cap`` occurrences of each feature in features[:n] (in place);
    returns the count kept. A feature's vote weight is then min(tf, cap): the most frequent
    words (function words, navigation) cannot outvote the rest, so the fingerprints of pages
    in one language do not crowd together (README, "Detection quality")."""
    if tf_cap <= 0:
        return n
    keys, tags = table
    size = 16
    while size < 2 * n:  # this segment's part of the table: small, so it stays in cache
        size <<= 1
    mask = U64(min(size, keys.size) - 1)
    base = np.int64(stamp) << 8
    kept = 0
    for i in range(n):
        h = U64(features[i])
        slot = h & mask  # features are mixed hashes: low bits are uniform
        while (tags[slot] >> 8) == stamp and keys[slot] != h:
            slot = (slot + U64(1)) & mask
        if (tags[slot] >> 8) != stamp:
            keys[slot] = h
            tags[slot] = base
        if (tags[slot] & 255) < tf_cap:  # the count saturates: it never reaches the stamp
            tags[slot] += 1
            features[kept] = features[i]
            kept += 1
    return kept


@njit(cache=True, nogil=True)
def simhash_segments(
    words: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    seg_weight: np.ndarray,
    seg_doc: np.ndarray,
    n_docs: int,
    shingle: int,
    stop_table: np.ndarray,
    tf_cap: int = 0,
) -> np.ndarray:
    """Fingerprint ``n_docs`` documents given as weighted byte segments (grouped by doc).

    ``words`` is the text as an 8-byte aligned uint64 buffer with at least one spare word.
    ``tf_cap`` > 0 limits each feature to that many votes per segment (``cap_votes``).
    """
    buf = words.view(np.uint8)
    out = np.zeros(n_docs, dtype=np.uint64)
    longest = 0
    for s in range(seg_start.size):
        longest = max(longest, seg_end[s] - seg_start[s])
    bounds = np.empty(longest + 2, dtype=np.int64)
    table = cap_table(longest, tf_cap)
    counts = np.zeros(64, dtype=np.int64)
    s = 0
    while s < seg_start.size:
        doc = seg_doc[s]
        counts[:] = 0
        total = 0
        while s < seg_start.size and seg_doc[s] == doc:
            n = _transitions(buf, seg_start[s], seg_end[s], bounds) // 2
            n = _word_hashes(words, bounds, n, stop_table)
            n = _shingles(bounds, n, shingle)
            n = cap_votes(bounds, n, tf_cap, table, s)
            if seg_weight[s] > 0:
                _vote(bounds, n, seg_weight[s], counts)
                total += n * seg_weight[s]
            s += 1
        out[doc] = _majority(counts, total) if total > 0 else U64(0)
    return out


@njit(cache=True)
def _densify(mins: np.ndarray, out: np.ndarray, shift: U64) -> None:
    """out = mins with every empty bin filled from the first full bin of its probe sequence.

    Its cost grows with (empty bins) x (bins / full bins): ~8 us for 1024 bins and a
    900-word page, ~17 us for a 250-word one. Precomputing the probe sequences or trying all
    bins' attempt t in one branch-free pass measured no faster (the loads, not the hashing,
    set the pace).
    """
    m = mins.size
    full = 0
    for i in range(m):
        out[i] = mins[i]
        full += 1 if mins[i] != EMPTY else 0
    if full in (0, m):
        return
    for i in range(m):
        if mins[i] != EMPTY:
            continue
        attempt = U64(0)
        while True:
            attempt += U64(1)
            j = fmix64(U64(i) * _PROBE_MUL + attempt) >> shift
            if mins[j] != EMPTY:
                out[i] = mins[j]
                break


@njit(cache=True)
def _finish_sketch(
    mins: np.ndarray,
    dense: np.ndarray,
    shift: U64,
    bits: int,
    count: int,
    row: np.ndarray,
) -> None:
    """The header and the packed densified bins into ``row``.

    Header: sketch version, log2(bins) << 4 | log2(bits), shingle count (uint16 LE, saturating):
    a sketch names its own format, so ``verify`` never compares sketches of different kinds.
    """
    _densify(mins, dense, shift)
    count = min(count, 65535)
    row[0] = np.uint8(SKETCH_VERSION)
    row[1] = np.uint8(((64 - int(shift)) << 4) | _log2(bits))
    row[2] = np.uint8(count & 255)
    row[3] = np.uint8(count >> 8)
    _pack(dense, bits, row[HEADER:])


@njit(cache=True)
def _sketch_words(
    hashes: np.ndarray,
    n: int,
    mins: np.ndarray,
    dense: np.ndarray,
    shift: U64,
    bits: int,
    row: np.ndarray,
) -> None:
    """The sketch of a segment's ``n`` word hashes into ``row`` (overwrites the hashes)."""
    mins[:] = EMPTY
    n = _shingles(hashes, n, SHINGLE)
    _oph_update(mins, hashes, n, shift)
    _finish_sketch(mins, dense, shift, bits, n, row)


@njit(cache=True, nogil=True)
def oph_sketch_segments(
    words: np.ndarray, starts: np.ndarray, ends: np.ndarray, log2_bins: int, bits: int
) -> np.ndarray:
    """One OPH sketch row (header + m * b / 8 bytes) per segment."""
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    rows = np.zeros((starts.size, HEADER + m * bits // 8), dtype=np.uint8)
    longest = 0
    for s in range(starts.size):
        longest = max(longest, ends[s] - starts[s])
    bounds = np.empty(longest + 2, dtype=np.int64)
    mins = np.empty(m, dtype=np.uint64)
    dense = np.empty(m, dtype=np.uint64)
    for s in range(starts.size):
        n = _segment_words(words, starts[s], ends[s], bounds)
        _sketch_words(bounds, n, mins, dense, shift, bits, rows[s])
    return rows


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
    tf_cap: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``simhash_segments``'s fingerprints plus an OPH sketch of each document's first segment.

    The first segment of a document is its body text (the reference compares visible text
    only); titles and headings vote in the simhash as usual.
    """
    buf = words.view(np.uint8)
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    fps = np.zeros(n_docs, dtype=np.uint64)
    rows = np.zeros((n_docs, HEADER + m * bits // 8), dtype=np.uint8)
    longest = 0
    for s in range(seg_start.size):
        longest = max(longest, seg_end[s] - seg_start[s])
    bounds = np.empty(longest + 2, dtype=np.int64)
    features = np.empty(longest + 2, dtype=np.int64)
    table = cap_table(longest, tf_cap)
    counts = np.zeros(64, dtype=np.int64)
    mins = np.empty(m, dtype=np.uint64)
    dense = np.empty(m, dtype=np.uint64)
    s = 0
    while s < seg_start.size:
        doc = seg_doc[s]
        counts[:] = 0
        total = 0
        first = True
        while s < seg_start.size and seg_doc[s] == doc:
            n = _transitions(buf, seg_start[s], seg_end[s], bounds) // 2
            n = _word_hashes(words, bounds, n, _NO_STOP)
            voters = _features(bounds, n, features, shingle, stop_table, tf_cap > 0)
            kept = cap_votes(features, voters[0], tf_cap, table, s) if voters[1] else voters[0]
            if seg_weight[s] > 0:
                _vote(features if voters[1] else bounds, kept, seg_weight[s], counts)
                total += kept * seg_weight[s]
            if first:
                _sketch_words(bounds, n, mins, dense, shift, bits, rows[doc])
                first = False
            s += 1
        fps[doc] = _majority(counts, total) if total > 0 else U64(0)
    return fps, rows


@njit(cache=True, inline="always")
def _features(
    hashes: np.ndarray,
    n: int,
    out: np.ndarray,
    shingle: int,
    stop_table: np.ndarray,
    copy: bool,
) -> tuple[int, bool]:
    """The simhash features of a segment's word hashes: (count, whether they are in ``out``).

    Single words without stop-word removal vote straight from the word hashes (no copy) unless
    ``copy``; the word hashes themselves stay intact for the sketch's 4-shingles.
    """
    if shingle == 1 and stop_table.size == 0 and not copy:
        return n, False
    kept = 0
    for i in range(n):
        h = U64(hashes[i])
        if stop_table.size == 0 or not _in_table(stop_table, h):
            out[kept] = hashes[i]
            kept += 1
    return int(_shingles(out, kept, shingle)), True
