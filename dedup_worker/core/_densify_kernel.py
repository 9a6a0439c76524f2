"""Numba kernels that fill a one-permutation-hashing sketch's empty bins (sketch version 1).

Shrivastava's optimal densification (2017): an empty bin takes the value of the first full bin
on its own fixed pseudo-random probe sequence (attempt t of bin i looks at bin
``fmix64(i * _PROBE_MUL + t) >> shift``), so two pages agree on an empty bin exactly as often
as on a full one. Every constant here defines sketch version 1 with ``_sketch_kernel``; the
tables below only cache probes, so they change no sketch (``test_kernel_equivalence``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dedup_worker.core._simhash_kernel import fmix64

U64 = np.uint64
EMPTY = U64(0xFFFFFFFFFFFFFFFF)
_PROBE_MUL = U64(0x9E3779B97F4A7C15)
#: Probe attempts looked up in a table (``probe_table``) rather than hashed: a 900-word page
#: leaves ~40% of 1024 bins empty, 3% of them still empty after four attempts, but a page
#: with an eighth to a quarter of the bins full (a third of the corpus's pages) leaves a tenth
#: or more still empty after eight: 16 attempts densify those in 7.3 us instead of 8.7.
PROBE_TABLE_ATTEMPTS = 16
#: Probe attempts per bin looked up in ``probe_chains`` by sparse pages (fewer full bins than an
#: eighth): a bin's first 64 probes side by side, so its scan reads one or two cache lines
#: instead of hashing each attempt. A page with 64 of 1,024 bins full leaves 1.6% of its empty
#: bins to hash beyond them.
CHAIN_ATTEMPTS = 64


@njit(cache=True)
def probe_table(log2_bins: int) -> np.ndarray:
    """probes[t - 1, i]: the bin that attempt t of empty bin i looks at, for the first
    ``PROBE_TABLE_ATTEMPTS`` attempts (a load instead of an fmix64 per probe)."""
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    probes = np.empty((PROBE_TABLE_ATTEMPTS, m), dtype=np.uint16)
    for t in range(PROBE_TABLE_ATTEMPTS):
        for i in range(m):
            probes[t, i] = np.uint16(_probe(i, t + 1, shift))
    return probes


@njit(cache=True)
def probe_chains(log2_bins: int) -> np.ndarray:
    """chains[i, t - 1]: the bin that attempt t of bin i looks at, for the first
    ``CHAIN_ATTEMPTS`` attempts (``probe_table`` transposed and deeper: ``_densify_bin_by_bin``)."""
    m = 1 << log2_bins
    shift = U64(64 - log2_bins)
    chains = np.empty((m, CHAIN_ATTEMPTS), dtype=np.uint16)
    for i in range(m):
        for t in range(CHAIN_ATTEMPTS):
            chains[i, t] = np.uint16(_probe(i, t + 1, shift))
    return chains


@njit(cache=True, inline="always")
def _probe(i: int, attempt: int, shift: U64) -> np.uint64:
    """Attempt ``attempt`` (1, 2, ...) of bin i's fixed pseudo-random probe sequence."""
    probed: np.uint64 = fmix64(U64(i) * _PROBE_MUL + U64(attempt)) >> shift
    return probed


@njit(cache=True)
def _densify(
    mins: np.ndarray,
    out: np.ndarray,
    shift: U64,
    probes: np.ndarray,
    todo: np.ndarray,
    chains: np.ndarray,
) -> None:
    """out = mins with every empty bin filled from the first full bin of its probe sequence.

    Breadth first while at least an eighth of the bins are full: the empty bins are listed,
    then each pass tries the next attempt of every bin still listed and keeps those whose probe
    hit an empty bin. Every pass stores the value it probed, so a bin ends with its first full
    bin's value, as probing bin by bin gives, but no branch depends on the data: bin by bin, the
    "is it empty" and "probe again" branches mispredicted about once per empty bin (8 us for
    1024 bins and a 900-word page; 1.6 us this way). Sparser sketches (pages of fewer shingles
    than an eighth of the bins) need many attempts per bin, which the bin-by-bin loop predicts
    well and runs faster. ``probes`` is ``probe_table``, ``chains`` is ``probe_chains``; ``todo``
    is scratch of ``mins.size``.
    """
    m = mins.size
    n = 0
    for i in range(m):
        value = mins[i]
        out[i] = value
        todo[n] = i
        n += 1 if value == EMPTY else 0
    if n == m:
        return
    if 8 * (m - n) < m:
        _densify_bin_by_bin(mins, out, shift, todo, n, chains)
        return
    attempt = 0
    while n > 0:
        attempt += 1
        left = 0
        if attempt <= probes.shape[0]:
            row = probes[attempt - 1]
            for k in range(n):
                i = todo[k]
                value = mins[row[i]]
                out[i] = value
                todo[left] = i
                left += 1 if value == EMPTY else 0
        else:
            for k in range(n):
                i = todo[k]
                value = mins[_probe(i, attempt, shift)]
                out[i] = value
                todo[left] = i
                left += 1 if value == EMPTY else 0
        n = left


@njit(cache=True, inline="always")
def _densify_bin_by_bin(
    mins: np.ndarray, out: np.ndarray, shift: U64, todo: np.ndarray, n: int, chains: np.ndarray
) -> None:
    """``_densify`` for the ``n`` empty bins listed in ``todo``, one bin at a time: its first
    attempts read from ``chains``, the rest hashed. A third of real pages are this sparse
    (short pages), each empty bin taking ~bins / full bins attempts; reading them cut the
    densification of pages with 16-128 full bins of 1,024 by about a quarter."""
    depth = chains.shape[1]
    for k in range(n):
        i = todo[k]
        chain = chains[i]
        t = 0
        while t < depth and mins[chain[t]] == EMPTY:
            t += 1
        if t < depth:
            out[i] = mins[chain[t]]
            continue
        attempt = depth + 1
        while mins[_probe(i, attempt, shift)] == EMPTY:
            attempt += 1
        out[i] = mins[_probe(i, attempt, shift)]
