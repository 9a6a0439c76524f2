"""The candidates' records a worker read recently, kept in process (least recently used out).

The engine reads a candidate's record only for what never changes once a page is claimed: its
URL, host, fetch time, fingerprint, checksum and sketch (verdicts are read and written by the
store's own compare-and-set steps, never from here). A record is therefore as good from this
cache as from the store, and near-duplicate clusters make the same records candidates again and
again. On the soak benchmark's pages, with the worker's default of 100k records, 83% of the
candidate records of the first 300k pages came from here, and the store's reads between 250k
and 300k pages took 23 instead of 77 us a page (README, "What holds the worker back now").

Not for stores whose records expire (a TTL): an expired record must stop being a candidate.

Records are kept as plain tuples of their fields, which the cyclic garbage collector stops
tracking, and rebuilt on a hit (~1 us). Kept as ``DocRecord`` objects, a full cache was 100k
objects that every full collection walked: on the real-text growth benchmark such a pause grew
to 69 ms as the cache filled (42 ms with 42k records), about one every 8,000 pages, each
stalling a batch (README, "What holds the worker back now").
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any

from dedup_worker.core.records import DocRecord

#: A record's fields, in ``DocRecord``'s order: a tuple of them is all ints, strings, floats,
#: bytes, bools and None, which the garbage collector untracks.
_fields: Callable[[DocRecord], tuple[Any, ...]] = operator.attrgetter(
    *(field.name for field in fields(DocRecord))
)


class RecordCache:
    """At most ``capacity`` records by id; ``capacity`` 0 keeps nothing."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"record cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._records: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._records)

    def get_many(
        self, ids: Iterable[int], fetch: Callable[[set[int]], Mapping[int, DocRecord]]
    ) -> dict[int, DocRecord]:
        """The records of ``ids`` that exist: cached ones, and the rest from ``fetch`` (once)."""
        found: dict[int, DocRecord] = {}
        missing: set[int] = set()
        records = self._records
        for ident in ids:
            values = records.get(ident)
            if values is None:
                missing.add(ident)
            else:
                records.move_to_end(ident)
                found[ident] = DocRecord(*values)
        self.hits += len(found)
        self.misses += len(missing)
        if missing:
            fetched = fetch(missing)
            found.update(fetched)
            self._keep(fetched)
        return found

    def _keep(self, fetched: Mapping[int, DocRecord]) -> None:
        if not self.capacity:
            return
        records = self._records
        for ident, record in fetched.items():
            records[ident] = _fields(record)
        while len(records) > self.capacity:
            records.popitem(last=False)
