"""Rolling topic generations on the real broker: pages flow while the topics roll, nothing is
lost, and old generations are deleted while two workers and a reader run, none of them
fetching what is deleted (a client that did would crash this process: see
``dedup_worker/adapters/kafka/generations.py`` and ``benchmarks/repro_topic_delete.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack

import psutil
import pytest
from confluent_kafka import Consumer, TopicPartition

from dedup_worker.adapters import kafka
from dedup_worker.adapters.kafka import (
    GenerationRoller,
    KafkaSettings,
    TopicAdmin,
    generation_name,
    generations_of,
    produce_all,
)
from dedup_worker.adapters.kafka.generations import HELD, RELEASED, marker_group
from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.worker.config import load_config
from neardup.servers import RedisServer
from neardup.stack import KafkaBroker
from tests.support.worker_helpers import Setup, check_against_oracle, family_stream, worker_thread

pytestmark = pytest.mark.integration


def roller_of(setup: Setup, roll_records: int) -> GenerationRoller:
    config = setup.config
    return GenerationRoller(
        TopicAdmin(config.kafka()),
        [config.pages_topic, config.decisions_topic],
        roll_records=roll_records,
        partitions=config.partitions,
    )


def wait_until(done: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    """Poll ``done`` (which does one step of work) until it holds; a generous bound."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_generations_roll_and_go_while_pages_flow_losing_no_page_and_no_decision(
    setup: Callable[..., Setup], redis_server: RedisServer
) -> None:
    s = setup(redis_server.url, partitions=2, topic_generations="on")
    config = s.config
    settings = config.kafka()
    admin = TopicAdmin(settings)
    roller = roller_of(s, roll_records=12)
    pages = family_stream(seed=14, families=12, members=4, singles=60)
    reader = kafka.TopicReader(settings, config.decisions_topic)
    reader.start("beginning")
    decisions: list[Decision] = []
    deleted: list[str] = []

    def read() -> list[Decision]:
        decisions.extend(decode_decision(r.value or b"") for r in reader.poll(0.2))
        return decisions

    configs = [load_config([], {**s.env, "NEARDUP_WORKER_ID": f"gen-w{i}"}) for i in range(2)]
    with ExitStack() as running:
        for worker_config in configs:
            running.enter_context(worker_thread(worker_config))
        for start in range(0, len(pages), 12):
            chunk = pages[start : start + 12]
            # A new producer each time: it writes to the newest generation there is now.
            produce_all(
                settings, config.pages_topic, ((p.host.encode(), p.to_json()) for p in chunk)
            )
            deleted += roller.step().deleted
            read()
        wanted = {(p.url, p.fetched_at) for p in pages}
        wait_until(
            lambda: wanted <= {(d.url, d.fetched_at) for d in read()}, "every page's decision"
        )
        rolled = generations_of(config.pages_topic, admin.names())
        assert rolled[-1] >= 3, rolled  # pages went through at least four generations
        old = {generation_name(t, n) for t in (s.pages, s.decisions) for n in (0, 1)}

        def old_ones_deleted() -> bool:
            nonlocal deleted
            deleted += roller.step().deleted
            read()
            return old <= set(deleted)

        wait_until(old_ones_deleted, f"{old} to be deleted")
        assert not old & admin.names()
        for _ in range(10):  # the clients run on past the deletion
            read()
    # Leaving the block stopped both workers cleanly: the deletions did not disturb them.
    reader.close()
    assert check_against_oracle(decisions, pages) > 0  # every page one final, right decision


def test_an_old_generation_is_kept_while_a_marker_holds_it_or_a_group_does_not_mark(
    kafka_broker: KafkaBroker,
) -> None:
    tag = str(time.monotonic_ns())
    pages, decisions = f"pages-keep-{tag}", f"decisions-keep-{tag}"
    settings = KafkaSettings(kafka_broker.bootstrap).rolling_topics(pages, decisions)
    admin = TopicAdmin(settings)
    admin.create([pages, decisions], 1)  # generation 0 of both
    produce_all(settings, pages, [(b"k", b"v")] * 3)
    roller = GenerationRoller(admin, [pages, decisions], roll_records=3, partitions=1, grace_s=1.0)
    roller.roll_to(2)
    old = generation_name(pages, 0)
    for _ in range(3):  # quiet and two behind, but no group has read it
        assert old not in roller.step().deleted

    group = f"group-{tag}"
    consumer = Consumer(settings.client_config({"group.id": group}))
    consumer.commit(offsets=[TopicPartition(old, 0, 3)], asynchronous=False)
    consumer.close()
    step = roller.step()  # consumed, but the group marks nothing: it might be fetching it
    assert old not in step.deleted and "does not mark" in step.kept[old]

    admin.commit(marker_group(group), old, {0: HELD})
    step = roller.step()
    assert old not in step.deleted and "holds it" in step.kept[old]

    admin.commit(marker_group(group), old, {0: RELEASED})
    step = roller.step()  # deletable from now on, but a fetch sent before may still be answered
    assert old not in step.deleted and "deletable for" in step.kept[old]
    wait_until(lambda: old in roller.step().deleted, f"{old} to be deleted after the grace")
    assert old not in admin.names()
    assert generation_name(pages, 2) in admin.names()  # the current generation stays


