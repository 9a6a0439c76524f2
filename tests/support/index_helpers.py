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
    """

    k: int
    entries: list[tuple[int, int]] = field(default_factory=list)
    key_masks: tuple[int, ...] = ()

    def _near(self, fp: int, q: int) -> set[Row]:
        return {
            (q, i, f, (f ^ fp).bit_count())
            for f, i in self.entries
            if (f ^ fp).bit_count() <= self.k and self._agrees(f ^ fp)
        }

    def _agrees(self, diff: int) -> bool:
        return not self.key_masks or any(diff & mask == 0 for mask in self.key_masks)

    def query(self, fps: np.ndarray) -> set[Row]:
        rows: set[Row] = set()
        for q, fp in enumerate(fps.tolist()):
            rows |= self._near(fp, q)
        return rows

    def probe_insert(self, fps: np.ndarray, ids: np.ndarray) -> set[Row]:
        """Entry q sees what is stored plus entries < q of the batch; exact replays not stored."""
        rows: set[Row] = set()
        for q, (fp, ident) in enumerate(zip(fps.tolist(), ids.tolist(), strict=True)):
            rows |= self._near(fp, q)
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
