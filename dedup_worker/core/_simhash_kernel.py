"""Numba kernel: tokenise, hash, shingle and vote over UTF-8 bytes (fingerprint version 1).

The byte stream comes from ``text.prepare``: ASCII text is passed as is (the kernel lowercases
A-Z), other text is NFKC-normalised, case-folded and has every non-word character replaced by a
space. So a word is a maximal run of ASCII letters/digits or bytes >= 0x80.

Each segment (body, title, a heading) goes through four tight passes, because at ~6 bytes per
word a branch per byte mispredicts at every word boundary and costs more than the hashing:

1. word boundaries, eight bytes at a time (SWAR byte classes, their edges' positions stored
   without a branch);
2. one hash per word over 8-byte chunks (one unaligned load, SWAR lowercasing, masked to the
   word length);
3. shingles of ``shingle`` consecutive word hashes (after optional stop-word removal);
4. the vote: a carry-save adder tree over 16 features at a time (Harley-Seal), whose carry
   plane is counted in byte lanes (a 256-entry table spreads a byte over the eight bytes of a
   word, so eight additions count 64 positions).

Every constant and step here defines fingerprint version 1; changing any of them changes the
golden values in ``tests/unit/dedup_worker/core/test_simhash.py`` and needs a new
FINGERPRINT_VERSION.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from numba import njit

from dedup_worker.core._bits import load_u64, popcount, trailing_zeros
from dedup_worker.core._tf_cap_kernel import cap_table, cap_votes

U64 = np.uint64
_M1 = U64(0xFF51AFD7ED558CCD)
_M2 = U64(0xC4CEB9FE1A85EC53)
_TOKEN_SEED = U64(0x9E3779B97F4A7C15)
_TOKEN_MUL = U64(0x100000001B3)
_SHINGLE_MUL = U64(0xD6E8FEB86659FD93)
_HIGH_BITS = U64(0x8080808080808080)
_ALL_A = U64(0x4141414141414141)
_ALL_AFTER_Z = U64(0x5B5B5B5B5B5B5B5B)
_LOW_SEVEN = U64(0x7F7F7F7F7F7F7F7F)
_CASE_BITS = U64(0x2020202020202020)
_ABOVE_DIGITS_0 = U64(0x5050505050505050)  # + byte >= 0x80 iff byte >= "0" (0x30)
_ABOVE_DIGITS_9 = U64(0x4646464646464646)  # ... iff byte > "9" (0x39)
_ABOVE_LOWER_A = U64(0x1F1F1F1F1F1F1F1F)  # ... iff byte >= "a" (0x61)
_ABOVE_LOWER_Z = U64(0x0505050505050505)  # ... iff byte > "z" (0x7a)
_GATHER = U64(0x0102040810204080)  # bit 0 of byte k to bit 56 + k


def _spread_table() -> np.ndarray:
    """Byte b -> a word whose byte i is bit i of b."""
    table = np.zeros(256, dtype=np.uint64)
    for b in range(256):
        table[b] = sum(((b >> i) & 1) << (8 * i) for i in range(8))
    return table


def _length_masks() -> np.ndarray:
    """n -> a mask of the low n bytes (n = 0..8)."""
    return np.array([(1 << (8 * n)) - 1 for n in range(8)] + [2**64 - 1], dtype=np.uint64)


_SPREAD = _spread_table()
_MASKS = _length_masks()


@njit(cache=True, inline="always")
def fmix64(h: np.uint64) -> np.uint64:
    """MurmurHash3's 64-bit finaliser: full avalanche, stable, cheap."""
    h ^= h >> U64(33)
    h *= _M1
    h ^= h >> U64(33)
    h *= _M2
    h ^= h >> U64(33)
    return h


#: Spare entries a word-boundary array needs beyond one per byte (``_transitions`` stores
#: four positions per 8 bytes whether or not they are boundaries).
BOUNDS_SLACK = 8


@njit(cache=True, inline="always")
def _word_bytes(w: np.uint64) -> np.uint64:
    """Bit k set when byte k of ``w`` is a word byte (ASCII letter or digit, or >= 0x80).

    SWAR range tests on the low 7 bits of all eight bytes at once (no byte carries into the
    next: every sum stays under 0x100), the top bits gathered by one multiplication.
    """
    low = w & _LOW_SEVEN
    digit = (low + _ABOVE_DIGITS_0) & ~(low + _ABOVE_DIGITS_9)
    folded = low | _CASE_BITS  # A-Z to a-z; nothing else lands in a-z
    letter = (folded + _ABOVE_LOWER_A) & ~(folded + _ABOVE_LOWER_Z)
    word = (w | digit | letter) & _HIGH_BITS
    gathered: np.uint64 = ((word >> U64(7)) * _GATHER) >> U64(56)
    return gathered


