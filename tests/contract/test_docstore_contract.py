"""One contract for every ``DocStore``: the in-memory reference and Redis (server and cluster).

Each test runs on each backend with a fresh store; the property test checks that a random
sequence of operations is observed identically on the backend and on ``MemoryDocStore``.
Redis-only tests at the end: concurrent finalize/correct, a paused server, TTL, lost scripts.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from dedup_worker.adapters.redis_client import BackendError
from dedup_worker.adapters.redis_docs import RedisDocStore
from dedup_worker.adapters.redis_docs_codec import RecordTooLarge
from dedup_worker.core.records import PENDING, SUPPRESSED, DocRecord, MemoryDocStore, page_id
from dedup_worker.errors import BackendUnavailable, ConfigError, NeardupError
from neardup.stack import RedisServer
from tests.support.docs_contract import (  # noqa: F401  (fixtures register by import)
    BACKENDS,
    REDIS_BACKENDS,
    DocsFactory,
    docs_client_fixture,
    docs_cluster_client_fixture,
    docs_redis_client_fixture,
    make_docs_fixture,
    new_namespace,
    record,
)

all_backends = pytest.mark.parametrize("backend", BACKENDS)
redis_only = pytest.mark.parametrize("backend", REDIS_BACKENDS)

A, B, C = "https://example.com/a", "https://example.com/b?x=1", "https://mirror.example.org/a"


# ---- claim / get / latest ---------------------------------------------------------------


@all_backends
def test_claim_stores_new_records_and_get_returns_them(make_docs: DocsFactory) -> None:
    docs = make_docs()
    records = [record(A, 100.0), record(B, 100.5), record(C, 99.25)]
    assert docs.claim(records) == {}
    assert docs.get([r.id for r in records] + [12345]) == {r.id: r for r in records}
    assert docs.get([]) == {}


@all_backends
def test_an_id_spelled_inside_another_record_is_not_taken_for_it(make_docs: DocsFactory) -> None:
    """Stores search a bucket for an id's 8 bytes (Redis: in C); bytes that spell the id
    inside an earlier record (here its URL) must not count as that record."""
    docs = make_docs(expected_n=1, shard_bits=0)  # one bucket: every record meets the others
    spelled = int.from_bytes(b"zzzzzzzz", "big")
    decoy = record("https://a.example/zzzzzzzz/zzzzzzzz", 100.0)
    target = record("https://b.example/x", 200.0, ident=spelled)
    assert docs.claim([decoy]) == {}
    assert docs.get([spelled]) == {}
    assert docs.claim([target]) == {}
    assert docs.get([spelled, decoy.id]) == {spelled: target, decoy.id: decoy}
    assert docs.claim([target]) == {spelled: target}
    docs.finalize({spelled: ("unique", None)})
    assert docs.get([spelled])[spelled].verdict == "unique"
    assert docs.get([decoy.id]) == {decoy.id: decoy}


@all_backends
def test_claim_returns_existing_records_unchanged(make_docs: DocsFactory) -> None:
    docs = make_docs()
    first = record(A, 100.0)
    docs.claim([first])
    docs.finalize({first.id: ("unique", None)})
    stored = docs.get([first.id])[first.id]
    replay = record(A, 100.0, fingerprint=7)
    assert docs.claim([replay, record(B, 1.0)]) == {first.id: stored}
    assert docs.get([first.id]) == {first.id: stored}


@all_backends
def test_claim_of_the_same_id_twice_in_one_batch_keeps_the_first(make_docs: DocsFactory) -> None:
    docs = make_docs()
    first, second = record(A, 5.0), record(A, 5.0, fingerprint=9)
    assert docs.claim([first, second]) == {first.id: first}


@all_backends
def test_latest_follows_later_fetches_and_ignores_older_ones(make_docs: DocsFactory) -> None:
    docs = make_docs()
    assert docs.latest([A]) == {}
    middle = record(A, 200.0)
    docs.claim([middle, record(B, 300.0)])
    assert docs.latest([A])[A] == middle
    later = record(A, 250.0)
    docs.claim([later])
    assert docs.latest([A, C]) == {A: later}
    docs.claim([record(A, 150.0)])  # an out-of-order older fetch arrives last
    assert docs.latest([A]) == {A: later}
    assert docs.latest([B])[B].fetched_at == 300.0


@all_backends
def test_latest_of_records_whose_id_is_not_a_page_id(make_docs: DocsFactory) -> None:
    docs = make_docs()
    docs.claim([record(A, 1.0, ident=7), record(A, 2.0, ident=3)])
    assert docs.latest([A])[A].id == 7
    docs.claim([record(A, 3.0, ident=2**63 + 1)])
    assert docs.latest([A])[A].id == 2**63 + 1
    docs.claim([record(A, 4.0)])  # a page id lower than the stray one
    assert docs.latest([A])[A].id == 2**63 + 1


@all_backends
def test_claim_latest_is_latest_before_the_batch_then_claim(make_docs: DocsFactory) -> None:
    # One step on Redis for what every batch starts with: latest must not see the batch's own
    # records (a revisit compares with the fetch before it), claim must store them all.
    docs, reference = make_docs(), MemoryDocStore()
    earlier = [record(A, 10.0), record(B, 10.0)]
    for store in (docs, reference):
        store.claim(earlier)
    batch = [record(A, 20.0), record(A, 30.0), record(C, 20.0), earlier[1]]
    existing, latest = docs.claim_latest(batch)
    assert (existing, latest) == reference.claim_latest(batch)
    assert existing == {earlier[1].id: earlier[1]}
    assert latest == {A: earlier[0], B: earlier[1]}
    assert docs.latest([A, B, C]) == {A: batch[1], B: earlier[1], C: batch[2]}
    ids = [r.id for r in batch]
    assert docs.get(ids) == reference.get(ids)
    assert docs.claim_latest(batch) == reference.claim_latest(batch)  # a replay


@all_backends
def test_claim_latest_with_records_whose_id_is_not_a_page_id(make_docs: DocsFactory) -> None:
    docs, reference = make_docs(), MemoryDocStore()
    for store in (docs, reference):
        store.claim([record(A, 1.0, ident=2**63 + 1)])  # a stray pointer for A
    batch = [record(A, 2.0), record(B, 2.0)]  # page ids, one of them lower than the stray
    assert docs.claim_latest(batch) == reference.claim_latest(batch)
    mixed = [record(A, 3.0, ident=2**63 + 5), record(C, 3.0)]  # a stray in the batch
    assert docs.claim_latest(mixed) == reference.claim_latest(mixed)
    assert docs.latest([A, B, C]) == reference.latest([A, B, C])


@all_backends
@pytest.mark.parametrize(
    ("url", "host", "checksum"),
    [
        ("https://例え.jp/パス?q=ü#x", "例え.jp", "9f" * 16),
        ("http://xn--bcher-kva.example/ß/😀", "XN--BCHER-KVA.example", "ABCDEF"),
        ("https://e.com/" + "ä" * 3000, "", "sha256:" + "0" * 64),
        ("", "nowhere", "abc"),
    ],
)
def test_records_round_trip(make_docs: DocsFactory, url: str, host: str, checksum: str) -> None:
    docs = make_docs()
    page = record(url, 1_700_000_000.123456, host=host, checksum=checksum, fingerprint=2**64 - 1)
    dup = DocRecord(page_id(url + "x", 3.5), url + "x", host, 3.5, 0, "", "custom verdict", url, 1)
    docs.claim([page, dup])
    assert docs.get([page.id, dup.id]) == {page.id: page, dup.id: dup}
    assert docs.latest([url]) == {url: page}
    docs.finalize({page.id: ("near_duplicate", ("https://другой.рф/" + url, 2**64 - 2))})
    assert docs.get([page.id])[page.id] == page.with_verdict(
        "near_duplicate", ("https://другой.рф/" + url, 2**64 - 2)
    )


# ---- finalize ----------------------------------------------------------------------------


@all_backends
def test_finalize_sets_pending_and_returns_settled_records(make_docs: DocsFactory) -> None:
    docs = make_docs()
    a, b = record(A, 10.0), record(B, 20.0)
    docs.claim([a, b])
    assert docs.finalize({a.id: ("unique", None), b.id: ("near_duplicate", (A, a.id))}) == {}
    assert docs.get([b.id])[b.id] == b.with_verdict("near_duplicate", (A, a.id))
    again = docs.finalize({a.id: ("changed", None), b.id: ("unique", None)})
    assert again == {a.id: a.with_verdict("unique", None), b.id: docs.get([b.id])[b.id]}


@all_backends
def test_finalize_mixes_verdicts_within_one_bucket(make_docs: DocsFactory) -> None:
    # Fetches of one URL share a bucket. Redis patches a verdict without a duplicate in place
    # and rewrites the bucket for one with a duplicate: in one call, in every order, each
    # record must end with its own verdict and keep the others'.
    docs, reference = make_docs(), MemoryDocStore()
    pages = [record(A, float(t)) for t in range(1, 8)]
    docs.claim(pages)
    reference.claim(pages)
    original = (B, page_id(B, 1.0))
    kinds = ["unique", "near_duplicate", "unique", "changed", "exact_duplicate", "unique"]
    verdicts = {
        p.id: (kind, original if kind.endswith("duplicate") else None)
        for p, kind in zip(pages, kinds, strict=False)
    }
    assert docs.finalize(verdicts) == reference.finalize(verdicts) == {}
    ids = [p.id for p in pages]
    assert docs.get(ids) == reference.get(ids)
    assert docs.latest([A]) == reference.latest([A])
    again = {ids[0]: ("changed", None), ids[1]: ("unique", None), ids[6]: ("unique", None)}
    assert docs.finalize(again) == reference.finalize(again)
    assert docs.get(ids) == reference.get(ids)


@all_backends
def test_finalize_of_a_missing_record_raises_key_error(make_docs: DocsFactory) -> None:
    docs = make_docs()
    with pytest.raises(KeyError):
        docs.finalize({page_id(A, 1.0): ("unique", None)})


@all_backends
def test_ids_outside_uint64_are_never_found(make_docs: DocsFactory) -> None:
    docs = make_docs()
    assert docs.get([-1, 2**64]) == {}
    assert docs.correct({-1: ("near_duplicate", (A, 1))}) == set()
    with pytest.raises(KeyError):
        docs.finalize({2**64: ("unique", None)})


# ---- correct -----------------------------------------------------------------------------


@all_backends
def test_correct_absorbs_pending_without_reporting(make_docs: DocsFactory) -> None:
    docs = make_docs()
    orig, page = record(A, 1.0), record(B, 2.0)
    docs.claim([orig, page])
    assert docs.correct({page.id: ("near_duplicate", (A, orig.id))}) == set()
    corrected = page.with_verdict("near_duplicate", (A, orig.id), corrected=True)
    assert docs.finalize({page.id: ("unique", None)}) == {page.id: corrected}


@all_backends
@pytest.mark.parametrize("published", ["unique", "changed", "unchanged"])
def test_correct_reports_published_records(make_docs: DocsFactory, published: str) -> None:
    docs = make_docs()
    orig, page = record(A, 1.0), record(B, 2.0)
    docs.claim([orig, page])
    docs.finalize({page.id: (published, None)})
    corrected = page.with_verdict("exact_duplicate", (A, orig.id), corrected=True)
    assert docs.correct({page.id: ("exact_duplicate", (A, orig.id))}) == {page.id}
    assert docs.get([page.id])[page.id] == corrected
    # Repeated (a batch redone after its decisions were aborted): reported again, no change.
    assert docs.correct({page.id: ("exact_duplicate", (A, orig.id))}) == {page.id}
    assert docs.get([page.id])[page.id] == corrected


@all_backends
def test_a_page_that_found_its_original_itself_is_not_corrected_again(
    make_docs: DocsFactory,
) -> None:
    """Only a verdict a correction set is repeated: a page whose own batch found the original
    needs no correcting decision when that original's batch is replayed."""
    docs = make_docs()
    orig, page = record(A, 1.0), record(B, 2.0)
    docs.claim([orig, page])
    docs.finalize({page.id: ("near_duplicate", (A, orig.id))})
    assert docs.correct({page.id: ("near_duplicate", (A, orig.id))}) == set()
    assert docs.get([page.id])[page.id].corrected is False