def test_a_reader_releases_the_generations_it_read_when_it_closes(
    kafka_broker: KafkaBroker,
) -> None:
    # A long-lived stack (neardup up) outlives its crawls: a closed reader's markers must not
    # keep its generations from deletion.
    decisions = f"decisions-close-{time.monotonic_ns()}"
    settings = KafkaSettings(kafka_broker.bootstrap).rolling_topics(decisions)
    admin = TopicAdmin(settings)
    admin.create([decisions], 1)  # generation 0
    admin.create([generation_name(decisions, 1)], 1)  # the spare
    reader = kafka.TopicReader(settings, decisions)
    reader.start("beginning")
    markers = marker_group(reader.group_id)
    read = [generation_name(decisions, n) for n in (0, 1)]
    assert [admin.committed(markers, topic, [0]) for topic in read] == [{0: HELD}] * 2
    reader.close()
    assert [admin.committed(markers, topic, [0]) for topic in read] == [{0: RELEASED}] * 2


def _connections_to(bootstrap: str) -> int:
    port = int(bootstrap.rsplit(":", 1)[1])
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def test_a_closed_reader_of_generations_leaves_no_connection_open(
    kafka_broker: KafkaBroker,
) -> None:
    """Closed while its owner still holds it (``neardup crawl``'s recorder sits in a
    reference cycle), the reader's admin client kept a connection to the broker, and the
    embedded broker, stopping, waited out its 5 s timeout for it at the end of every crawl."""
    decisions = f"decisions-conn-{time.monotonic_ns()}"
    settings = KafkaSettings(kafka_broker.bootstrap).rolling_topics(decisions)
    TopicAdmin(settings).create([decisions, generation_name(decisions, 1)], 1)
    before = _connections_to(kafka_broker.bootstrap)
    reader = kafka.TopicReader(settings, decisions)
    reader.start("beginning")
    reader.poll(0.5)
    assert _connections_to(kafka_broker.bootstrap) > before
    reader.close()
    assert _connections_to(kafka_broker.bootstrap) == before, "a client of the reader lives on"


def test_a_reader_keeps_an_older_generation_while_producers_may_still_write_to_it(
    kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    # Producers re-read which generation is current every second, so records land in the one
    # before for about that long after a roll. A reader that let it go at the first look took
    # it back at the next: those decisions came ~3 s late.
    decisions = f"decisions-late-{time.monotonic_ns()}"
    settings = KafkaSettings(kafka_broker.bootstrap).rolling_topics(decisions)
    admin = TopicAdmin(settings)
    admin.create([decisions], 1)  # generation 0
    admin.create([generation_name(decisions, 1)], 1)  # the spare
    produce_all(settings, decisions, [(b"k", b"before")])  # into generation 0, current
    reader = kafka.TopicReader(settings, decisions)
    reader.start("beginning")
    values: list[bytes] = []

    def read(count: int) -> Callable[[], bool]:
        def step() -> bool:
            values.extend(r.value or b"" for r in reader.poll(0.2))
            return len(values) >= count

        return step

    def looked_at_the_roll() -> bool:
        reader.poll(0.2)
        return "decisions-late" in caplog.text and ".g2'" in caplog.text

    with caplog.at_level(logging.INFO, logger="dedup_worker.adapters.kafka.reader_generations"):
        wait_until(read(1), "the first record")
        admin.create([generation_name(decisions, 2)], 1)  # a roll: generation 0 is older now
        wait_until(looked_at_the_roll, "the reader's look at the roll")
        # A producer that has not re-read the metadata yet, right after that look:
        produce_all(KafkaSettings(kafka_broker.bootstrap), generation_name(decisions, 0), [
            (b"k", b"late")
        ])  # fmt: skip
        wait_until(read(2), "the late record")
        let_go = f"read generation {generation_name(decisions, 0)} to its end"
        wait_until(lambda: reader.poll(0.2) is not None and let_go in caplog.text, let_go)
    reader.close()
    assert values == [b"before", b"late"]
    assert "reading it again" not in caplog.text


def test_a_reader_resumed_from_saved_offsets_reads_every_generation_still_there(
    kafka_broker: KafkaBroker,
) -> None:
    # Saved offsets name no generation; applied to another one they would skip decisions.
    decisions = f"decisions-resume-{time.monotonic_ns()}"
    settings = KafkaSettings(kafka_broker.bootstrap).rolling_topics(decisions)
    admin = TopicAdmin(settings)
    admin.create([decisions], 1)
    produce_all(settings, decisions, [(b"k", b"early"), (b"k", b"late")])  # into generation 0
    admin.create([generation_name(decisions, 1), generation_name(decisions, 2)], 1)
    reader = kafka.TopicReader(settings, decisions)
    reader.start({0: 1})  # one read before, in generation 0, which is no longer current
    values: list[bytes] = []

    def both_read() -> bool:
        values.extend(r.value or b"" for r in reader.poll(0.2))
        return len(values) >= 2

    wait_until(both_read, "the records of generation 0")
    reader.close()
    assert values == [b"early", b"late"]
