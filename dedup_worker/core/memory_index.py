"""In-process permuted tables: sorted runs plus a small unsorted tail.

Inserts land in a tail of at most ``TAIL_MAX`` entries that queries scan by brute force. A full
tail (or any batch larger than it) becomes a sorted run: one sorted array of permuted keys per
table, with a bucket directory each, and the ids beside table 0. Runs are merged when a newer
run grows to 1/``MERGE_RATIO`` of the one before it, so there are O(log n) runs and every entry
is rewritten O(log n) times: inserts never re-sort the whole index.

Deletes mark the id in table 0 as a tombstone; ``compact()`` (run automatically when a quarter
of the entries are tombstones) rebuilds the tables without them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.batch import all_pairs
from dedup_worker.core.design import Design
from dedup_worker.core.index_api import TOMBSTONE, I8Array, I64Array, Matches, U64Array
from dedup_worker.errors import IndexError_

logger = logging.getLogger(__name__)

TAIL_MAX = 256
MERGE_RATIO = 8
#: A run's directory has about one offset per this many entries.
BUCKET_TARGET = 8


@dataclass
class _Run:
    """One sorted run: per table the permuted keys and their directory; ids beside table 0."""

    keys: list[U64Array]
    offsets: list[I64Array]
    dir_bits: list[int]
    ids: U64Array
    dead: int = 0

    @property
    def size(self) -> int:
        return int(self.ids.size)


@dataclass
class _Tail:
    fps: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def arrays(self) -> tuple[U64Array, U64Array]:
        return np.array(self.fps, dtype=np.uint64), np.array(self.ids, dtype=np.uint64)


class InMemoryIndex:
    """Exact Hamming search in process memory (``HammingIndex``); single-threaded by design."""

    def __init__(self, design: Design) -> None:
        self.design = design
        self._segments = [table.segments for table in design.tables]
        self._inverse = [table.inverse_segments for table in design.tables]
        self._runs: list[_Run] = []
        self._tail = _Tail()
        self._live = 0

    @property
    def k(self) -> int:
        return self.design.k

    def __len__(self) -> int:
        return self._live

    # ---- queries -------------------------------------------------------------------------

    def query(self, fingerprints: U64Array) -> Matches:
        queries = _as_u64(fingerprints)
        found_q, found_f, found_d = self._probe_tables(queries)
        matches = self._attach_ids(queries, found_q, found_f, found_d)
        return matches.concat(self._probe_tail(queries))

    def probe_insert(self, fingerprints: U64Array, ids: U64Array) -> Matches:
        fps, new_ids = _check_entries(fingerprints, ids)
        stored = self.query(fps)
        within = _within_batch(fps, new_ids, self.k, self.design)
        matches = stored.concat(within).unique() if len(within) else stored
        keep = _not_replayed(matches, fps, new_ids)
        self._insert_checked(fps[keep], new_ids[keep])
        return matches

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None:
        fps, new_ids = _check_entries(fingerprints, ids)
        self._insert_checked(fps, new_ids)

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        fps, del_ids = _check_entries(fingerprints, ids)
        removed = self._delete_from_tail(fps, del_ids)
        for run in self._runs:
            keys = hk.permute(fps, self._segments[0])
            order = np.argsort(keys, kind="stable")
            hits = hk.tombstone_ids(run.keys[0], run.ids, keys[order], del_ids[order], TOMBSTONE)
            run.dead += hits
            removed += hits
        self._live -= removed
        if sum(run.dead for run in self._runs) * 4 > max(self._live, 1):
            self.compact()
        return removed

    # ---- maintenance ---------------------------------------------------------------------

    def compact(self) -> None:
        """Merge everything into one run without tombstones (also speeds up queries)."""
        fps, ids = self.entries()
        self._runs = []
        self._tail = _Tail()
        self._live = int(fps.size)
        if fps.size:
            self._add_run(fps, ids)

    def entries(self) -> tuple[U64Array, U64Array]:
        """All live (fingerprint, id) entries, sorted by fingerprint then id."""
        parts_f, parts_i = [], []
        for run in self._runs:
            live = run.ids != TOMBSTONE
            parts_f.append(hk.permute(run.keys[0][live], self._inverse[0]))
            parts_i.append(run.ids[live])
        tail_f, tail_i = self._tail.arrays()
        fps = np.concatenate([*parts_f, tail_f]).astype(np.uint64)
        ids = np.concatenate([*parts_i, tail_i]).astype(np.uint64)
        order = np.lexsort((ids, fps))
        return fps[order], ids[order]

    def stats(self) -> dict[str, float]:
        """Sizes and memory, for logs, metrics and the benchmark."""
        table_bytes = sum(
            sum(k.nbytes for k in run.keys) + sum(o.nbytes for o in run.offsets) + run.ids.nbytes
            for run in self._runs
        )
        return {
            "entries": float(self._live),
            "runs": float(len(self._runs)),
            "tail": float(len(self._tail.fps)),
            "bytes": float(table_bytes),
            "bytes_per_entry": table_bytes / max(self._live, 1),
        }

    # ---- internals -----------------------------------------------------------------------

    def _insert_checked(self, fps: U64Array, ids: U64Array) -> None:
        self._live += int(fps.size)
        if fps.size >= TAIL_MAX:
            self._add_run(fps, ids)
            return
        self._tail.fps.extend(fps.tolist())
        self._tail.ids.extend(ids.tolist())
        if len(self._tail.fps) >= TAIL_MAX:
            tail_f, tail_i = self._tail.arrays()
            self._tail = _Tail()
            self._add_run(tail_f, tail_i)

    def _add_run(self, fps: U64Array, ids: U64Array) -> None:
        self._runs.append(self._build_run(fps, ids))
        while len(self._runs) >= 2 and self._runs[-2].size <= MERGE_RATIO * self._runs[-1].size:
            newer = self._runs.pop()
            older = self._runs.pop()
            self._runs.append(self._merge(older, newer))

    def _build_run(self, fps: U64Array, ids: U64Array) -> _Run:
        keys, offsets, bits = [], [], []
        sorted_ids = ids
        for t, table in enumerate(self.design.tables):
            permuted = hk.permute(fps, self._segments[t])
            if t == 0:
                permuted, sorted_ids = hk.sort_with_ids(permuted, ids)
            else:
                permuted, _ = hk.sort_with_ids(permuted, permuted)
            width = _dir_bits(permuted.size, table.key_bits)
            keys.append(permuted)
            offsets.append(hk.directory(permuted, width))
            bits.append(width)
        return _Run(keys, offsets, bits, sorted_ids)

    def _merge(self, older: _Run, newer: _Run) -> _Run:
        keys, offsets, bits = [], [], []
        ids = older.ids
        for t, table in enumerate(self.design.tables):
            if t == 0:
                merged, ids = hk.merge_with_ids(older.keys[0], older.ids, newer.keys[0], newer.ids)
            else:
                merged = hk.merge(older.keys[t], newer.keys[t])
            width = _dir_bits(merged.size, table.key_bits)
            keys.append(merged)
            offsets.append(hk.directory(merged, width))
            bits.append(width)
        return _Run(keys, offsets, bits, ids, older.dead + newer.dead)

    def _probe_tables(self, queries: U64Array) -> tuple[I64Array, U64Array, I8Array]:
        parts_q, parts_f, parts_d = [], [], []
        masks = self.design.key_masks
        for t in range(len(self.design.tables)):
            if not self._runs:
                break
            permuted = hk.permute(queries, self._segments[t])
            for run in self._runs:
                q, f, d = hk.probe_run(
                    queries,
                    permuted,
                    run.keys[t],
                    run.offsets[t],
                    run.dir_bits[t],
                    self.k,
                    t,
                    masks,
                    self._inverse[t],
                )
                if q.size:
                    parts_q.append(q)
                    parts_f.append(f)
                    parts_d.append(d)
        if not parts_q:
            return np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int8)
        return np.concatenate(parts_q), np.concatenate(parts_f), np.concatenate(parts_d)

    def _attach_ids(self, queries: U64Array, q: I64Array, f: U64Array, d: I8Array) -> Matches:
        """Expand (query, fingerprint) hits into (query, id) matches via table 0."""
        if q.size == 0:
            return Matches.empty()
        # The same fingerprint may sit in several runs (one per id): look each up once.
        order = np.lexsort((f, q))
        q, f = q[order], f[order]
        first = np.ones(q.size, dtype=bool)
        first[1:] = (q[1:] != q[:-1]) | (f[1:] != f[:-1])
        q, f = q[first], f[first]
        d = _distances(queries[q], f)
        wanted, inverse = np.unique(hk.permute(f, self._segments[0]), return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(wanted.size + 1))
        parts: list[Matches] = []
        for run in self._runs:
            slots, ids = hk.lookup_ids(
                wanted, run.keys[0], run.ids, run.offsets[0], run.dir_bits[0], TOMBSTONE
            )
            rows = order[_expand_ranges(bounds[slots], bounds[slots + 1])]
            counts = bounds[slots + 1] - bounds[slots]
            parts.append(Matches(q[rows], np.repeat(ids, counts), f[rows], d[rows]))
        return Matches.build(
            np.concatenate([m.query for m in parts]),
            np.concatenate([m.id for m in parts]),
            np.concatenate([m.fingerprint for m in parts]),
            np.concatenate([m.distance for m in parts]),
        )

    def _probe_tail(self, queries: U64Array) -> Matches:
        if not self._tail.fps:
            return Matches.empty()
        tail_f, tail_i = self._tail.arrays()
        q, j, d = hk.scan_all(queries, tail_f, self.k)
        return Matches.build(q, tail_i[j], tail_f[j], d)

    def _delete_from_tail(self, fps: U64Array, ids: U64Array) -> int:
        doomed = set(zip(fps.tolist(), ids.tolist(), strict=True))
        keep = [
            (f, i)
            for f, i in zip(self._tail.fps, self._tail.ids, strict=True)
            if (f, i) not in doomed
        ]
        removed = len(self._tail.fps) - len(keep)
        self._tail = _Tail([f for f, _ in keep], [i for _, i in keep])
        return removed


def _expand_ranges(starts: I64Array, stops: I64Array) -> I64Array:
    """Concatenation of range(starts[i], stops[i]) for all i, without a Python loop."""
    counts = stops - starts
    total = int(counts.sum())
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(total, dtype=np.int64)


def _distances(a: U64Array, b: U64Array) -> I8Array:
    x = np.bitwise_xor(a, b)
    return np.bitwise_count(x).astype(np.int8)


def _dir_bits(size: int, key_bits: int) -> int:
    if size <= BUCKET_TARGET:
        return 0
    return int(min(key_bits, max(0, int(np.log2(size / BUCKET_TARGET)))))


def _as_u64(values: U64Array) -> U64Array:
    return np.ascontiguousarray(values, dtype=np.uint64)


def _check_entries(fingerprints: U64Array, ids: U64Array) -> tuple[U64Array, U64Array]:
    fps, idents = _as_u64(fingerprints), _as_u64(ids)
    if fps.shape != idents.shape or fps.ndim != 1:
        raise IndexError_(f"fingerprints {fps.shape} and ids {idents.shape} must be equal 1-d")
    if np.any(idents == TOMBSTONE):
        raise IndexError_("id 2**64-1 is reserved for tombstones")
    return fps, idents


def _within_batch(fps: U64Array, ids: U64Array, k: int, design: Design) -> Matches:
    """Matches of each batch entry against the entries before it in the same batch."""
    if fps.size < 2:
        return Matches.empty()
    i, j, d = all_pairs(fps, k, design)
    return Matches.build(j, ids[i], fps[i], d)


def _not_replayed(matches: Matches, fps: U64Array, ids: U64Array) -> np.ndarray:
    """Mask of batch entries whose exact (fingerprint, id) is not already stored or earlier."""
    keep = np.ones(fps.size, dtype=bool)
    same = (matches.distance == 0) & (matches.id == ids[matches.query])
    keep[matches.query[same]] = False
    return keep