@njit(cache=True)
def _transitions(buf: np.ndarray, start: int, end: int, out: np.ndarray) -> int:
    """Word starts and ends in buf[start:end], alternating in ``out``; returns 2 * words.

    Eight bytes at a time: a mask of word bytes, its edges (bytes whose class differs from the
    previous byte's), and their positions stored four at a time without a branch (a 900-word
    page averages 2.4 edges per 8 bytes). ``out`` needs ``BOUNDS_SLACK`` spare entries; the
    buffer may be read up to 7 bytes past ``end``.
    """
    n = 0
    previous = U64(0)
    for i in range(start, end, 8):
        w = load_u64(buf, i)
        if end - i < 8:
            w &= _MASKS[end - i]  # bytes past the end are separators
        bits = _word_bytes(w)
        edges = (bits ^ ((bits << U64(1)) | previous)) & U64(255)
        previous = bits >> U64(7)
        count = int(popcount(edges))
        out[n] = i + int(trailing_zeros(edges))
        edges &= edges - U64(1)
        out[n + 1] = i + int(trailing_zeros(edges))
        edges &= edges - U64(1)
        out[n + 2] = i + int(trailing_zeros(edges))
        edges &= edges - U64(1)
        out[n + 3] = i + int(trailing_zeros(edges))
        edges &= edges - U64(1)
        if count > 4:
            for k in range(4, count):
                out[n + k] = i + int(trailing_zeros(edges))
                edges &= edges - U64(1)
        n += count
    if previous:
        out[n] = end
        n += 1
    return n


@njit(cache=True, inline="always")
def _lower8(w: np.uint64) -> np.uint64:
    """ASCII A-Z to a-z in all eight bytes at once; bytes >= 0x80 are left alone."""
    high = w | _HIGH_BITS
    upper = ((high - _ALL_A) & ~(high - _ALL_AFTER_Z)) & ~w & _HIGH_BITS
    return w | (upper >> U64(2))


@njit(cache=True, inline="always")
def _word_hash(buf: np.ndarray, start: int, end: int) -> np.uint64:
    length = end - start
    h = (_TOKEN_SEED ^ (_lower8(load_u64(buf, start)) & _low_bytes(length))) * _TOKEN_MUL
    at = start + 8
    while at < end:
        h = (h ^ (_lower8(load_u64(buf, at)) & _low_bytes(end - at))) * _TOKEN_MUL
        at += 8
    return fmix64(h ^ U64(length))


@njit(cache=True, inline="always")
def _low_bytes(count: int) -> np.uint64:
    """A mask of the low min(count, 8) bytes, for count >= 1."""
    mask: np.uint64 = U64(0xFFFFFFFFFFFFFFFF) >> U64(64 - 8 * min(count, 8))
    return mask


@njit(cache=True, inline="always")
def _in_table(table: np.ndarray, h: np.uint64) -> bool:
    """Open-addressing membership test; the table's size is a power of two, 0 marks empty."""
    mask = U64(table.size - 1)
    slot = h & mask
    while table[slot] != U64(0):
        if table[slot] == h:
            return True
        slot = (slot + U64(1)) & mask
    return False


@njit(cache=True)
def _word_hashes(words: np.ndarray, bounds: np.ndarray, n: int, stop_table: np.ndarray) -> int:
    """Replace bounds[:n] by the hashes of the n words it delimits (stop words removed)."""
    buf = words.view(np.uint8)
    kept = 0
    use_stop = stop_table.size > 0
    for t in range(n):
        h = _word_hash(buf, bounds[2 * t], bounds[2 * t + 1])
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
        words[i] = np.int64(shingle_hash(words, i, size))
    return count


@njit(cache=True, inline="always")
def shingle_hash(words: np.ndarray, at: int, size: int) -> np.uint64:
    """The hash of the ``size`` word hashes starting at words[at]."""
    h = U64(size)
    for j in range(size):
        h = (h ^ U64(words[at + j])) * _SHINGLE_MUL
    return fmix64(h)


