"""The fingerprint and sketch kernels as they were before issue 11's speed work: the oracle
for ``test_kernel_equivalence`` (fingerprint version 1 and sketch version 1 must not change).

Verbatim copies of main's functions (commit 9561ef5) that the speed work rewrote, and of the
entry points that call them; helpers it left alone are imported from the live kernels. When a
kernel changes again, copy its old body here first.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core._densify_kernel import _PROBE_MUL, EMPTY
from dedup_worker.core._simhash_kernel import (
    _MASKS,
    _SHINGLE_MUL,
    _TOKEN_MUL,
    _TOKEN_SEED,
    _in_table,
    _lower8,
    _majority,
    _vote,
    fmix64,
)
from dedup_worker.core._sketch_kernel import (
    _NO_STOP,
    HEADER,
    SHINGLE,
    SKETCH_VERSION,
    _log2,
)

U64 = np.uint64


def byte_classes() -> np.ndarray:
    """Byte -> the byte a word keeps (A-Z lowercased), or 0 for a separator."""
    table = np.zeros(256, dtype=np.uint64)
    for c in range(256):
        if 48 <= c <= 57 or 97 <= c <= 122 or c >= 128:
            table[c] = c
        elif 65 <= c <= 90:
            table[c] = c + 32
    return table


_CLASSES = byte_classes()


@njit(cache=True, inline="always")
def _load8(words: np.ndarray, at: int) -> np.uint64:
    """The 8 bytes at byte offset ``at`` of an aligned uint64 buffer, little-endian."""
    q = at >> 3
    r = U64((at & 7) * 8)
    # Shifting by 64 is undefined, so the high word is shifted in two steps.
    value: np.uint64 = (words[q] >> r) | ((words[q + 1] << U64(1)) << (U64(63) - r))
    return value


@njit(cache=True)
def _transitions(buf: np.ndarray, start: int, end: int, out: np.ndarray) -> int:
    """Word starts and ends in buf[start:end], alternating in ``out``; returns 2 * words.

    Branch-free: every byte stores its index and the count advances only on a transition.
    """
    classes = _CLASSES
    n = 0
    previous = 0
    for i in range(start, end):
        inside = 1 if classes[buf[i]] != U64(0) else 0
        out[n] = i
        n += inside ^ previous
        previous = inside
    if previous:
        out[n] = end
        n += 1
    return n


@njit(cache=True, inline="always")
def _word_hash(words: np.ndarray, start: int, end: int) -> np.uint64:
    h = _TOKEN_SEED
    for at in range(start, end, 8):
        h = (h ^ (_lower8(_load8(words, at)) & _MASKS[min(end - at, 8)])) * _TOKEN_MUL
    return fmix64(h ^ U64(end - start))


@njit(cache=True)
def _word_hashes(words: np.ndarray, bounds: np.ndarray, n: int, stop_table: np.ndarray) -> int:
    """Replace bounds[:n] by the hashes of the n words it delimits (stop words removed)."""
    kept = 0
    use_stop = stop_table.size > 0
    for t in range(n):
        h = _word_hash(words, bounds[2 * t], bounds[2 * t + 1])
        bounds[kept] = np.int64(h)
        kept += 0 if use_stop and _in_table(stop_table, h) else 1
    return kept


@njit(cache=True)
def _shingles(words: np.ndarray, n: int, size: int) -> int:
    """Replace words[:n] in place by the hashes of its ``size``-word shingles; returns count."""
    if size == 1 or n == 0:
        return n
    size = min(size, n)  # A text shorter than one shingle still gives one feature of all its words.
    count = n - size + 1
    for i in range(count):
        h = U64(size)
        for j in range(size):
            h = (h ^ U64(words[i + j])) * _SHINGLE_MUL
        words[i] = np.int64(fmix64(h))
    return count


@njit(cache=True)
def cap_table(longest: int, tf_cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Scratch space of ``cap_votes`` for segments of up to ``longest`` bytes (empty if no cap).

    (keys, tags): an open-addressing table with at least twice as many slots as a segment can
    have features (one per two bytes at most); a tag is ``segment << 8 | count``, so slots are
    reused across segments without clearing.
    """
    size = 1
    while tf_cap > 0 and size < longest + 2:
        size <<= 1
    return np.zeros(size, np.uint64), np.full(size, -1, np.int64)


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
def _segment_words(words: np.ndarray, start: int, end: int, bounds: np.ndarray) -> int:
    """Hashes of every word of one byte segment into bounds[:n] (no stop-word removal)."""
    n = _transitions(words.view(np.uint8), start, end, bounds) // 2
    return int(_word_hashes(words, bounds, n, _NO_STOP))


@njit(cache=True)
def _pack(values: np.ndarray, bits: int, out: np.ndarray) -> None:
    """The low ``bits`` bits of each value, little-endian bit order, into the bytes of out.

    Value i occupies bits [i * bits, (i + 1) * bits) of the little-endian bit string: built
    64 bits at a time and stored byte by byte.
    """
    mask = (U64(1) << U64(bits)) - U64(1)
    per = 64 // bits
    at = 0
    for first in range(0, values.size, per):
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


@njit(cache=True, inline="always")
def _oph_update(mins: np.ndarray, shingles: np.ndarray, n: int, shift: U64) -> None:
    """Each hash lands in the bin named by its top bits and keeps the bin's minimum."""
    for i in range(n):
        h = U64(shingles[i])
        b = h >> shift
        mins[b] = min(mins[b], h)


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
