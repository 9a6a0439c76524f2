"""Numba kernels behind ``quality.py``: exact set resemblance and exhaustive pair scans.

Evaluation must be exact, not fast-and-approximate like the detectors it scores: shingle sets
are compared element by element, and Hamming pairs come from a full scan, not from tables.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core.bitops import popcount


@njit(cache=True)
def sorted_sets(hashes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each document's hashes sorted and de-duplicated: (values, offsets)."""
    out = np.empty(hashes.size, dtype=np.uint64)
    new = np.zeros(offsets.size, dtype=np.int64)
    at = 0
    for d in range(offsets.size - 1):
        part = np.sort(hashes[offsets[d] : offsets[d + 1]])
        for i in range(part.size):
            if i == 0 or part[i] != part[i - 1]:
                out[at] = part[i]
                at += 1
        new[d + 1] = at
    return out[:at], new


@njit(cache=True)
def _intersection(a: np.ndarray, b: np.ndarray) -> int:
    i = j = same = 0
    while i < a.size and j < b.size:
        if a[i] == b[j]:
            same += 1
            i += 1
            j += 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return same


@njit(cache=True)
def intersections(
    values: np.ndarray, offsets: np.ndarray, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """|A ∩ B| for every pair of sorted sets (left[p], right[p])."""
    out = np.empty(left.size, dtype=np.int64)
    for p in range(left.size):
        a = values[offsets[left[p]] : offsets[left[p] + 1]]
        b = values[offsets[right[p]] : offsets[right[p] + 1]]
        out[p] = _intersection(a, b)
    return out


@njit(cache=True)
def hamming_pairs(fps: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair i < j with popcount(fps[i] ^ fps[j]) <= limit (full scan, two passes)."""
    n = fps.size
    count = 0
    for i in range(n):
        for j in range(i + 1, n):
            count += 1 if popcount(fps[i] ^ fps[j]) <= limit else 0
    left = np.empty(count, dtype=np.int64)
    right = np.empty(count, dtype=np.int64)
    dist = np.empty(count, dtype=np.int64)
    at = 0
    for i in range(n):
        for j in range(i + 1, n):
            d = popcount(fps[i] ^ fps[j])
            if d <= limit:
                left[at] = i
                right[at] = j
                dist[at] = d
                at += 1
    return left, right, dist


@njit(cache=True)
def _posting_scan(
    token: np.ndarray,
    doc: np.ndarray,
    size: np.ndarray,
    ratio: float,
    left: np.ndarray,
    right: np.ndarray,
) -> int:
    """Count (and store, when ``left`` has room) the pairs of ``posting_pairs``."""
    at = 0
    start = 0
    while start < token.size:
        stop = start
        while stop < token.size and token[stop] == token[start]:
            stop += 1
        for x in range(start, stop):
            for y in range(x + 1, stop):
                a, b = min(doc[x], doc[y]), max(doc[x], doc[y])
                if a != b and min(size[a], size[b]) >= ratio * max(size[a], size[b]):
                    if at < left.size:
                        left[at] = a
                        right[at] = b
                    at += 1
        start = stop
    return at


@njit(cache=True)
def posting_pairs(
    token: np.ndarray, doc: np.ndarray, size: np.ndarray, ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of documents sharing a token (rows sorted by token), passing the length filter.

    A pair can reach resemblance ``ratio`` only if the smaller set has at least ``ratio`` times
    the elements of the larger one, so the others are never verified. Pairs may repeat.
    """
    empty = np.empty(0, dtype=np.int64)
    count = _posting_scan(token, doc, size, ratio, empty, empty)
    left = np.empty(count, dtype=np.int64)
    right = np.empty(count, dtype=np.int64)
    _posting_scan(token, doc, size, ratio, left, right)
    return left, right