@njit(cache=True, inline="always")
def _csa(a: np.uint64, b: np.uint64, c: np.uint64) -> tuple[np.uint64, np.uint64]:
    """Carry-save adder over 64 bit positions: returns (carry, sum)."""
    u = a ^ b
    return (a & b) | (u & c), u ^ c


@njit(cache=True, inline="always")
def _spread_add(counts: np.ndarray, plane: np.uint64, times: int) -> None:
    """counts[b] += times for every set bit b of ``plane``."""
    spread = _SPREAD
    for j in range(8):
        lane = spread[(plane >> U64(8 * j)) & U64(255)]
        for i in range(8):
            counts[8 * j + i] += np.int64((lane >> U64(8 * i)) & U64(1)) * times


@njit(cache=True, inline="always")
def _eight(
    f: np.ndarray, i: int, ones: np.uint64, twos: np.uint64, fours: np.uint64
) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
    """Harley-Seal: fold features f[i:i+8] into ones/twos/fours; returns the eights carry."""
    twos_a, ones = _csa(ones, U64(f[i]), U64(f[i + 1]))
    twos_b, ones = _csa(ones, U64(f[i + 2]), U64(f[i + 3]))
    fours_a, twos = _csa(twos, twos_a, twos_b)
    twos_a, ones = _csa(ones, U64(f[i + 4]), U64(f[i + 5]))
    twos_b, ones = _csa(ones, U64(f[i + 6]), U64(f[i + 7]))
    fours_b, twos = _csa(twos, twos_a, twos_b)
    eights, fours = _csa(fours, fours_a, fours_b)
    return eights, ones, twos, fours


@njit(cache=True)
def _vote(features: np.ndarray, n: int, weight: int, counts: np.ndarray) -> None:
    """counts[b] += weight for every feature with bit b set.

    Sixteen features at a time go through a carry-save adder tree (Harley-Seal), so only the
    "sixteens" plane is counted per block, in byte lanes: eight additions for 64 positions.
    """
    spread = _SPREAD
    ones = twos = fours = eights = U64(0)
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = U64(0)
    blocks = 0
    full = n - n % 16
    for i in range(0, full, 16):
        eights_a, ones, twos, fours = _eight(features, i, ones, twos, fours)
        eights_b, ones, twos, fours = _eight(features, i + 8, ones, twos, fours)
        x, eights = _csa(eights, eights_a, eights_b)
        l0 += spread[x & U64(255)]
        l1 += spread[(x >> U64(8)) & U64(255)]
        l2 += spread[(x >> U64(16)) & U64(255)]
        l3 += spread[(x >> U64(24)) & U64(255)]
        l4 += spread[(x >> U64(32)) & U64(255)]
        l5 += spread[(x >> U64(40)) & U64(255)]
        l6 += spread[(x >> U64(48)) & U64(255)]
        l7 += spread[x >> U64(56)]
        blocks += 1
        if blocks == 255 or i + 16 == full:
            _flush_lanes(counts, l0, l1, l2, l3, l4, l5, l6, l7, 16 * weight)
            l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = U64(0)
            blocks = 0
    for i in range(full, n):
        _spread_add(counts, U64(features[i]), weight)
    _spread_add(counts, ones, weight)
    _spread_add(counts, twos, 2 * weight)
    _spread_add(counts, fours, 4 * weight)
    _spread_add(counts, eights, 8 * weight)


@njit(cache=True, inline="always")
def _flush_lanes(
    counts: np.ndarray,
    l0: np.uint64,
    l1: np.uint64,
    l2: np.uint64,
    l3: np.uint64,
    l4: np.uint64,
    l5: np.uint64,
    l6: np.uint64,
    l7: np.uint64,
    times: int,
) -> None:
    for i in range(8):
        shift = U64(8 * i)
        counts[i] += np.int64((l0 >> shift) & U64(255)) * times
        counts[8 + i] += np.int64((l1 >> shift) & U64(255)) * times
        counts[16 + i] += np.int64((l2 >> shift) & U64(255)) * times
        counts[24 + i] += np.int64((l3 >> shift) & U64(255)) * times
        counts[32 + i] += np.int64((l4 >> shift) & U64(255)) * times
        counts[40 + i] += np.int64((l5 >> shift) & U64(255)) * times
        counts[48 + i] += np.int64((l6 >> shift) & U64(255)) * times
        counts[56 + i] += np.int64((l7 >> shift) & U64(255)) * times


