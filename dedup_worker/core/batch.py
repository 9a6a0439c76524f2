"""Batch mode (Manku et al., §3.3): all pairs within k in a set of fingerprints, and clusters.

One pass per table: bucket the permuted fingerprints by their leading bits with a counting sort
and compare within buckets. A pair is reported by the first table whose key bits it agrees on,
so each pair appears exactly once without a global de-duplication step.
"""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt
from numba import njit

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.design import Design
from dedup_worker.core.planner import plan

logger = logging.getLogger(__name__)

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
I8Array = npt.NDArray[np.int8]

#: Bucketing uses at most this many leading bits (a counting-sort histogram of 2**22 slots).
MAX_BUCKET_BITS = 22


def all_pairs(
    fingerprints: U64Array, k: int, design: Design | None = None
) -> tuple[I64Array, I64Array, I8Array]:
    """Every pair (i, j, distance) with i < j and distance <= k, sorted by (i, j).

    With a ``design`` for a smaller k, the pairs within k that agree on some table's key bits
    (the index's matching rule, see ``index_api.HammingIndex``): all of them up to design.k.
    """
    values = np.ascontiguousarray(fingerprints, dtype=np.uint64)
    if design is None:
        design = plan(max(values.size, 1), k).design()
    if design.k > k:
        raise ValueError(f"design is for k={design.k}, asked for k={k}")
    parts_i, parts_j, parts_d = [], [], []
    ceiling = min(MAX_BUCKET_BITS, max(0, int(np.ceil(np.log2(max(values.size, 1))))))
    for t, table in enumerate(design.tables):
        permuted = hk.permute(values, table.segments)
        bits = min(table.key_bits, ceiling)
        i, j, d = hk.pairs_in_table(values, permuted, bits, k, t, design.key_masks)
        parts_i.append(i)
        parts_j.append(j)
        parts_d.append(d)
    i, j, d = np.concatenate(parts_i), np.concatenate(parts_j), np.concatenate(parts_d)
    order = np.lexsort((j, i))
    return i[order], j[order], d[order]


@njit(cache=True)
def _components(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    parent = np.arange(n)
    for e in range(left.size):
        a, b = left[e], right[e]
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            parent[max(a, b)] = min(a, b)
    for v in range(n):
        root = v
        while parent[root] != root:
            root = parent[root]
        parent[v] = root
    return parent


def clusters(n: int, left: I64Array, right: I64Array) -> I64Array:
    """Connected components of the pair graph: label[v] = smallest index in v's cluster."""
    labels: I64Array = _components(n, left.astype(np.int64), right.astype(np.int64))
    return labels
