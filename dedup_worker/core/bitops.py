"""Compiled 64-bit operations of the core's kernels, public for kernels outside the core.

Both are numba functions: callable from other ``@njit`` code (the evaluation package's exact
scans and its MinHash baseline) as well as from Python. ``fmix64`` is part of fingerprint and
sketch version 1 (every stable hash of the project goes through it), so a kernel elsewhere that
must see the same hashes calls this one instead of a copy.
"""

from __future__ import annotations

from dedup_worker.core._hamming_kernel import popcount
from dedup_worker.core._simhash_kernel import fmix64

__all__ = ["fmix64", "popcount"]
