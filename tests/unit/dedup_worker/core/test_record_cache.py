"""The engine's cache of candidate records: same decisions, fewer store reads, bounded."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterable

import pytest

from dedup_worker.contract.messages import Decision, Page
from dedup_worker.core.design import build_design
from dedup_worker.core.engine import DedupEngine, EngineSettings
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.record_cache import RecordCache
from dedup_worker.core.records import DocRecord, MemoryDocStore

WORDS = [f"w{i}" for i in range(3000)]


def _family_pages(families: int, members: int) -> list[Page]:
    """Families of near-copies (a few words changed each), interleaved in fetch order."""
    rng = random.Random(3)
    bases = [[rng.choice(WORDS) for _ in range(300)] for _ in range(families)]
    pages = []
    for m in range(members):
        for f, base in enumerate(bases):
            words = list(base)
            for _ in range(m % 3):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            url = f"https://h{f}.example/p{m}"
            at = 1000.0 + m * families + f
            pages.append(Page(url=url, host=f"h{f}.example", fetched_at=at, text=" ".join(words)))
    return pages


class CountingStore(MemoryDocStore):
    def __init__(self) -> None:
        super().__init__()
        self.read = 0

    def get(self, ids: Iterable[int]) -> dict[int, DocRecord]:
        wanted = list(ids)
        self.read += len(wanted)
        return super().get(wanted)


def _run(cache: int, pages: list[Page]) -> tuple[list[Decision], CountingStore, DedupEngine]:
    store = CountingStore()
    engine = DedupEngine(
        InMemoryIndex(build_design(3, (4,)), radius=6), store, EngineSettings(),
        clock=lambda: 0.0, record_cache=cache,
    )  # fmt: skip
    decisions = [d for lo in range(0, len(pages), 25) for d in engine.process(pages[lo : lo + 25])]
    return decisions, store, engine


def test_cached_records_give_the_same_decisions_with_fewer_reads() -> None:
    pages = _family_pages(families=12, members=10)
    plain, plain_store, _ = _run(0, pages)
    cached, cached_store, engine = _run(1000, pages)
    assert [d.to_json() for d in cached] == [d.to_json() for d in plain]
    assert sum(d.verdict.value == "near_duplicate" for d in plain) > 50  # candidates were read
    assert cached_store.read < plain_store.read / 2
    assert engine.records.hits > 0


def test_a_small_cache_stays_within_its_capacity_and_still_decides_the_same() -> None:
    pages = _family_pages(families=12, members=10)
    plain, _, _ = _run(0, pages)
    cached, _, engine = _run(5, pages)
    assert [d.to_json() for d in cached] == [d.to_json() for d in plain]
    assert len(engine.records) == 5


def test_least_recently_used_records_leave_first() -> None:
    records = {i: DocRecord(i, f"u{i}", "h", 0.0, i, "c", "unique") for i in range(4)}
    cache = RecordCache(2)

    def fetch(ids: set[int]) -> dict[int, DocRecord]:
        return {i: records[i] for i in ids if i in records}

    assert cache.get_many([0, 1], fetch) == {0: records[0], 1: records[1]}
    cache.get_many([0], fetch)  # 0 is now the most recently used
    cache.get_many([2], fetch)  # evicts 1
    assert cache.get_many([0, 2], lambda ids: pytest.fail(f"read {ids}")) == {
        0: records[0],
        2: records[2],
    }
    assert cache.get_many([1, 9], fetch) == {1: records[1]}  # re-read; 9 does not exist
    assert (cache.hits, cache.misses) == (3, 5)


def test_no_capacity_keeps_nothing_and_a_negative_one_is_refused() -> None:
    cache = RecordCache(0)
    record = DocRecord(1, "u", "h", 0.0, 1, "c", "unique")
    cache.get_many([1], lambda ids: {1: record})
    assert len(cache) == 0
    with pytest.raises(ValueError, match="capacity"):
        RecordCache(-1)


def test_cached_records_are_not_walked_by_the_garbage_collector() -> None:
    """A full cache must not make every full collection longer (a pause mid-batch)."""
    cache = RecordCache(5000)

    def fetch(missing: set[int]) -> dict[int, DocRecord]:
        return {i: _record(i) for i in missing}

    gc.collect()
    before = len(gc.get_objects())
    cache.get_many(range(5000), fetch)
    gc.collect()
    assert len(cache) == 5000
    assert len(gc.get_objects()) - before < 100
    assert cache.get_many([7], lambda missing: pytest.fail("read")) == {7: _record(7)}


def _record(i: int) -> DocRecord:
    return DocRecord(i, f"https://h.example/{i}", "h.example", 1.0, i, "c", "unique", sketch=b"s")
