"""End to end through the real broker and Redis: every verdict, corrections, bad input, outages."""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable

import pytest

from dedup_worker.adapters.kafka import TopicAdmin
from dedup_worker.contract.messages import Verdict
from dedup_worker.contract.reading import fold_decisions
from neardup.stack import KafkaBroker, RedisCluster, RedisServer
from tests.support.worker_helpers import (
    Setup,
    near_variant,
    page,
    produce,
    produce_pages,
    text,
    worker_thread,
)

pytestmark = pytest.mark.integration


def _backend(request: pytest.FixtureRequest, name: str) -> dict[str, str]:
    if name == "memory":
        return {"redis_url": "memory"}
    if name == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return {"redis_url": server.url}
    cluster: RedisCluster = request.getfixturevalue("redis_cluster")
    return {"redis_url": cluster.url, "redis_cluster": "1"}


@pytest.mark.parametrize(
    ("backend", "transactional"),
    [("memory", "on"), ("redis", "on"), ("cluster", "on"), ("redis", "off")],
)
def test_every_verdict_and_a_correction(
    backend: str, transactional: str, setup: Callable[..., Setup], request: pytest.FixtureRequest
) -> None:
    """Pages in, decisions out: unique, near/exact duplicate, unchanged, changed, corrects;
    with Kafka transactions and without (flush, then commit offsets)."""
    # One partition: pages arrive in the order produced, whatever the batch boundaries, so the
    # expected verdicts are exact. Arrival races across partitions are test_worker_processes'.
    s = setup(transactional=transactional, partitions=1, **_backend(request, backend))
    base, other = text(1), text(2)
    wave1 = [
        page("https://a.example/1", base, 1000.0),
        page("https://b.example/near", near_variant(base, 3, seed=10), 1001.0),
        page("https://b.example/copy", base, 1002.0),
        page("https://a.example/moving", other, 1003.0),
        page("https://c.example/late", near_variant(text(3), 3, seed=20), 2000.0),
    ]
    wave2 = [
        page("https://a.example/1", base, 1100.0),  # the same text again
        page("https://b.example/near", near_variant(base, 3, seed=10), 1101.0),  # a dup, again
        page("https://a.example/moving", text(4), 1104.0),  # a new text
        page("https://d.example/early", text(3), 1500.0),  # earlier than c.example/late
    ]
    reader = s.reader()
    with worker_thread(s.config) as worker:
        produce_pages(s.bootstrap, s.pages, wave1)
        reader.wait_for_pages(wave1)
        produce_pages(s.bootstrap, s.pages, wave2)
        reader.wait_for_pages(wave2)
        reader.read_until(lambda _: any(d.corrects for d in reader.decisions))
    reader.close()
    final = fold_decisions(reader.decisions)
    verdicts = {(url.split("//")[1], at): d.verdict for (url, at), d in final.items()}
    assert verdicts == {
        ("a.example/1", 1000.0): Verdict.UNIQUE,
        ("b.example/near", 1001.0): Verdict.NEAR_DUPLICATE,
        ("b.example/copy", 1002.0): Verdict.EXACT_DUPLICATE,
        ("a.example/moving", 1003.0): Verdict.UNIQUE,
        ("c.example/late", 2000.0): Verdict.NEAR_DUPLICATE,
        ("a.example/1", 1100.0): Verdict.UNCHANGED,
        ("b.example/near", 1101.0): Verdict.UNCHANGED,
        ("a.example/moving", 1104.0): Verdict.CHANGED,
        ("d.example/early", 1500.0): Verdict.UNIQUE,
    }
    late = final[("https://c.example/late", 2000.0)]
    assert late.corrects and late.duplicate_of == "https://d.example/early"
    assert final[("https://b.example/near", 1001.0)].duplicate_of == "https://a.example/1"
    assert not final[("https://b.example/copy", 1002.0)].follow_outlinks
    # Unchanged revisits keep their first fetch's standing (read back from Redis's record).
    assert final[("https://a.example/1", 1100.0)].follow_outlinks
    near_again = final[("https://b.example/near", 1101.0)]
    assert not near_again.follow_outlinks and near_again.duplicate_of == "https://a.example/1"
    assert worker.metrics.value("neardup_worker_pages_total") == len(wave1) + len(wave2)
    assert worker.metrics.value("neardup_worker_page_age_seconds_count") >= 2  # one per batch
    assert worker.producer.transactional == (transactional == "on")


