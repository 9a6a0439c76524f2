"""Numba kernel: the term-frequency cap of fingerprint version 1 (``NEARDUP_TF_CAP``).

Shared by the simhash vote (``_simhash_kernel``) and the combined fingerprint and sketch pass
(``_sketch_kernel``): each keeps a segment's first ``tf_cap`` occurrences of a feature. Part of
fingerprint version 1: changing it changes the golden values.
"""

from __future__ import annotations

import numpy as np
from numba import njit

U64 = np.uint64


@njit(cache=True)
def cap_table(longest: int, tf_cap: int) -> np.ndarray:
    """Scratch space of ``cap_votes`` for segments of up to ``longest`` bytes (empty if no cap).

    An open-addressing table with more slots than a segment can have features (one per two
    bytes at most; ``cap_votes`` uses up to four slots per feature). A slot is (key, tag), side
    by side so a lookup touches one cache line; a tag is ``segment << 8 | count``, so slots are
    reused across segments without clearing.
    """
    size = 1
    while tf_cap > 0 and size < longest + 2:
        size <<= 1
    table = np.zeros((size, 2), np.int64)
    table[:, 1] = -1
    return table


@njit(cache=True)
def cap_votes(
    features: np.ndarray,
    n: int,
    out: np.ndarray,
    tf_cap: int,
    table: np.ndarray,
    stamp: int,
) -> int:
    """The first ``tf_cap`` occurrences of each feature of features[:n], in order, into out
    (which may be ``features``); returns the count kept. A feature's vote weight is then
    min(tf, cap): the most frequent words (function words, navigation) cannot outvote the
    rest, so the fingerprints of pages in one language do not crowd together (README,
    "Detection quality")."""
    if tf_cap <= 0:
        out[:n] = features[:n]
        return n
    size = 16
    while size < 4 * n:  # this segment's part of the table: small, so it stays in cache, and
        size <<= 1  # a quarter full at most, so a feature rarely probes past its own slot
    mask = U64(min(size, table.shape[0]) - 1)
    base = np.int64(stamp) << 8
    kept = 0
    for i in range(n):
        h = features[i]
        slot = U64(h) & mask  # features are mixed hashes: low bits are uniform
        tag = table[slot, 1]
        ours = np.int64((tag >> 8) == stamp)  # 0 or 1: a flag, not a branch
        if ours & np.int64(table[slot, 0] != h):  # another feature's slot: probe on (rare)
            while (table[slot, 1] >> 8) == stamp and table[slot, 0] != h:
                slot = (slot + U64(1)) & mask
            tag = table[slot, 1]
            ours = np.int64((tag >> 8) == stamp)
        # New or seen, kept or not: arithmetic, not branches (either went either way at
        # random for the words of a page and mispredicted, ~8 ns a word).
        tag = base + ours * (tag - base)
        keep = int((tag & 255) < tf_cap)  # the count saturates: never reaches the stamp
        table[slot, 1] = tag + keep
        table[slot, 0] = h
        out[kept] = h
        kept += keep
    return kept
