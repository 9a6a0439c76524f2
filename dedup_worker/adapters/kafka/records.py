"""Records and offsets as the rest of the project sees them (plain values, no client objects)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Message, TopicPartition

#: (topic, partition)
Partition = tuple[str, int]
#: The offset to commit or start from per partition (one past the last record done).
Offsets = dict[Partition, int]


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record (librdkafka's ``Message`` copied out of the client)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def record_of(message: Message) -> Record:
    return Record(
        message.topic() or "",
        message.partition() or 0,
        message.offset() or 0,
        message.key(),
        message.value(),
    )


def topic_partitions(offsets: Mapping[Partition, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, part, offset) for (topic, part), offset in offsets.items()]


def first_offsets(records: Sequence[Record]) -> Offsets:
    """The lowest offset per partition of a batch: where to rewind to."""
    firsts: Offsets = {}
    for record in records:
        tp = (record.topic, record.partition)
        firsts[tp] = min(firsts.get(tp, record.offset), record.offset)
    return firsts


def next_offsets(records: Sequence[Record]) -> Offsets:
    """The offsets to commit after a batch: one past its last record per partition."""
    ends: Offsets = {}
    for record in records:
        tp = (record.topic, record.partition)
        ends[tp] = max(ends.get(tp, -1), record.offset + 1)
    return ends


def offsets_text(offsets: Mapping[Partition, int]) -> str:
    """``pages[0]@120,pages[3]@77``: how logs name a batch's committed offsets."""
    return ",".join(f"{topic}[{part}]@{offset}" for (topic, part), offset in offsets.items())