@njit(cache=True, inline="always")
def _majority(counts: np.ndarray, total: int) -> np.uint64:
    """Bit b of the result is set when more than half of the total weight voted for it."""
    fingerprint = U64(0)
    for bit in range(64):
        if 2 * counts[bit] > total:
            fingerprint |= U64(1) << U64(bit)
    return fingerprint


@njit(cache=True, inline="always")
def _margins(counts: np.ndarray, total: int, out: np.ndarray, doc: int) -> None:
    """Row ``doc`` of ``out`` (if it has rows): how far each bit's vote was from a tie,
    |2 * votes for 1 - total|. The bits of small margin are those a small edit flips first:
    what a probe tries flipped (``design.Design.slack``)."""
    if out.shape[0] > 0:
        for bit in range(64):
            out[doc, bit] = abs(2 * counts[bit] - total)


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
    tf_cap: int,
    margins: np.ndarray,
) -> np.ndarray:
    """Fingerprint ``n_docs`` documents given as weighted byte segments (grouped by doc).

    ``words`` is the text as an 8-byte aligned uint64 buffer with at least one spare word.
    ``tf_cap`` > 0 limits each feature to that many votes per segment (``cap_votes``).
    ``margins``: an (n_docs, 64) int32 array receiving each bit's margin (``_margins``), or
    one of no rows.
    """
    buf = words.view(np.uint8)
    out = np.zeros(n_docs, dtype=np.uint64)
    longest = 0
    for s in range(seg_start.size):
        longest = max(longest, seg_end[s] - seg_start[s])
    bounds = np.empty(longest + BOUNDS_SLACK, dtype=np.int64)
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
            if tf_cap > 0:
                n = cap_votes(bounds, n, bounds, tf_cap, table, s)
            if seg_weight[s] > 0:
                _vote(bounds, n, seg_weight[s], counts)
                total += n * seg_weight[s]
            s += 1
        out[doc] = _majority(counts, total) if total > 0 else U64(0)
        _margins(counts, total, margins, doc)
    return out


@njit(cache=True)
def word_hashes(words: np.ndarray, length: int) -> np.ndarray:
    """The version-1 hash of every word in the first ``length`` bytes of ``words``."""
    bounds = np.empty(length + BOUNDS_SLACK, dtype=np.int64)
    n = _transitions(words.view(np.uint8), 0, length, bounds) // 2
    n = _word_hashes(words, bounds, n, np.zeros(0, dtype=np.uint64))
    return bounds[:n].view(np.uint64).copy()


class _Scratch(threading.local):
    """A per-thread batch buffer, grown as needed and reused: a fresh multi-megabyte buffer per
    batch costs a page fault per 4 KiB, which was a third of the fingerprinting time."""

    def __init__(self) -> None:
        self.words = np.zeros(0, dtype=np.uint64)


_SCRATCH = _Scratch()


def pack(parts: Sequence[bytes | str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``parts`` back to back in this thread's reused aligned buffer: (words, starts, ends).

    A part is bytes, or ASCII text (``text.packable``), encoded here straight into the buffer:
    one short-lived copy at a time, instead of a batch of encoded texts held at once (page
    faults, and a second pass over the text). The buffer is overwritten by the next call in
    the same thread, so use it at once (the kernels here do). At least one spare zero-padded
    word follows the data.
    """
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(parts) else 0
    needed = total // 8 + 3
    if _SCRATCH.words.size < needed:
        _SCRATCH.words = np.zeros(max(needed, 2 * _SCRATCH.words.size), dtype=np.uint64)
    view = _SCRATCH.words.view(np.uint8).data  # a writable memoryview of the buffer
    offset = 0
    for part in parts:
        size = len(part)
        view[offset : offset + size] = part.encode("ascii") if isinstance(part, str) else part
        offset += size
    view[offset : offset + 16] = bytes(16)
    return _SCRATCH.words, ends - lengths, ends


def aligned(data: bytes) -> np.ndarray:
    """``data`` copied into an 8-byte aligned uint64 buffer with spare zero words at the end."""
    words = np.zeros(len(data) // 8 + 2, dtype=np.uint64)
    words.view(np.uint8)[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    return words