def _bad_messages() -> dict[str, bytes]:
    good = json.loads(page("https://bad.example/x", text(5), 10.0).to_json())
    return {
        "malformed_json": b'{"schema": "neardup.page/1", "url": ',
        "wrong_type": json.dumps({**good, "fetched_at": "yesterday"}).encode(),
        "missing_field": json.dumps({k: v for k, v in good.items() if k != "url"}).encode(),
        "unknown_schema_version": json.dumps({**good, "schema": "neardup.page/2"}).encode(),
        "too_large": json.dumps({**good, "text": "a" * (50 * 1024 * 1024)}).encode(),
        "binary": b"\x89PNG\r\n\x1a\n" + os.urandom(4096),
        "invalid_utf8": b'{"schema": "neardup.page/1", "text": "\xff\xfe caf\xe9"}',
        "binary_body": json.dumps({**good, "text": "abc\x00\x01\x02"}).encode(),
        "deep_nesting": b"[" * 100_000,
        # Valid UTF-8 and valid JSON, but "\ud800" decodes to a lone surrogate: no URL.
        "lone_surrogate": json.dumps({**good, "url": "https://bad.example/\ud800"}).encode(),
    }


def test_bad_input_goes_to_the_dlq_and_the_worker_carries_on(
    setup: Callable[..., Setup], kafka_admin: TopicAdmin
) -> None:
    """Each bad message lands in the DLQ with its reason, key and bytes; good pages still pass."""
    s = setup(partitions=1)
    bad = _bad_messages()
    goods = [page(f"https://good.example/{i}", text(100 + i), 100.0 + i) for i in range(len(bad))]
    messages: list[tuple[bytes | None, bytes]] = []
    for (name, value), good in zip(bad.items(), goods, strict=True):
        messages += [(name.encode(), value), (good.host.encode(), good.to_json())]
    reader, dlq = s.reader(), s.reader(s.dlq)
    with worker_thread(s.config) as worker:
        produce(s.bootstrap, s.pages, messages)
        reader.wait_for_pages(goods)
        dlq.read_until(lambda records: len(records) >= len(bad), timeout=60)
    letters = {}
    for record in dlq.records:
        body = json.loads(record.value)
        letters[record.key.decode()] = body
        assert base64.b64decode(body["value_b64"]) == bad[record.key.decode()]
        assert base64.b64decode(body["key_b64"]) == record.key
    reader.close()
    dlq.close()
    reasons = {name: body["reason"] for name, body in letters.items()}
    assert reasons == {
        "malformed_json": "malformed_json",
        "wrong_type": "wrong_type",
        "missing_field": "missing_field",
        "unknown_schema_version": "unknown_schema_version",
        "too_large": "too_large",
        "binary": "invalid_utf8",  # 0x89 never starts a UTF-8 character
        "invalid_utf8": "invalid_utf8",
        "binary_body": "binary_body",
        "deep_nesting": "malformed_json",
        "lone_surrogate": "invalid_unicode",
    }
    assert all(body["topic"] == s.pages and body["detail"] for body in letters.values())
    assert worker.metrics.value("neardup_worker_pages_total") == len(messages)
    kafka_admin.delete([s.pages, s.dlq])  # ~120 MB that Tansu keeps in memory otherwise


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_redis_down_for_a_while_loses_no_page(
    backend: str, setup: Callable[..., Setup], request: pytest.FixtureRequest
) -> None:
    """SIGSTOP redis mid-stream (one node of three on the cluster): the worker backs off,
    keeps its batch, and then decides it."""
    s = setup(**_backend(request, backend))
    redis_server: RedisServer = (
        request.getfixturevalue("redis_server")
        if backend == "redis"
        else request.getfixturevalue("redis_cluster").nodes[0]
    )
    before = [page(f"https://r.example/{i}", text(200 + i), 10.0 + i) for i in range(20)]
    during = [page(f"https://s.example/{i}", text(300 + i), 50.0 + i) for i in range(60)]
    reader = s.reader()
    with worker_thread(s.config) as worker:
        produce_pages(s.bootstrap, s.pages, before)
        reader.wait_for_pages(before)
        redis_server.pause()
        try:
            produce_pages(s.bootstrap, s.pages, during)
            deadline = time.monotonic() + 20
            while worker.metrics.value("neardup_worker_backend_retries_total") < 2:
                assert time.monotonic() < deadline, "worker never noticed redis was down"
                time.sleep(0.1)
        finally:
            redis_server.resume()
        reader.wait_for_pages(during, timeout=60)
        reader.settle(1.0)
    reader.close()
    counts = Counter((d.url, d.fetched_at) for d in reader.decisions)
    assert set(counts) == {(p.url, p.fetched_at) for p in before + during}
    assert set(counts.values()) == {1}  # transactions: exactly one decision per page
    assert all(d.verdict is Verdict.UNIQUE for d in reader.decisions)