@all_backends
def test_correct_keeps_an_earlier_original(make_docs: DocsFactory) -> None:
    docs = make_docs()
    early, late, page = record(A, 1.0), record(C, 1.5), record(B, 2.0)
    docs.claim([early, late, page])
    docs.finalize({page.id: ("near_duplicate", (A, early.id))})
    assert docs.correct({page.id: ("near_duplicate", (C, late.id))}) == set()
    assert docs.get([page.id])[page.id].duplicate_of_id == early.id


@all_backends
def test_correct_replaces_a_later_original_by_an_earlier_one(make_docs: DocsFactory) -> None:
    docs = make_docs()
    early, late, page = record(A, 1.0), record(C, 1.5), record(B, 2.0)
    docs.claim([early, late, page])
    docs.finalize({page.id: ("near_duplicate", (C, late.id))})
    assert docs.correct({page.id: ("exact_duplicate", (A, early.id))}) == set()
    assert docs.get([page.id])[page.id] == page.with_verdict(
        "exact_duplicate", (A, early.id), corrected=True
    )


@all_backends
def test_a_correction_to_an_earlier_original_of_a_corrected_page_is_reported(
    make_docs: DocsFactory,
) -> None:
    """The first correction's decision may have been aborted with its batch (its worker
    fenced or killed after the Redis writes) and the batch redone elsewhere after another
    worker's earlier original: the page's suppression must still reach the decisions."""
    docs = make_docs()
    early, late, page = record(A, 1.0), record(C, 1.5), record(B, 2.0)
    docs.claim([early, late, page])
    docs.finalize({page.id: ("unique", None)})
    assert docs.correct({page.id: ("near_duplicate", (C, late.id))}) == {page.id}
    assert docs.correct({page.id: ("near_duplicate", (A, early.id))}) == {page.id}
    assert docs.get([page.id])[page.id] == page.with_verdict(
        "near_duplicate", (A, early.id), corrected=True
    )
    # The redone batch's own (later) original changes nothing and is not reported.
    assert docs.correct({page.id: ("near_duplicate", (C, late.id))}) == set()


