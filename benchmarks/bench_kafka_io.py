"""Benchmark the Kafka clients: publish and read 5 KB pages through the local Tansu broker.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_kafka_io.py [--count 20000] [--size 5120] [--partitions 4]
                                        [--client adapter|kafka-python|both]

It starts its own broker (memory storage) on a loopback port, so it measures the same path the
embedded mode and the tests use, and prints for each client the rate and the CPU this process
spent per message (``time.process_time``: every thread, the client's own I/O threads included),
which is what a client costs a crawler or a worker on a shared core.

- ``adapter``: the project's client (``dedup_worker.adapters.kafka``, confluent-kafka): the
  crawler's ``PagePublisher`` (idempotent, acks=all, linger 5 ms, delivery reports handed to the
  owner's thread as the reactor gets them) and the decision reader's ``TopicReader``.
- ``kafka-python``: the same configuration with kafka-python (the crawler's client before it
  moved to the adapter), when it is installed (``pip install kafka-python crc32c``).
"""

from __future__ import annotations

import argparse
import queue
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dedup_worker.adapters.kafka import KafkaSettings, PagePublisher, TopicReader
from neardup.stack import KafkaBroker

_WORDS = ("crawl", "page", "host", "link", "text", "near", "duplicate", "simhash", "shard")


@dataclass(frozen=True)
class Measure:
    count: int
    wall_s: float
    cpu_s: float


def _payloads(count: int, size: int) -> list[bytes]:
    """Text-like bodies of ``size`` bytes; a few distinct ones reused (the broker doesn't care)."""
    rng = random.Random(7)
    distinct = [" ".join(rng.choices(_WORDS, k=size)).encode()[:size] for _ in range(16)]
    return [distinct[i % len(distinct)] for i in range(count)]


def _timed(run: Callable[[], int]) -> Measure:
    wall, cpu = time.perf_counter(), time.process_time()
    count = run()
    return Measure(count, time.perf_counter() - wall, time.process_time() - cpu)


# ---- the project's adapter (confluent-kafka) --------------------------------------------------


def adapter_publish(settings: KafkaSettings, topic: str, payloads: list[bytes]) -> int:
    """The crawler's path: reserve, send, and delivery reports pumped on this thread."""
    calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
    publisher = PagePublisher.connect(
        settings, topic, max_inflight_bytes=16 << 20, max_message_bytes=10 << 20,
        call_from_thread=lambda f, *args: calls.put((f, args)),
    )  # fmt: skip
    acked: list[int] = []

    def pump(block: bool) -> None:
        try:
            f, args = calls.get(timeout=1.0) if block else calls.get_nowait()
            f(*args)
        except queue.Empty:
            pass

    granted: list[int] = []  # how many reservations were granted late
    waited = 0
    for i, body in enumerate(payloads):
        if not publisher.reserve(len(body), lambda: granted.append(1)):
            waited += 1
            while len(granted) < waited:  # over the in-flight bound: wait for acks
                pump(block=True)
        publisher.send(f"host{i % 500}".encode(), body, lambda error: acked.append(1))
        pump(block=False)
    while len(acked) < len(payloads):
        pump(block=True)
    publisher.close()
    return len(acked)


def adapter_read(settings: KafkaSettings, topic: str, count: int) -> int:
    reader = TopicReader(settings, topic)
    reader.start("beginning")
    seen = 0
    while seen < count:
        seen += len(reader.poll(1.0, max_records=1000))
    reader.close()
    return seen


# ---- kafka-python, for comparison ---------------------------------------------------------------


def kafka_python_publish(bootstrap: str, topic: str, payloads: list[bytes]) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
        batch_size=256 * 1024, max_request_size=10 << 20,
    )  # fmt: skip
    acked: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i, body in enumerate(payloads):
        future = producer.send(topic, key=f"host{i % 500}".encode(), value=body)
        future.add_callback(lambda _: acked.put(1))
    producer.flush()
    producer.close()
    return acked.qsize()


def kafka_python_read(bootstrap: str, topic: str, partitions: int, count: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed",
        auto_offset_reset="earliest", enable_auto_commit=False,
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    seen = 0
    while seen < count:
        for records in consumer.poll(timeout_ms=1000, max_records=1000).values():
            seen += len(records)
    consumer.close()
    return seen


def _kafka_python_installed() -> bool:
    try:
        import kafka  # noqa: F401
    except ImportError:
        return False
    return True


def _report(label: str, size: int, m: Measure) -> None:
    rate = m.count / m.wall_s
    cpu_us = m.cpu_s / m.count * 1e6
    print(
        f"{label:<28} {m.count:>7} msgs in {m.wall_s:6.2f} s  {rate:>8,.0f} msgs/s "
        f"{rate * size / 1e6:6.1f} MB/s  CPU {cpu_us:6.1f} us/msg"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=5 * 1024, help="message size in bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--client", choices=("adapter", "kafka-python", "both"), default="both")
    args = parser.parse_args()
    clients = ["adapter", "kafka-python"] if args.client == "both" else [args.client]
    if "kafka-python" in clients and not _kafka_python_installed():
        print("kafka-python is not installed: measuring the adapter only")
        clients.remove("kafka-python")
    payloads = _payloads(args.count, args.size)
    with KafkaBroker() as broker:
        for client in clients:
            _measure(broker, client, payloads, args)


def _measure(broker: KafkaBroker, client: str, payloads: list[bytes], args: Any) -> None:
    topic = f"bench-{client}"
    broker.admin().create([topic], args.partitions)
    if client == "adapter":
        published = _timed(lambda: adapter_publish(broker.settings, topic, payloads))
        read = _timed(lambda: adapter_read(broker.settings, topic, args.count))
    else:
        boot = broker.bootstrap
        published = _timed(lambda: kafka_python_publish(boot, topic, payloads))
        read = _timed(lambda: kafka_python_read(boot, topic, args.partitions, args.count))
    _report(f"{client}: publish", args.size, published)
    _report(f"{client}: read", args.size, read)
    broker.admin().delete([topic])


if __name__ == "__main__":
    main()