def test_a_backlog_in_small_batches_survives_redis_going_down(
    setup: Callable[..., Setup], redis_server: RedisServer
) -> None:
    """A backlog in batches of 5: the next batch is prefetched while each is decided. Redis
    stops mid-backlog, so a decide fails with a prefetched batch waiting: both are rewound,
    and every page still ends with exactly one decision."""
    s = setup(redis_url=redis_server.url, batch_max_records="5")
    pages = [page(f"https://b.example/{i}", text(500 + i), 100.0 + i) for i in range(1500)]
    produce_pages(s.bootstrap, s.pages, pages)
    reader = s.reader()
    with worker_thread(s.config) as worker:
        reader.read_until(lambda records: len(records) >= 100)
        redis_server.pause()
        try:
            deadline = time.monotonic() + 20
            while worker.metrics.value("neardup_worker_backend_retries_total") < 2:
                assert time.monotonic() < deadline, "worker never noticed redis was down"
                time.sleep(0.05)
        finally:
            redis_server.resume()
        reader.wait_for_pages(pages, timeout=120)
        reader.settle(1.0)
        prefetched = worker.metrics.value("neardup_worker_prefetched_batches_total")
    reader.close()
    assert prefetched > 0, "no batch was prefetched while the previous one was decided"
    counts = Counter((d.url, d.fetched_at) for d in reader.decisions)
    assert set(counts) == {(p.url, p.fetched_at) for p in pages}
    assert set(counts.values()) == {1}  # transactions: exactly one decision per page
    assert all(d.verdict is Verdict.UNIQUE for d in reader.decisions)


def test_a_broker_stall_mid_backlog_loses_no_page(
    setup: Callable[..., Setup], redis_server: RedisServer, kafka_broker: KafkaBroker
) -> None:
    """The broker stops answering for 3 s while the worker runs a backlog in batches of 5 (so a
    commit is under way when it stops): the commit waits it out, nothing is lost or doubled."""
    s = setup(redis_url=redis_server.url, batch_max_records="5")
    pages = [page(f"https://k.example/{i}", text(4000 + i), 100.0 + i) for i in range(1500)]
    produce_pages(s.bootstrap, s.pages, pages)
    reader = s.reader()
    with worker_thread(s.config) as worker:
        reader.read_until(lambda records: len(records) >= 100)
        kafka_broker.pause()
        try:
            time.sleep(3)
            stalled_at = worker.metrics.value("neardup_worker_pages_total")
        finally:
            kafka_broker.resume()
        reader.wait_for_pages(pages, timeout=120)
        reader.settle(1.0)
        prefetched = worker.metrics.value("neardup_worker_prefetched_batches_total")
    reader.close()
    assert stalled_at < len(pages), "the backlog was done before the broker stopped"
    assert prefetched > 0, "no batch was prefetched while the previous one was decided"
    counts = Counter((d.url, d.fetched_at) for d in reader.decisions)
    assert set(counts) == {(p.url, p.fetched_at) for p in pages}
    assert set(counts.values()) == {1}  # transactions: exactly one decision per page


