"""The index interface every backend implements (in-memory here, Redis in the adapters).

Entries are (fingerprint, id) pairs of uint64; the id is the caller's (e.g. a page's order
key). Calls take and return numpy arrays so that a batch costs one kernel call, not one Python
call per page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
I8Array = npt.NDArray[np.int8]

#: Reserved id marking a deleted entry; callers may not insert it.
TOMBSTONE = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class Matches:
    """Stored entries within distance k of each query, sorted by (query, distance, id)."""

    query: I64Array
    id: U64Array
    fingerprint: U64Array
    distance: I8Array

    def __len__(self) -> int:
        return int(self.query.size)

    @classmethod
    def empty(cls) -> Matches:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.int8),
        )

    @classmethod
    def build(cls, query: I64Array, ids: U64Array, fps: U64Array, dist: I8Array) -> Matches:
        order = np.lexsort((ids, dist, query))
        return cls(query[order], ids[order], fps[order], dist[order])

    def concat(self, other: Matches) -> Matches:
        return Matches.build(
            np.concatenate([self.query, other.query]),
            np.concatenate([self.id, other.id]),
            np.concatenate([self.fingerprint, other.fingerprint]),
            np.concatenate([self.distance, other.distance]),
        )

    def unique(self) -> Matches:
        """Drop repeated (query, id, fingerprint) rows (a replayed batch meets itself twice)."""
        if self.query.size < 2:
            return self
        keep = np.ones(self.query.size, dtype=bool)
        order = np.lexsort((self.fingerprint, self.id, self.query))
        q, i, f = self.query[order], self.id[order], self.fingerprint[order]
        keep[1:] = (q[1:] != q[:-1]) | (i[1:] != i[:-1]) | (f[1:] != f[:-1])
        chosen = order[keep]
        return Matches.build(
            self.query[chosen], self.id[chosen], self.fingerprint[chosen], self.distance[chosen]
        )

    def for_query(self, index: int) -> list[tuple[int, int, int]]:
        """[(id, fingerprint, distance)] of one query, nearest first."""
        lo, hi = np.searchsorted(self.query, [index, index + 1])
        return [
            (int(self.id[j]), int(self.fingerprint[j]), int(self.distance[j]))
            for j in range(lo, hi)
        ]


class HammingIndex(Protocol):
    """Exact Hamming-distance search over 64-bit fingerprints with caller-chosen ids."""

    @property
    def k(self) -> int: ...

    def __len__(self) -> int: ...

    def query(self, fingerprints: U64Array) -> Matches:
        """Entries within distance k of each fingerprint; nothing is inserted."""
        ...

    def probe_insert(self, fingerprints: U64Array, ids: U64Array) -> Matches:
        """Query, then insert, as one step: query i also sees entries 0..i-1 of this batch.

        An (fingerprint, id) entry that is already stored is not stored twice (replay safety);
        it is reported as a match of distance 0 with its own id.
        """
        ...

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None: ...

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        """Remove the given entries; returns how many were present."""
        ...
