"""NEARDUP_KAFKA_COMPRESSION against the real broker: producers send fewer bytes, the broker
serves the compressed batches, consumers read the same records, and a worker reading compressed
pages and writing compressed decisions decides as it does without."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from dedup_worker.adapters.kafka import KafkaSettings, produce_all
from dedup_worker.contract.messages import Verdict
from dedup_worker.contract.reading import fold_decisions
from neardup.stack import KafkaBroker
from tests.support.crawl_helpers import read_topic
from tests.support.worker_helpers import (
    Setup,
    near_variant,
    page,
    text,
    worker_thread,
)

pytestmark = pytest.mark.integration

PAGES = 200


def _bytes_sent(settings: KafkaSettings, topic: str, values: list[bytes]) -> int:
    """Bytes the producer put on the wire for ``values`` (librdkafka's ``tx_bytes``)."""
    stats: list[dict[str, Any]] = []
    producer = Producer(
        settings.producer_config(
            {"statistics.interval.ms": 100, "stats_cb": lambda raw: stats.append(json.loads(raw))}
        )
    )
    for n, value in enumerate(values):
        producer.produce(topic, value, key=f"host{n % 7}".encode())
    assert producer.flush(30) == 0
    flushed = time.monotonic()
    deadline = flushed + 10
    while time.monotonic() < deadline:  # a statistics report made after every acknowledgement
        producer.poll(0.1)
        if stats and stats[-1]["msg_cnt"] == 0 and len(stats) >= 2:
            break
    return int(stats[-1]["tx_bytes"])


def test_each_codec_shrinks_what_producers_send_and_consumers_read_it_back(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    # Pages of one site share most of their words, as real ones share a template and a language.
    values = [
        page(f"https://h{n % 7}.example/{n}", text(n % 20), 1000.0 + n).to_json()
        for n in range(PAGES)
    ]
    sent: dict[str, int] = {}
    for codec in ("none", "lz4", "zstd", "gzip", "snappy"):
        topic = kafka_topic(partitions=2)
        sent[codec] = _bytes_sent(
            KafkaSettings(kafka_broker.bootstrap, compression=codec), topic, values
        )
        records = read_topic(kafka_broker.bootstrap, topic)
        assert sorted(r.value for r in records) == sorted(values), codec
    for codec in ("lz4", "zstd", "gzip", "snappy"):
        assert sent[codec] < 0.7 * sent["none"], sent


def test_a_worker_decides_compressed_pages_and_compresses_its_decisions(
    setup: Callable[..., Setup],
) -> None:
    s = setup(partitions=1, kafka_compression="zstd")
    assert s.config.kafka().producer_config()["compression.type"] == "zstd"
    base = text(1)
    pages = [
        page("https://a.example/1", base, 1000.0),
        page("https://b.example/near", near_variant(base, 3, seed=10), 1001.0),
        page("https://b.example/copy", base, 1002.0),
        page("https://c.example/other", text(2), 1003.0),
    ]
    settings = KafkaSettings(s.bootstrap, compression="lz4")  # the crawler may use another codec
    produce_all(settings, s.pages, ((p.host.encode(), p.to_json()) for p in pages))
    reader = s.reader()
    with worker_thread(s.config):
        reader.wait_for_pages(pages)
    reader.close()
    verdicts = {url: d.verdict for (url, _), d in fold_decisions(reader.decisions).items()}
    assert verdicts == {
        "https://a.example/1": Verdict.UNIQUE,
        "https://b.example/near": Verdict.NEAR_DUPLICATE,
        "https://b.example/copy": Verdict.EXACT_DUPLICATE,
        "https://c.example/other": Verdict.UNIQUE,
    }