def test_a_broker_outage_longer_than_a_request_timeout_publishes_each_page_once(
    setup: Callable[..., Setup], redis_server: RedisServer, kafka_broker: KafkaBroker
) -> None:
    """The broker stops answering for 40 s, past the 30 s a commit call waits, with a commit in
    flight. The worker retries the commit instead of aborting it: the broker completes the first
    attempt once it is back, and an abort plus a redone batch would publish it twice (aborting
    instead doubled a batch's 5 decisions in 2 of 4 runs of this test)."""
    s = setup(redis_url=redis_server.url, batch_max_records="5")
    pages = [page(f"https://o.example/{i}", text(9000 + i), 100.0 + i) for i in range(1500)]
    produce_pages(s.bootstrap, s.pages, pages)
    reader = s.reader()
    with worker_thread(s.config) as worker:
        reader.read_until(lambda records: len(records) >= 100)
        kafka_broker.pause()
        try:
            time.sleep(40)
            stalled_at = worker.metrics.value("neardup_worker_pages_total")
        finally:
            kafka_broker.resume()
        reader.wait_for_pages(pages, timeout=180)
        reader.settle(2.0)
    reader.close()
    assert stalled_at < len(pages), "the backlog was done before the broker stopped"
    counts = Counter((d.url, d.fetched_at) for d in reader.decisions)
    assert set(counts) == {(p.url, p.fetched_at) for p in pages}
    assert set(counts.values()) == {1}, Counter(counts.values())


def test_a_broker_outage_longer_than_the_commit_retry_limit_aborts_rewinds_and_retries(
    setup: Callable[..., Setup],
    redis_server: RedisServer,
    kafka_broker: KafkaBroker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """NEARDUP_COMMIT_RETRY_MS=3000 and the broker stopped mid-backlog until the worker gives up
    on the commit in flight (3 s in the commit call; up to the 10 s socket timeout in the
    offsets call, whose own timeout librdkafka ignores): the batch is aborted, rewound and
    retried once the broker is back. Nothing is lost; only the batch whose commit was given up
    may show twice (its commit may have landed)."""
    s = setup(redis_url=redis_server.url, batch_max_records="5", commit_retry_ms="3000")
    pages = [page(f"https://l.example/{i}", text(12000 + i), 100.0 + i) for i in range(600)]
    produce_pages(s.bootstrap, s.pages, pages)
    reader = s.reader()
    with caplog.at_level(logging.WARNING, logger="dedup_worker"), worker_thread(s.config) as worker:
        reader.read_until(lambda records: len(records) >= 100)
        kafka_broker.pause()
        try:
            deadline = time.monotonic() + 60
            while not _gave_up(caplog.records):
                assert time.monotonic() < deadline, "the commit did not give up"
                time.sleep(0.1)
            stalled_at = worker.metrics.value("neardup_worker_pages_total")
        finally:
            kafka_broker.resume()
        reader.wait_for_pages(pages, timeout=120)
        reader.settle(2.0)
        retries = worker.metrics.value("neardup_worker_backend_retries_total")
    reader.close()
    assert stalled_at < len(pages), "the backlog was done before the broker stopped"
    assert retries >= 1, "the commit never gave up"
    assert _gave_up(caplog.records)
    counts = Counter((d.url, d.fetched_at) for d in reader.decisions)
    assert set(counts) == {(p.url, p.fetched_at) for p in pages}
    twice = [key for key, n in counts.items() if n > 1]
    assert len(twice) <= 5 and set(counts.values()) <= {1, 2}, Counter(counts.values())


def _gave_up(records: list[logging.LogRecord]) -> bool:
    """The worker gave up on a commit (and aborts the batch)."""
    return any("the batch is aborted and redone" in r.getMessage() for r in records)
