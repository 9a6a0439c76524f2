"""Numba kernels of Broder's detector: k-permutation MinHash and super-shingles.

``n`` independent minima per page over its word 4-shingle hashes (``core.sketch.
shingle_hashes``, the tokens every sketch samples), one fmix64 permutation each: slower than
the one-permutation sketch the worker verifies with, kept as the textbook baseline of
``neardup eval``. The constants pin the golden values in
``tests/unit/dedup_worker/core/test_sketch.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core.bitops import fmix64

U64 = np.uint64
EMPTY = U64(0xFFFFFFFFFFFFFFFF)
_PERM_SEED = U64(0x2545F4914F6CDD1D)
_SUPER_MUL = U64(0xBF58476D1CE4E5B9)


@njit(cache=True, nogil=True)
def minhash(hashes: np.ndarray, offsets: np.ndarray, n_perm: int) -> np.ndarray:
    """``n_perm`` independent minima of each page's shingle hashes (rows of empty pages are
    all ``EMPTY``); page d's hashes are ``hashes[offsets[d]:offsets[d + 1]]``."""
    pages = offsets.size - 1
    out = np.full((pages, n_perm), EMPTY, dtype=np.uint64)
    seeds = np.empty(n_perm, dtype=np.uint64)
    for p in range(n_perm):
        seeds[p] = fmix64(_PERM_SEED + U64(p))
    for d in range(pages):
        for i in range(offsets[d], offsets[d + 1]):
            h = U64(hashes[i])
            for p in range(n_perm):
                out[d, p] = min(out[d, p], fmix64(h ^ seeds[p]))
    return out


@njit(cache=True)
def super_shingles(minhashes: np.ndarray, groups: int, size: int) -> np.ndarray:
    """Broder's super-shingles: a hash of each of ``groups`` runs of ``size`` minima."""
    out = np.empty((minhashes.shape[0], groups), dtype=np.uint64)
    for d in range(minhashes.shape[0]):
        for g in range(groups):
            h = U64(g + 1)
            for j in range(size):
                h = (h ^ minhashes[d, g * size + j]) * _SUPER_MUL
            out[d, g] = fmix64(h)
    return out
