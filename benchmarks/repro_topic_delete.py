"""Repro: deleting a topic a librdkafka client still fetches crashes that client on Tansu.

Tansu 0.6.0 answers a Fetch for an unknown topic with ``current_leader = {0, 0}`` and a zero
topic id for every partition; librdkafka (KIP-951) turns that into a metadata update with a
null topic name and crashes in ``rd_kafka_metadata_cache_find`` (strcmp on NULL, librdkafka
issue #5093). A client that stopped fetching the topic before it was deleted is safe.

Each iteration starts a child process with a producer, a group consumer and a reader
(manual assignment, no group) on topic ``T`` and on a topic ``U`` that stays, then:

- ``--mode unsafe``: deletes ``T`` while the child fetches it;
- ``--mode ordered``: asks the child to let ``T`` go first (the reader unassigns it and then
  commits its position under its group id; the consumer drops it from its subscription) and
  deletes ``T`` only once the group is Stable with no member assigned a partition of ``T``;

then lets the child run on for ``--after`` seconds and reports how it ended (a crash is an
exit by SIGSEGV). Run: ``python benchmarks/repro_topic_delete.py --mode unsafe --runs 5``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import uuid

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from dedup_worker.adapters.kafka import TopicAdmin
from neardup.stack import KafkaBroker

_CHILD = r"""
import json, sys, threading, time
from confluent_kafka import Consumer, Producer, TopicPartition
boot, t, u, group, reader_group = sys.argv[1:6]
base = {"bootstrap.servers": boot, "heartbeat.interval.ms": 500, "session.timeout.ms": 6000,
        "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 1000}
producer = Producer({"bootstrap.servers": boot, "linger.ms": 5})
consumer = Consumer({**base, "group.id": group, "auto.offset.reset": "earliest"})
consumer.subscribe([t, u])
reader = Consumer({**base, "group.id": reader_group, "enable.auto.commit": False})
reader.assign([TopicPartition(t, 0, 0), TopicPartition(u, 0, 0)])
commands = []
threading.Thread(target=lambda: commands.extend(l.strip() for l in sys.stdin), daemon=True).start()
topics = [t, u]
print("fetching", flush=True)
while True:
    for topic in topics:
        producer.produce(topic, b"x" * 100)
    producer.poll(0)
    consumer.poll(0.05)
    reader.poll(0.05)
    while commands:
        command = commands.pop(0)
        if command == "let-go":
            topics = [u]
            producer.flush(10)
            # The reader: stop fetching first, then say how far it read (its group's commit).
            position = reader.position([TopicPartition(t, 0)])
            reader.incremental_unassign([TopicPartition(t, 0)])
            done = [TopicPartition(t, 0, max(position[0].offset, 0))]
            reader.commit(offsets=done, asynchronous=False)
            consumer.subscribe([u])  # the group consumer drops T (its next rebalance revokes it)
            print("let-go", flush=True)
        elif command == "exit":
            producer.flush(5)
            consumer.close()
            reader.close()
            sys.exit(0)
"""


def assigned_anywhere(admin: AdminClient, group: str, topic: str) -> bool | None:
    """True if a member of ``group`` has a partition of ``topic``; None if not Stable."""
    described = admin.describe_consumer_groups([group])[group].result()
    if str(described.state).split(".")[-1] != "STABLE":
        return None
    return any(
        tp.topic == topic
        for member in described.members
        for tp in (member.assignment.topic_partitions if member.assignment else [])
    )


def committed(admin: AdminClient, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    result = admin.list_consumer_group_offsets([request])[group].result()
    return int(result.topic_partitions[0].offset)


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def one_run(broker: KafkaBroker, mode: str, after: float) -> dict[str, object]:
    admin = TopicAdmin(broker.settings)
    raw = AdminClient({"bootstrap.servers": broker.bootstrap})
    run = uuid.uuid4().hex[:8]
    t, u, group, reader_group = f"t-{run}", f"u-{run}", f"g-{run}", f"r-{run}"
    admin.create([t, u], 1)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, broker.bootstrap, t, u, group, reader_group],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "fetching"
    # Let the group form and the reader read some of T: both fetch it now. (Tansu's
    # DescribeGroups lists no member assignments, so the group's answer cannot show T.)
    wait_for(lambda: assigned_anywhere(raw, group, u) is not None, 30)
    time.sleep(4.0)
    waited = 0.0
    if mode == "ordered":
        child.stdin.write("let-go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "let-go"
        started = time.monotonic()
        if not wait_for(lambda: assigned_anywhere(raw, group, t) is False, 30):
            raise SystemExit("the group never settled")
        if committed(raw, reader_group, t) < 0:
            raise SystemExit("the reader committed nothing on T")
        waited = time.monotonic() - started
    admin.delete([t])
    deadline = time.monotonic() + after
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.1)
    if child.poll() is None:
        child.stdin.write("exit\n")
        child.stdin.flush()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    code = child.returncode
    admin.delete([u])
    ended = "SIGSEGV" if code == -signal.SIGSEGV else f"exit {code}"
    return {"mode": mode, "ended": ended, "settle_s": round(waited, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("unsafe", "ordered"), default="unsafe")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--after", type=float, default=8.0, help="seconds to run on after")
    args = parser.parse_args()
    with KafkaBroker() as broker:
        crashes = 0
        for _ in range(args.runs):
            result = one_run(broker, args.mode, args.after)
            crashes += result["ended"] == "SIGSEGV"
            print(json.dumps(result), flush=True)
        print(json.dumps({"mode": args.mode, "runs": args.runs, "crashes": crashes}))


if __name__ == "__main__":
    main()