@all_backends
def test_correct_ignores_unknown_ids(make_docs: DocsFactory) -> None:
    docs = make_docs()
    assert docs.correct({page_id(A, 1.0): ("near_duplicate", (B, 1))}) == set()
    assert docs.get([page_id(A, 1.0)]) == {}


# ---- property: same observations as the reference ---------------------------------------

_URLS = [A, B, C, "https://example.com/ü", "https://example.com/a?session=1"]
_VERDICTS = ["unique", "changed", "unchanged", "near_duplicate", "exact_duplicate"]


@st.composite
def _records(draw: st.DrawFn) -> DocRecord:
    url = draw(st.sampled_from(_URLS))
    fetched_at = draw(st.integers(0, 6)) + draw(st.sampled_from([0.0, 0.25, 0.0001]))
    stray = draw(st.booleans()) and draw(st.booleans())
    ident = draw(st.integers(0, 2**64 - 2)) if stray else None
    verdict = draw(st.sampled_from([PENDING, PENDING, PENDING, *_VERDICTS]))
    base = record(url, fetched_at, ident=ident, fingerprint=draw(st.integers(0, 2**64 - 1)))
    return DocRecord(base.id, url, "example.com", fetched_at, base.fingerprint, "ab", verdict)


def _operation(draw: st.DrawFn, claimed: list[int]) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["claim", "claim_latest", "get", "latest", "finalize", "correct"]))
    if kind == "claim_latest":
        return kind, draw(st.lists(_records(), min_size=1, max_size=6))
    if kind == "claim" or not claimed:
        return "claim", draw(st.lists(_records(), min_size=1, max_size=6))
    ids = st.sampled_from(claimed)
    original = st.tuples(st.sampled_from(_URLS), ids | st.integers(0, 2**64 - 2))
    if kind == "get":
        return kind, draw(st.lists(ids | st.integers(0, 2**64 - 2), max_size=5))
    if kind == "latest":
        return kind, draw(st.lists(st.sampled_from(_URLS), max_size=4))
    if kind == "finalize":
        value = st.tuples(st.sampled_from(_VERDICTS), st.none() | original)
        return kind, draw(st.dictionaries(ids, value, max_size=4))
    value = st.tuples(st.sampled_from(sorted(SUPPRESSED)), original)
    return kind, draw(st.dictionaries(ids | st.integers(0, 2**64 - 2), value, max_size=4))


