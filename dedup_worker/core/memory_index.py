"""In-process permuted tables: sorted runs plus a small unsorted tail.

Inserts land in a tail of at most ``TAIL_MAX`` entries that queries scan by brute force. A full
tail (or any batch larger than it) becomes a sorted run: per table, the sorted permuted keys,
the ids beside them and a bucket directory. Runs are merged when a newer run grows to
1/``MERGE_RATIO`` of the one before it, so there are O(log n) runs and every entry is rewritten
O(log n) times: inserts never re-sort the whole index.

Ids are stored in every table (16 bytes per entry and table) so that a match never needs a
second lookup; the planner counts them when it bounds bytes per fingerprint.

Deletes mark the ids as tombstones; ``compact()`` (run automatically when a quarter of the
entries are tombstones) rebuilds the tables without them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.batch import all_pairs
from dedup_worker.core.design import Design, check_flips
from dedup_worker.core.index_api import (
    TOMBSTONE,
    I32Array,
    I64Array,
    Matches,
    U64Array,
    agrees_on_a_key,
    check_radius,
    mutual_match,
    probe_slack,
    rule_masks,
    submasks,
)
from dedup_worker.errors import IndexError_

logger = logging.getLogger(__name__)

TAIL_MAX = 256
MERGE_RATIO = 8
#: A run's directory has about one offset per this many entries.
BUCKET_TARGET = 8


@dataclass
class _Run:
    """One sorted run: per table the permuted keys, their ids and a bucket directory."""

    keys: list[U64Array]
    ids: list[U64Array]
    offsets: list[I64Array]
    dir_bits: list[int]
    dead: int = 0

    @property
    def size(self) -> int:
        return int(self.keys[0].size)


@dataclass
class _Tail:
    fps: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def arrays(self) -> tuple[U64Array, U64Array]:
        return np.array(self.fps, dtype=np.uint64), np.array(self.ids, dtype=np.uint64)


class InMemoryIndex:
    """Hamming search in process memory (``HammingIndex``); single-threaded by design.

    ``radius`` (default: the design's k) is the search radius ``k`` of the interface;
    ``flips`` the slack bits a probe tries flipped per table (see ``HammingIndex``).
    """

    def __init__(self, design: Design, radius: int | None = None, flips: int = 0) -> None:
        self.design = design
        self._radius = check_radius(radius, design.k)
        self.flips = check_flips(flips)
        self._segments = [table.segments for table in design.tables]
        self._inverse = [table.inverse_segments for table in design.tables]
        self._runs: list[_Run] = []
        self._tail = _Tail()
        self._live = 0

    @property
    def k(self) -> int:
        return self._radius

    def __len__(self) -> int:
        return self._live

    # ---- queries -------------------------------------------------------------------------

    def query(self, fingerprints: U64Array, margins: I32Array | None = None) -> Matches:
        queries = _as_u64(fingerprints)
        return self._query(queries, self._slack(margins, queries.size))

    def probe_insert(
        self, fingerprints: U64Array, ids: U64Array, margins: I32Array | None = None
    ) -> Matches:
        fps, new_ids = _check_entries(fingerprints, ids)
        slack = self._slack(margins, fps.size)
        stored = self._query(fps, slack)
        within = _within_batch(fps, new_ids, self.k, self.design, slack)
        matches = stored.concat(within).unique() if len(within) else stored
        keep = _not_replayed(matches, fps, new_ids)
        self._insert_checked(fps[keep], new_ids[keep])
        return matches

    def mutual(self, diff: int) -> bool:
        return mutual_match(self.design, self.k, diff)

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None:
        fps, new_ids = _check_entries(fingerprints, ids)
        self._insert_checked(fps, new_ids)

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        fps, del_ids = _check_entries(fingerprints, ids)
        removed = self._delete_from_tail(fps, del_ids)
        for run in self._runs:
            for t in range(len(self.design.tables)):
                keys = hk.permute(fps, self._segments[t])
                hits = hk.tombstone_ids(run.keys[t], run.ids[t], keys, del_ids, TOMBSTONE)
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
            live = run.ids[0] != TOMBSTONE
            parts_f.append(hk.permute(run.keys[0][live], self._inverse[0]))
            parts_i.append(run.ids[0][live])
        tail_f, tail_i = self._tail.arrays()
        fps = np.concatenate([*parts_f, tail_f]).astype(np.uint64)
        ids = np.concatenate([*parts_i, tail_i]).astype(np.uint64)
        order = np.lexsort((ids, fps))
        return fps[order], ids[order]

    def stats(self) -> dict[str, float]:
        """Sizes and memory, for logs, metrics and the benchmark."""
        table_bytes = sum(
            sum(a.nbytes for a in (*run.keys, *run.ids, *run.offsets)) for run in self._runs
        )
        return {
            "entries": float(self._live),
            "runs": float(len(self._runs)),
            "tail": float(len(self._tail.fps)),
            "bytes": float(table_bytes),
            "bytes_per_entry": table_bytes / max(self._live, 1),
        }

    # ---- internals -----------------------------------------------------------------------

    def _slack(self, margins: I32Array | None, n: int) -> U64Array | None:
        return probe_slack(self.design, self.k, self.flips, margins, n)

    def _query(self, queries: U64Array, slack: U64Array | None) -> Matches:
        masks = rule_masks(self.design.key_masks, slack, queries.size)
        stored = self._probe_tables(queries, masks, slack).concat(self._probe_tail(queries, masks))
        # An entry deleted and inserted again may sit in two runs; report it once. With slack,
        # a probe and its flipped one may read one directory bucket.
        return stored.unique() if len(self._runs) > 1 or slack is not None else stored

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
        run = _Run([], [], [], [])
        for t, table in enumerate(self.design.tables):
            keys, sorted_ids = hk.sort_with_ids(hk.permute(fps, self._segments[t]), ids)
            self._append_table(run, keys, sorted_ids, table.key_bits)
        return run

    def _merge(self, older: _Run, newer: _Run) -> _Run:
        run = _Run([], [], [], [], older.dead + newer.dead)
        for t, table in enumerate(self.design.tables):
            keys, ids = hk.merge_with_ids(older.keys[t], older.ids[t], newer.keys[t], newer.ids[t])
            self._append_table(run, keys, ids, table.key_bits)
        return run

    @staticmethod
    def _append_table(run: _Run, keys: U64Array, ids: U64Array, key_bits: int) -> None:
        width = _dir_bits(keys.size, key_bits)
        run.keys.append(keys)
        run.ids.append(ids)
        run.offsets.append(hk.directory(keys, width))
        run.dir_bits.append(width)

    def _probe_tables(self, queries: U64Array, masks: U64Array, slack: U64Array | None) -> Matches:
        parts: list[Matches] = []
        own = np.arange(queries.size, dtype=np.int64)
        for t in range(len(self.design.tables)):
            if not self._runs:
                break
            permuted = hk.permute(queries, self._segments[t])
            positions, lookups = own, permuted
            if slack is not None:  # the buckets of the slack bits flipped, too
                rows, flipped = submasks(slack[:, t])
                positions = np.concatenate([own, rows])
                lookups = np.concatenate(
                    [permuted, hk.permute(queries[rows] ^ flipped, self._segments[t])]
                )
            for run in self._runs:
                q, i, f, d = hk.probe_run(
                    queries, permuted, positions, lookups, run.keys[t], run.ids[t],
                    run.offsets[t], run.dir_bits[t], self.k, t, masks, self._inverse[t],
                )  # fmt: skip
                if q.size:
                    parts.append(Matches(q, i, f, d))
        if not parts:
            return Matches.empty()
        return Matches.build(
            np.concatenate([m.query for m in parts]),
            np.concatenate([m.id for m in parts]),
            np.concatenate([m.fingerprint for m in parts]),
            np.concatenate([m.distance for m in parts]),
        )

    def _probe_tail(self, queries: U64Array, masks: U64Array) -> Matches:
        if not self._tail.fps:
            return Matches.empty()
        tail_f, tail_i = self._tail.arrays()
        q, j, d = hk.scan_all(queries, tail_f, self.k)
        if self.k > self.design.k:  # within the design's k, every near entry agrees on a key
            keep = agrees_on_a_key(queries[q] ^ tail_f[j], masks[q])
            q, j, d = q[keep], j[keep], d[keep]
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


def _within_batch(
    fps: U64Array, ids: U64Array, k: int, design: Design, slack: U64Array | None
) -> Matches:
    """Matches of each batch entry against the entries before it in the same batch."""
    if fps.size < 2:
        return Matches.empty()
    if slack is None:
        i, j, d = all_pairs(fps, k, design)
        return Matches.build(j, ids[i], fps[i], d)
    # The rule depends on the later entry's slack: every pair within k, then the rule.
    q, e, d = hk.scan_all(fps, fps, k)
    earlier = e < q
    q, e, d = q[earlier], e[earlier], d[earlier]
    masks = rule_masks(design.key_masks, slack, fps.size)
    keep = (d <= design.k) | agrees_on_a_key(fps[q] ^ fps[e], masks[q])
    return Matches.build(q[keep], ids[e[keep]], fps[e[keep]], d[keep])


def _not_replayed(matches: Matches, fps: U64Array, ids: U64Array) -> np.ndarray:
    """Mask of batch entries whose exact (fingerprint, id) is not already stored or earlier."""
    keep = np.ones(fps.size, dtype=bool)
    same = (matches.distance == 0) & (matches.id == ids[matches.query])
    keep[matches.query[same]] = False
    return keep
