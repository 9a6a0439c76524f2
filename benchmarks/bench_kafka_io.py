"""Benchmark producing and consuming 5 KB messages through the local Tansu broker (kafka-python).

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_kafka_io.py [--count 20000] [--size 5120] [--partitions 4] [--pure-crc]

It starts its own broker (memory storage) on a loopback port, so it measures the same path the
embedded mode and the tests use. Producing is measured twice: kafka-python's defaults (no linger,
16 KB batches, idempotent, acks=all) and a batching config (linger 20 ms, 1 MB batches).
Consuming verifies record CRCs as kafka-python always does; that is fast only when the
``crc32c`` C extension is installed, which the first line of output confirms. ``--pure-crc``
also measures consumption with kafka-python's pure-Python CRC (on a tenth of the messages).
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import crc32c
import kafka.record.util as record_util
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.record._crc32c import crc as pure_python_crc32c

from neardup.stack import KafkaBroker

logger = logging.getLogger(__name__)

_WORDS = ("crawl", "page", "host", "link", "text", "near", "duplicate", "simhash", "shard")


def _payloads(count: int, size: int) -> list[bytes]:
    """Text-like bodies of ``size`` bytes; a few distinct ones reused (the broker doesn't care)."""
    rng = random.Random(7)
    distinct = [" ".join(rng.choices(_WORDS, k=size)).encode()[:size] for _ in range(16)]
    return [distinct[i % len(distinct)] for i in range(count)]


def _produce(bootstrap: str, topic: str, payloads: list[bytes], **config: Any) -> float:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    start = time.perf_counter()
    for i, body in enumerate(payloads):
        producer.send(topic, key=f"host{i % 500}".encode(), value=body)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


def _consume(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    while seen < count:
        for records in consumer.poll(timeout_ms=1000, max_records=2000).values():
            seen += len(records)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _with_pure_crc(run: Callable[[], float]) -> float:
    """Run with kafka-python's pure-Python CRC-32C (it binds the C one as a default argument)."""
    saved = record_util.calc_crc32c.__defaults__
    record_util.calc_crc32c.__defaults__ = (pure_python_crc32c,)
    try:
        return run()
    finally:
        record_util.calc_crc32c.__defaults__ = saved


def _report(label: str, count: int, size: int, seconds: float) -> None:
    rate = count / seconds
    mb = rate * size / 1e6
    print(f"{label:<34} {count:>7} msgs in {seconds:6.2f} s  {rate:>9,.0f} msgs/s  {mb:7.1f} MB/s")


def _crc_line() -> str:
    in_use = record_util.calc_crc32c.__defaults__
    native = in_use is not None and in_use[0] is crc32c.crc32c
    return f"kafka-python CRC-32C: {'crc32c C extension' if native else 'pure Python (slow)'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=5 * 1024, help="message size in bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pure-crc", action="store_true", help="also time pure-Python CRCs")
    args = parser.parse_args()
    payloads = _payloads(args.count, args.size)
    print(_crc_line())
    with KafkaBroker() as broker:
        admin = broker.admin()
        topics = ["bench-default", "bench-batched"]
        admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics])
        admin.close()
        boot = broker.bootstrap
        _report("produce (defaults)", args.count, args.size, _produce(boot, topics[0], payloads))
        batched = _produce(boot, topics[1], payloads, linger_ms=20, batch_size=1 << 20)
        _report("produce (linger 20 ms, 1 MB batch)", args.count, args.size, batched)
        consumed = _consume(boot, topics[1], args.partitions, args.count)
        _report("consume (crc32c)", args.count, args.size, consumed)
        if args.pure_crc:
            n = args.count // 10
            pure = _with_pure_crc(lambda: _consume(boot, topics[0], args.partitions, n))
            _report("consume (pure-Python CRC)", n, args.size, pure)


if __name__ == "__main__":
    main()
