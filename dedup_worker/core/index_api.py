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

from dedup_worker.core.design import MAX_K, Design
from dedup_worker.errors import ConfigError, IndexError_

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
I32Array = npt.NDArray[np.int32]
I8Array = npt.NDArray[np.int8]

#: Reserved id marking a deleted entry; callers may not insert it.
TOMBSTONE = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class Matches:
    """Stored entries matching each query, sorted by (query, distance, id)."""

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
    """Hamming-distance search over 64-bit fingerprints with caller-chosen ids.

    A match is a stored entry within distance ``k`` (the search radius) of the query that agrees
    with it exactly on the key bits of at least one table of the design. The tables make that
    rule complete up to ``design.k`` (pigeonhole): every entry that near is found. Between
    ``design.k`` and ``k`` an entry is found when its differing bits spare one table's key,
    which the planner reports per distance (``planner.coverage``).

    With ``flips`` > 0 and the queries' ``margins`` (``Fingerprinter.fingerprint_margins``),
    a query may also differ from the entry on its slack bits of the table (``Design.slack``:
    its ``flips`` key bits of smallest margin there): the probe reads those buckets too. The
    rule then depends on the query, so a pair beyond ``design.k`` may be found from one side
    only (README, "The detector"). The rule depends on the design, the radius, the flips and
    the margins, never on a backend's buckets, so every backend returns the same matches.
    """

    @property
    def k(self) -> int:
        """The search radius (at least the design's k)."""
        ...

    def __len__(self) -> int: ...

    def query(self, fingerprints: U64Array, margins: I32Array | None = None) -> Matches:
        """The matches of each fingerprint (see the class doc); nothing is inserted."""
        ...

    def probe_insert(
        self, fingerprints: U64Array, ids: U64Array, margins: I32Array | None = None
    ) -> Matches:
        """Query, then insert, as one step: query i also sees entries 0..i-1 of this batch.

        An (fingerprint, id) entry that is already stored is not stored twice (replay safety);
        it is reported as a match of distance 0 with its own id.
        """
        ...

    def mutual(self, diff: int) -> bool:
        """Whether a pair with this XOR matches whichever of the two probes (within ``k`` and,
        beyond ``design.k``, agreeing on a table's key exactly): true of every match found
        without a flip. Only such pairs are symmetric, so only they may correct a page decided
        before its earlier near-duplicate was stored (``engine``)."""
        ...

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None: ...

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        """Remove the given entries; returns how many were present."""
        ...


def mutual_match(design: Design, radius: int, diff: int) -> bool:
    """``HammingIndex.mutual`` of an index over ``design`` searching ``radius`` bits."""
    distance = diff.bit_count()
    if distance > radius:
        return False
    return distance <= design.k or any(diff & int(mask) == 0 for mask in design.key_masks)


def check_radius(radius: int | None, design_k: int) -> int:
    """The search radius of an index over a design for ``design_k`` (default: ``design_k``)."""
    value = design_k if radius is None else radius
    if not design_k <= value <= MAX_K:
        raise ConfigError(
            f"search radius must be between the table design's k ({design_k}) and {MAX_K}, "
            f"got {value}"
        )
    return value


def probe_slack(
    design: Design, radius: int, flips: int, margins: I32Array | None, n: int
) -> U64Array | None:
    """Each query's slack bits per table (``Design.slack``), or None where they change
    nothing: no margins, no flips, or a radius within the design's k (whose tables already
    find every entry that near)."""
    if margins is None or flips == 0 or radius <= design.k:
        return None
    values = np.asarray(margins)
    if values.shape != (n, 64):
        raise IndexError_(f"margins must have shape ({n}, 64), got {values.shape}")
    return design.slack(values.astype(np.int32, copy=False), flips)


def rule_masks(key_masks: U64Array, slack: U64Array | None, n: int) -> U64Array:
    """Per query (row) and table, the key bits it must share with an entry: the table's key
    bits without the query's slack."""
    if slack is None:
        return np.ascontiguousarray(np.broadcast_to(key_masks, (n, key_masks.size)))
    return np.ascontiguousarray(key_masks[None, :] & ~slack)


def submasks(masks: U64Array) -> tuple[I64Array, U64Array]:
    """(row, submask) for every non-zero submask of each mask, row by row: the flips a probe
    tries (a slack of f bits has 2**f - 1)."""
    rows: list[I64Array] = []
    subs: list[U64Array] = []
    index = np.arange(masks.size, dtype=np.int64)
    current = masks.copy()
    one = np.uint64(1)
    while True:
        live = current != 0
        if not live.any():
            break
        rows.append(index[live])
        subs.append(current[live])
        current = np.where(live, (current - one) & masks, np.uint64(0))
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    row, sub = np.concatenate(rows), np.concatenate(subs)
    order = np.argsort(row, kind="stable")
    return row[order], sub[order]


def agrees_on_a_key(diff: U64Array, key_masks: U64Array) -> npt.NDArray[np.bool_]:
    """For each XOR of a query and an entry: do they agree on some table's key bits?
    ``key_masks``: the tables' key masks, or one row of masks per XOR (``rule_masks``)."""
    if diff.size == 0:
        return np.zeros(0, dtype=bool)
    masks = key_masks if key_masks.ndim == 2 else key_masks[None, :]
    return np.asarray(((diff[:, None] & masks) == 0).any(axis=1))
