"""Helpers of the index contract tests: backend lists, a brute-force oracle, planted data."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from dedup_worker.core.index_api import HammingIndex, Matches

U64 = np.uint64
Row = tuple[int, int, int, int]
IndexFactory = Callable[..., HammingIndex]

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]
REDIS_BACKENDS: list[Any] = BACKENDS[1:]

# ---- oracle ------------------------------------------------------------------------------


@dataclass
class Oracle:
    """Brute-force reference semantics: a set of (fingerprint, id) entries.

    ``key_masks`` (a design's tables' key bits) applies the rule of a search radius beyond the
    design's k: an entry matches only if it also agrees with the query on some table's key.
    ``key_orders`` (each table's key bit positions, in its order) and ``flips``: with a query's
    margins, it may also differ on the ``flips`` key bits of a table of smallest margin there
    (equal margins: the one first in the table's order), in the first ``flip_tables`` tables
    (those of the design's first replica).
    """

    k: int
    entries: list[tuple[int, int]] = field(default_factory=list)
    key_masks: tuple[int, ...] = ()
    key_orders: tuple[tuple[int, ...], ...] = ()
    flips: int = 0
    flip_tables: int = 0

    def _near(self, fp: int, q: int, masks: tuple[int, ...]) -> set[Row]:
        return {
            (q, i, f, (f ^ fp).bit_count())
            for f, i in self.entries
            if (f ^ fp).bit_count() <= self.k and self._agrees(f ^ fp, masks)
        }

    @staticmethod
    def _agrees(diff: int, masks: tuple[int, ...]) -> bool:
        return not masks or any(diff & mask == 0 for mask in masks)

    def _masks(self, margins: list[int] | None) -> tuple[int, ...]:
        """The key bits the query must share per table: all of them less its slack."""
        if margins is None or not self.flips:
            return self.key_masks
        out = []
        for table, (mask, order) in enumerate(zip(self.key_masks, self.key_orders, strict=True)):
            ranked = sorted(range(len(order)), key=lambda at: (margins[order[at]], at))
            flips = self.flips if table < self.flip_tables else 0
            out.append(mask & ~sum(1 << order[at] for at in ranked[:flips]))
        return tuple(out)

    def query(self, fps: np.ndarray, margins: np.ndarray | None = None) -> set[Row]:
        rows: set[Row] = set()
        for q, fp in enumerate(fps.tolist()):
            rows |= self._near(fp, q, self._masks(None if margins is None else margins[q].tolist()))
        return rows

    def probe_insert(
        self, fps: np.ndarray, ids: np.ndarray, margins: np.ndarray | None = None
    ) -> set[Row]:
        """Entry q sees what is stored plus entries < q of the batch; exact replays not stored."""
        rows: set[Row] = set()
        for q, (fp, ident) in enumerate(zip(fps.tolist(), ids.tolist(), strict=True)):
            masks = self._masks(None if margins is None else margins[q].tolist())
            rows |= self._near(fp, q, masks)
            if (fp, ident) not in self.entries:
                self.entries.append((fp, ident))
        return rows

    def delete(self, fps: np.ndarray, ids: np.ndarray) -> int:
        doomed = set(zip(fps.tolist(), ids.tolist(), strict=True))
        before = len(self.entries)
        self.entries = [e for e in self.entries if e not in doomed]
        return before - len(self.entries)


def rows(matches: Matches) -> set[Row]:
    """The rows of a result, after checking its documented order and that no row repeats."""
    q, i, f, d = (
        a.tolist() for a in (matches.query, matches.id, matches.fingerprint, matches.distance)
    )
    listed = list(zip(q, i, f, d, strict=True))
    assert [(r[0], r[3], r[1]) for r in listed] == sorted((r[0], r[3], r[1]) for r in listed)
    assert len(set(listed)) == len(listed), "a (query, id, fingerprint) row repeats"
    return set(listed)


def without_self(found: set[Row], ids: np.ndarray) -> set[Row]:
    """Rows minus distance-0 matches of a query with its own id (replays)."""
    return {r for r in found if not (r[3] == 0 and r[1] == int(ids[r[0]]))}


# ---- planted data --------------------------------------------------------------------------


def flip(fp: int, bits: list[int]) -> int:
    for bit in bits:
        fp ^= 1 << bit
    return fp


def planted(
    rng: np.random.Generator, families: int, members: int, singles: int, k: int, id_base: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Families (a base, and variants 0..k+2 bits away) plus random singles, shuffled.

    Distance-0 variants share the base's fingerprint under another id. Ids are distinct.
    """
    fps: list[int] = []
    for _ in range(families):
        base = int(rng.integers(0, 2**64, dtype=U64))
        fps.append(base)
        for _ in range(members):
            flips = int(rng.integers(0, k + 3))
            fps.append(flip(base, rng.choice(64, size=flips, replace=False).tolist()))
    fps.extend(int(x) for x in rng.integers(0, 2**64, size=singles, dtype=U64))
    order = rng.permutation(len(fps))
    values = np.array(fps, dtype=U64)[order] if fps else np.zeros(0, dtype=U64)
    return values, np.arange(id_base, id_base + values.size, dtype=U64)


def split(fps: np.ndarray, ids: np.ndarray, cuts: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The entries cut into consecutive batches at the given positions."""
    bounds = [0, *sorted(c % (fps.size + 1) for c in cuts), fps.size]
    return [(fps[lo:hi], ids[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
