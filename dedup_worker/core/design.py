"""Permuted-table designs for exact Hamming search (Manku, Jain, Das Sarma, WWW 2007, §3.1).

Split the f = 64 bits into r blocks. Two fingerprints within distance k differ in at most k
blocks, so they agree exactly on at least r - k of them. One table per choice of r - k blocks
(C(r, k) tables) puts those blocks in the leading bits, and a probe that matches the leading
bits exactly finds every candidate. The remaining bits can be split again (the paper's
two-level designs, e.g. 4 x 4 = 16 tables with 28 leading bits); the pigeonhole argument repeats
on them, because all differing bits lie outside the leading blocks.

A ``Table`` is a bit permutation: ``order[i]`` is the original bit position (63 = most
significant) that lands in permuted position 63 - i. Permutations preserve Hamming distance, so
distances can be computed on permuted values directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from math import comb

import numpy as np
import numpy.typing as npt

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.errors import ConfigError

F = 64
MAX_K = 16
MAX_REPLICAS = 4
#: Key bits a probe may try flipped per table (each doubles the buckets it reads).
MAX_FLIPS = 3


@dataclass(frozen=True)
class Table:
    """One permuted table: the permutation and how many leading bits form its key."""

    order: tuple[int, ...]
    key_bits: int

    @cached_property
    def segments(self) -> npt.NDArray[np.int64]:
        """Rows (source shift, width, destination shift): contiguous runs of the permutation."""
        return np.array(_segments(self.order), dtype=np.int64).reshape(-1, 3)

    @cached_property
    def inverse_segments(self) -> npt.NDArray[np.int64]:
        """Segments of the inverse permutation (permuted value back to the original)."""
        return self.segments[:, [2, 1, 0]].copy()

    @cached_property
    def key_mask(self) -> int:
        """The key bits, in original bit positions."""
        return sum(1 << bit for bit in self.order[: self.key_bits])

    def permute(self, fingerprint: int) -> int:
        """Apply this table's permutation to one fingerprint (reference implementation)."""
        out = 0
        for index, bit in enumerate(self.order):
            out |= ((fingerprint >> bit) & 1) << (F - 1 - index)
        return out

    def permute_all(self, fingerprints: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """``permute`` of every fingerprint, compiled (what index backends key their tables on)."""
        permuted: npt.NDArray[np.uint64] = hk.permute(fingerprints, self.segments)
        return permuted


@dataclass(frozen=True)
class Design:
    """A family of tables that together find every pair within distance ``k``.

    ``replicas`` > 1 repeats the tables over other orders of the 64 bits: each replica alone
    is complete up to k, and together they find more of the pairs beyond k (a pair is missed
    only if its differing bits touch too many blocks in every replica).
    """

    k: int
    splits: tuple[int, ...]
    tables: tuple[Table, ...]
    replicas: int = 1

    @property
    def name(self) -> str:
        """E.g. ``6c3`` (6 blocks, keyed on 3), ``4c1>4c1`` (two levels), ``4c1x2`` (twice)."""
        base = ">".join(f"{r}c{r - self.k}" for r in self.splits)
        return base if self.replicas == 1 else f"{base}x{self.replicas}"

    @property
    def key_bits(self) -> tuple[int, int]:
        """The smallest and largest number of leading (key) bits over the tables."""
        bits = [table.key_bits for table in self.tables]
        return min(bits), max(bits)

    @cached_property
    def key_masks(self) -> npt.NDArray[np.uint64]:
        return np.array([table.key_mask for table in self.tables], dtype=np.uint64)

    @cached_property
    def segments(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """All tables' segments stacked, with row offsets per table (for the kernels)."""
        rows = [table.segments for table in self.tables]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(r) for r in rows])
        return np.vstack(rows), offsets

    @cached_property
    def key_positions(self) -> tuple[npt.NDArray[np.int64], ...]:
        """Each table's key bits (original positions), in the table's order."""
        return tuple(np.array(t.order[: t.key_bits], dtype=np.int64) for t in self.tables)

    def slack(self, margins: npt.NDArray[np.int32], flips: int) -> npt.NDArray[np.uint64]:
        """Per page (row) and table (column), the key bits its probe may find flipped: in each
        table of the first replica, its ``flips`` key bits of smallest margin
        (``Fingerprinter.fingerprint_margins``; of equal margins, the one first in the table's
        order); none in the other replicas' tables.

        A near-duplicate's fingerprint differs from the page's mostly where the page's votes
        were close to a tie, so a probe that also reads the buckets of those bits flipped finds
        pairs 5-8 bits apart that agree on no table's key exactly (README, "The detector").
        Flips in the second replica's tables as well found 0-0.2 points more recall for twice
        the buckets read.
        """
        check_flips(flips)
        positions, widths = self._key_position_table
        slack: npt.NDArray[np.uint64] = hk.weakest_bits(
            np.ascontiguousarray(margins, dtype=np.int32), positions, widths, flips
        )
        slack[:, len(self.tables) // self.replicas :] = 0
        return slack

    @cached_property
    def _key_position_table(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``key_positions`` as one array (a row per table, padded) and each row's width."""
        widths = np.array([p.size for p in self.key_positions], dtype=np.int64)
        table = np.zeros((len(self.tables), max(int(widths.max(initial=0)), 1)), dtype=np.int64)
        for t, positions in enumerate(self.key_positions):
            table[t, : positions.size] = positions
        return table, widths

    def describe(self) -> str:
        low, high = self.key_bits
        bits = f"{low}" if low == high else f"{low}..{high}"
        return f"{self.name}: {len(self.tables)} tables, {bits} leading bits, k={self.k}"


def check_flips(flips: int) -> int:
    """``flips`` if it is a valid number of probe flips per table, else a ConfigError."""
    if not 0 <= flips <= MAX_FLIPS:
        raise ConfigError(f"probe flips must be 0..{MAX_FLIPS}, got {flips}")
    return flips


def build_design(k: int, splits: Sequence[int], replicas: int = 1) -> Design:
    """The design that splits 64 bits into ``splits[0]`` blocks, then the rest into ``splits[1]``…

    Every level must have more blocks than k (so that r - k >= 1 blocks agree) and no block
    may be empty. Replica 0 cuts the bits in their natural order; replica j > 0 cuts them in
    a fixed pseudo-random order (``replica_order``).
    """
    if not 0 <= k <= MAX_K:
        raise ConfigError(f"k must be 0..{MAX_K}, got {k}")
    if not splits:
        raise ConfigError("a design needs at least one level of blocks")
    if not 1 <= replicas <= MAX_REPLICAS:
        raise ConfigError(f"replicas must be 1..{MAX_REPLICAS}, got {replicas}")
    tables = [
        Table(order, key_bits)
        for replica in range(replicas)
        for order, key_bits in _level(replica_order(replica), 0, k, tuple(splits))
    ]
    return Design(k=k, splits=tuple(splits), tables=tuple(tables), replicas=replicas)


def replica_order(replica: int) -> tuple[int, ...]:
    """The order in which a replica cuts the 64 bit positions into blocks (63 first).

    Replica 0: 63..0. Others: sorted by a stable hash of (replica, bit), so every process and
    release builds the same tables (BLAKE2b, never Python's salted hash()). A scattered order
    finds pairs beyond k as often as a random one (0.93 of 5-bit differences for 4c1x2, vs
    0.92 for blocks merely rotated by 8 bits).
    """
    bits = tuple(range(F - 1, -1, -1))
    if replica == 0:
        return bits

    def rank(bit: int) -> bytes:
        return hashlib.blake2b(f"neardup-replica:{replica}:{bit}".encode(), digest_size=8).digest()

    return tuple(sorted(bits, key=rank))


def _level(
    bits: tuple[int, ...], key_bits: int, k: int, splits: tuple[int, ...]
) -> list[tuple[tuple[int, ...], int]]:
    """Permutations for ``bits`` (the not-yet-leading bits, in order) under ``splits``."""
    if not splits:
        return [(bits, key_bits)]
    r = splits[0]
    free = bits[key_bits:]
    if r <= k or r > len(free):
        raise ConfigError(f"cannot split {len(free)} bits into {r} blocks for k={k}")
    blocks = _blocks(free, r)
    out = []
    for chosen in combinations(range(r), r - k):
        lead = tuple(b for i in chosen for b in blocks[i])
        rest = tuple(b for i in range(r) if i not in chosen for b in blocks[i])
        prefix = bits[:key_bits] + lead
        out.extend(_level(prefix + rest, len(prefix), k, splits[1:]))
    return out


def _blocks(bits: tuple[int, ...], r: int) -> list[tuple[int, ...]]:
    """``bits`` cut into r consecutive blocks whose sizes differ by at most one (larger first)."""
    size, extra = divmod(len(bits), r)
    blocks, start = [], 0
    for i in range(r):
        width = size + (1 if i < extra else 0)
        blocks.append(bits[start : start + width])
        start += width
    return blocks


def _segments(order: tuple[int, ...]) -> list[int]:
    """Flatten ``order`` into runs of consecutive source bits: [src_shift, width, dst_shift]*."""
    out: list[int] = []
    index = 0
    while index < F:
        run = 1
        while index + run < F and order[index + run] == order[index] - run:
            run += 1
        low_source = order[index] - run + 1
        low_dest = F - index - run
        out.extend((low_source, run, low_dest))
        index += run
    return out


def table_count(k: int, splits: Sequence[int], replicas: int = 1) -> int:
    """Number of tables of a design, without building it."""
    count = replicas
    for r in splits:
        count *= comb(r, k)
    return count
