"""Brute-force popcount oracle and fingerprint generators shared by the core tests."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

U64Array = npt.NDArray[np.uint64]


def brute_pairs(fps: U64Array, k: int) -> list[tuple[int, int, int]]:
    """Every (i, j, distance) with i < j and distance <= k, sorted."""
    out = []
    for i in range(fps.size - 1):
        dist = np.bitwise_count(fps[i] ^ fps[i + 1 :])
        out.extend((i, i + 1 + int(j), int(dist[j])) for j in np.flatnonzero(dist <= k))
    return out


def brute_matches(stored: U64Array, queries: U64Array, k: int) -> list[tuple[int, int, int]]:
    """(query index, stored index, distance) for every stored entry within k of a query."""
    out = []
    for q in range(queries.size):
        dist = np.bitwise_count(stored ^ queries[q])
        out.extend((q, int(j), int(dist[j])) for j in np.flatnonzero(dist <= k))
    return sorted(out)


@st.composite
def clustered(draw: st.DrawFn, max_families: int = 25, max_flip: int = 10) -> U64Array:
    """Families of near-duplicates: a random base and variants with a few flipped bits."""
    seed = draw(st.integers(0, 2**32 - 1))
    families = draw(st.integers(1, max_families))
    rng = np.random.default_rng(seed)
    values: list[int] = []
    for _ in range(families):
        base = int(rng.integers(0, 2**64, dtype=np.uint64))
        values.append(base)
        for _ in range(int(rng.integers(0, 5))):
            flips = rng.choice(64, size=int(rng.integers(0, max_flip + 1)), replace=False)
            values.append(base ^ sum(1 << int(b) for b in flips))
    order = rng.permutation(len(values))
    return np.array(values, dtype=np.uint64)[order]


uniform = st.lists(st.integers(0, 2**64 - 1), max_size=60).map(
    lambda v: np.array(v, dtype=np.uint64)
)
fingerprint_sets = clustered() | uniform