@all_backends
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_operations_match_the_reference(make_docs: DocsFactory, data: st.DataObject) -> None:
    docs, reference = make_docs(), MemoryDocStore()
    claimed: list[int] = []
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        kind, argument = _operation(data.draw, claimed)
        expected = getattr(reference, kind)(argument)
        assert getattr(docs, kind)(argument) == expected, (kind, argument)
        if kind in ("claim", "claim_latest"):
            claimed += [r.id for r in argument if r.id not in claimed]
    assert docs.get(claimed) == reference.get(claimed)
    assert docs.latest(_URLS) == reference.latest(_URLS)


# ---- Redis only --------------------------------------------------------------------------


@redis_only
def test_concurrent_finalize_and_correct_report_corrected_pages(make_docs: DocsFactory) -> None:
    docs = make_docs()
    early, late = record(A, 1.0), record(C, 1.5)
    pages = [record(f"https://example.com/p{n}", 10.0 + n) for n in range(240)]
    docs.claim([early, late, *pages])
    corrected = {p.id for n, p in enumerate(pages) if n % 3}
    reports: dict[int, int] = {}
    lock = threading.Lock()

    def note(ids: set[int]) -> None:
        with lock:
            for ident in ids:
                reports[ident] = reports.get(ident, 0) + 1

    def owner() -> None:
        for lo in range(0, len(pages), 8):
            batch = {p.id: ("unique", None) for p in pages[lo : lo + 8]}
            note(set(docs.finalize(batch)))

    def corrector(original: DocRecord, seed: int) -> None:
        ids = sorted(corrected)
        random.Random(seed).shuffle(ids)
        for lo in range(0, len(ids), 8):
            batch = {i: ("near_duplicate", (original.url, original.id)) for i in ids[lo : lo + 8]}
            note(docs.correct(batch))

    threads = [
        threading.Thread(target=owner),
        threading.Thread(target=corrector, args=(late, 1)),
        threading.Thread(target=corrector, args=(early, 2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = docs.get(p.id for p in pages)
    for page in pages:
        assert (final[page.id].verdict in SUPPRESSED) == (page.id in corrected)
        # Once, or twice when the late original's correction landed first (the earlier one is
        # reported again: the first one's decision may have been aborted).
        expected = (1, 2) if page.id in corrected else (0,)
        assert reports.get(page.id, 0) in expected
        if page.id in corrected:
            assert final[page.id].duplicate_of_id == early.id  # the earliest original wins


@pytest.mark.integration
def test_paused_redis_is_unavailable_and_the_retry_succeeds(redis_server: RedisServer) -> None:
    client = redis_server.client(
        socket_timeout=0.3, socket_connect_timeout=0.3, retry=Retry(NoBackoff(), 0)
    )
    docs = RedisDocStore(client, new_namespace())
    page = record(A, 1.0)
    redis_server.pause()
    try:
        with pytest.raises(BackendUnavailable, match=f"{redis_server.port}"):
            docs.claim([page])
        with pytest.raises(BackendUnavailable):
            docs.latest([A])
    finally:
        redis_server.resume()
    assert docs.claim([page]) in ({}, {page.id: page})  # the first attempt may have landed
    assert docs.latest([A]) == {A: page}
    client.close()


@redis_only
def test_ttl_applies_to_written_keys(make_docs: DocsFactory, docs_client: Any) -> None:
    docs = make_docs(ttl_seconds=120)
    page, stray = record(A, 1.0), record(B, 1.0, ident=1)
    docs.claim([page, stray])
    assert isinstance(docs, RedisDocStore)
    keys = _keys(docs, docs_client)
    assert len(keys) >= 3  # two buckets and a stray pointer
    assert all(0 < docs_client.ttl(key) <= 120 for key in keys)


@redis_only
def test_finalize_in_place_renews_the_ttl(make_docs: DocsFactory, docs_client: Any) -> None:
    docs = make_docs(ttl_seconds=120)
    assert isinstance(docs, RedisDocStore)
    page = record(A, 1.0)
    docs.claim([page])
    (key,) = [k for k in _keys(docs, docs_client) if not k.endswith(b":s")]
    docs_client.expire(key, 5)
    docs.finalize({page.id: ("unique", None)})
    assert docs_client.ttl(key) > 5
    assert docs.get([page.id]) == {page.id: page.with_verdict("unique", None)}


@redis_only
def test_a_second_instance_adopts_the_stored_layout(
    make_docs: DocsFactory, docs_client: Any
) -> None:
    docs = make_docs(expected_n=100, shard_bits=2)
    assert isinstance(docs, RedisDocStore)
    page = record(A, 1.0)
    docs.claim([page])
    other = RedisDocStore(docs_client, docs.layout.namespace, expected_n=10**8, shard_bits=8)
    assert other.layout == docs.layout
    assert other.get([page.id]) == {page.id: page}


@redis_only
def test_lost_scripts_are_loaded_again(make_docs: DocsFactory, docs_client: Any) -> None:
    docs = make_docs()
    page = record(A, 1.0)
    docs.claim([page])
    docs_client.script_flush()
    assert docs.get([page.id]) == {page.id: page}


@redis_only
def test_redis_errors_become_neardup_errors(make_docs: DocsFactory, docs_client: Any) -> None:
    docs = make_docs()
    assert isinstance(docs, RedisDocStore)
    page = record(A, 1.0)
    bucket = docs.layout.bucket(page.id)
    key = docs.layout.prefix(docs.layout.shard(bucket)) + docs.layout.suffix(bucket)
    docs_client.hset(key, "f", "v")
    with pytest.raises(BackendError, match="WRONGTYPE"):
        docs.claim([page])
    with pytest.raises(RecordTooLarge):
        docs.claim([record("https://e.com/" + "x" * 70_000, 1.0)])
    with pytest.raises(ConfigError):
        RedisDocStore(docs_client, "bad namespace")
    assert issubclass(RecordTooLarge, NeardupError)


def _keys(docs: RedisDocStore, client: Any) -> list[bytes]:
    # A cluster client scans every primary.
    return list(client.scan_iter(match=f"nd:{{{docs.layout.namespace}:*"))
