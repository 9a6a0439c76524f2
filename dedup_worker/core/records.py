"""What the engine remembers per page besides its fingerprint, and the store interface for it.

A page's id is its position in the total order of pages: fetch time in milliseconds in the high
42 bits, 22 bits of a stable URL hash below. Comparing ids compares pages (fetch time, then URL
hash) without a lookup, and a page replayed after a crash gets the same id again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

URL_HASH_BITS = 22
#: The page a duplicate points to: (url, id), or None.
Original = tuple[str, int] | None
MAX_MILLIS = (1 << (64 - URL_HASH_BITS)) - 2


@functools.lru_cache(maxsize=1 << 16)  # a batch asks for each URL's hash ~3 times
def url_hash(url: str) -> int:
    """A stable 64-bit hash of a URL (BLAKE2b; never Python's salted hash())."""
    return int.from_bytes(hashlib.blake2b(url.encode("utf-8"), digest_size=8).digest(), "big")


def page_id(url: str, fetched_at: float) -> int:
    """The order key of a page: fetch time (ms) then URL hash; never the reserved 2**64 - 1."""
    millis = min(max(int(fetched_at * 1000), 0), MAX_MILLIS)
    return (millis << URL_HASH_BITS) | (url_hash(url) & ((1 << URL_HASH_BITS) - 1))


@dataclass(slots=True)  # a value, shared by caches: not frozen only for speed (see Page)
class DocRecord:
    """The engine's memory of one processed page (never assigned to: ``with_verdict``)."""

    id: int
    url: str
    host: str
    fetched_at: float
    fingerprint: int
    checksum: str
    verdict: str
    duplicate_of: str | None = None
    duplicate_of_id: int | None = None
    #: The page's resemblance sketch (``core.sketch``); empty when verification is off.
    sketch: bytes = b""
    #: The verdict was set by ``DocStore.correct`` (another page's batch), not by finalize.
    corrected: bool = False

    def with_verdict(
        self, verdict: str, duplicate_of: Original, *, corrected: bool = False
    ) -> DocRecord:
        url, ident = duplicate_of if duplicate_of is not None else (None, None)
        return replace(
            self, verdict=verdict, duplicate_of=url, duplicate_of_id=ident, corrected=corrected
        )


PENDING = "pending"
#: Verdicts under which a page is suppressed (its outlinks are not followed).
SUPPRESSED = frozenset({"near_duplicate", "exact_duplicate"})


class DocStore(Protocol):
    """Page records by id and the latest record per URL; every method is atomic per record.

    The engine writes a page's record as ``pending`` *before* it touches the index, so every
    index entry another worker can see has a record. Races end through two atomic steps:
    ``finalize`` turns pending into the worker's verdict only if nobody corrected the page in
    between, and ``correct`` marks a later page as a duplicate of an earlier one.
    """

    def claim(self, records: Sequence[DocRecord]) -> dict[int, DocRecord]:
        """Store records as given where their id is new; return the existing ones otherwise.

        A record becomes its URL's latest unless a later fetch of that URL is already there.
        """
        ...

    def get(self, ids: Iterable[int]) -> dict[int, DocRecord]: ...

    def latest(self, urls: Iterable[str]) -> dict[str, DocRecord]: ...

    def claim_latest(
        self, records: Sequence[DocRecord]
    ) -> tuple[dict[int, DocRecord], dict[str, DocRecord]]:
        """``latest`` of the records' URLs as it was before them, then ``claim(records)``:
        (claim's result, latest's). What a batch starts with, in one step where the store can
        (a round trip less per batch on Redis)."""
        ...

    def finalize(self, verdicts: Mapping[int, tuple[str, Original]]) -> dict[int, DocRecord]:
        """Set (verdict, original) where the record is still pending.

        Returns the records that were not pending (a replay, or corrected by another worker);
        their stored state is the one to publish.
        """
        ...

    def correct(self, corrections: Mapping[int, tuple[str, tuple[str, int]]]) -> set[int]:
        """Mark pages as duplicates: {id: (verdict, (original url, original id))}.

        Applied when the page is pending or was published as not suppressed, or when the new
        original is earlier than its current one. Returns the ids that need a correcting
        decision: those whose *published* verdict was not suppressed, those a correction had
        suppressed (``correction_reported``), and those already suppressed with this very
        original by a correction (``correction_repeats``). (A pending page's own worker picks
        the correction up in ``finalize``.)
        """
        ...


def correction_applies(current: DocRecord, original_id: int) -> bool:
    """A correction changes a page not yet suppressed, or points it to an earlier original."""
    if current.verdict not in SUPPRESSED:
        return True
    return current.duplicate_of_id is None or original_id < current.duplicate_of_id


def correction_reported(current: DocRecord) -> bool:
    """Applying a correction to ``current`` needs a correcting decision: its published verdict
    was not suppressed, or a correction suppressed it. That correction's decision may have been
    aborted with its batch (a fenced or crashed worker) after its Redis writes, and the batch
    redone elsewhere may find a later original, or another worker an earlier one: publishing
    the earlier original again is harmless, losing the page's suppression is not. (A pending
    page's own worker publishes it; a page that found its original itself said so.)"""
    if current.verdict in SUPPRESSED:
        return current.corrected
    return current.verdict != PENDING


def correction_repeats(current: DocRecord, original_id: int) -> bool:
    """A correction to this very original was applied before: the batch that applied it may
    have been aborted after its Redis writes (a crash, a rebalance), so its correcting
    decision was never published. Publishing it again is harmless; losing it is not. (A page
    that found its original itself is not repeated: its own decision said so.)"""
    return (
        current.corrected
        and current.verdict in SUPPRESSED
        and current.duplicate_of_id == original_id
    )


class MemoryDocStore:
    """``DocStore`` in process memory: for the embedded mode, batch jobs and unit tests."""

    def __init__(self) -> None:
        self._by_id: dict[int, DocRecord] = {}
        self._latest: dict[str, int] = {}

    def claim(self, records: Sequence[DocRecord]) -> dict[int, DocRecord]:
        existing = {}
        for record in records:
            if record.id in self._by_id:
                existing[record.id] = self._by_id[record.id]
                continue
            self._by_id[record.id] = record
            if self._latest.get(record.url, -1) < record.id:
                self._latest[record.url] = record.id
        return existing

    def get(self, ids: Iterable[int]) -> dict[int, DocRecord]:
        return {i: self._by_id[i] for i in ids if i in self._by_id}

    def latest(self, urls: Iterable[str]) -> dict[str, DocRecord]:
        return {u: self._by_id[self._latest[u]] for u in urls if u in self._latest}

    def claim_latest(
        self, records: Sequence[DocRecord]
    ) -> tuple[dict[int, DocRecord], dict[str, DocRecord]]:
        latest = self.latest({r.url for r in records})
        return self.claim(records), latest

    def finalize(self, verdicts: Mapping[int, tuple[str, Original]]) -> dict[int, DocRecord]:
        settled = {}
        for ident, (verdict, original) in verdicts.items():
            current = self._by_id[ident]
            if current.verdict == PENDING:
                self._by_id[ident] = current.with_verdict(verdict, original)
            else:
                settled[ident] = current
        return settled

    def correct(self, corrections: Mapping[int, tuple[str, tuple[str, int]]]) -> set[int]:
        published = set()
        for ident, (verdict, original) in corrections.items():
            current = self._by_id.get(ident)
            if current is None:
                continue
            if not correction_applies(current, original[1]):
                if correction_repeats(current, original[1]):
                    published.add(ident)
                continue
            if correction_reported(current):
                published.add(ident)
            self._by_id[ident] = current.with_verdict(verdict, original, corrected=True)
        return published

    def __len__(self) -> int:
        return len(self._by_id)
