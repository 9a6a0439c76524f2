"""How often the stack's roller rolls: a full generation waits out ``min_roll_s``, a missing
spare never does (the roller's admin calls answered by an in-process stand-in)."""

from __future__ import annotations

from collections.abc import Sequence

from dedup_worker.adapters.kafka import MIN_ROLL_INTERVAL_S, GenerationRoller
from dedup_worker.adapters.kafka.generations import generation_name
from dedup_worker.worker.config import load_config
from neardup.crawl_run import generation_roller


class Topics:
    """The broker as the roller sees it: topics and each partition's log end."""

    def __init__(self) -> None:
        self.ends: dict[str, dict[int, int]] = {}

    def names(self, timeout: float = 0.0) -> set[str]:
        return set(self.ends)

    def partitions(self, topic: str, timeout: float = 0.0) -> list[int]:
        return sorted(self.ends.get(topic, {}))

    def create(self, topics: Sequence[str], partitions: int, replication: int = 1) -> list[str]:
        created = [t for t in topics if t not in self.ends]
        for topic in created:
            self.ends[topic] = dict.fromkeys(range(partitions), 0)
        return created

    def delete(self, topics: Sequence[str]) -> None:
        for topic in topics:
            self.ends.pop(topic, None)

    def log_ends(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {p: self.ends[topic][p] for p in partitions}

    def group_ids(self) -> list[str]:
        return []

    def committed(self, group: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fill(topics: Topics, base: str, number: int, records: int) -> None:
    topics.ends[generation_name(base, number)][0] = records


def test_a_full_generation_rolls_only_once_the_last_roll_is_min_roll_s_old() -> None:
    topics, clock = Topics(), Clock()
    roller = GenerationRoller(
        topics, ["pages", "decisions"], roll_records=100, partitions=2, min_roll_s=8.0,
        clock=clock,
    )  # fmt: skip
    assert roller.step().created == ["pages.g0", "decisions.g0"]  # no generation: at once
    assert roller.step().created == ["pages.g1", "decisions.g1"]  # no spare: at once
    fill(topics, "pages", 0, 150)
    clock.now += 7.9
    assert roller.step().created == []  # full, but rolled 7.9 s ago
    clock.now += 0.2
    assert roller.step().created == ["pages.g2", "decisions.g2"]
    fill(topics, "decisions", 1, 100)  # the decisions fill up too: the same pace
    clock.now += 2.0
    assert roller.step().created == []
    clock.now += 6.0
    assert roller.step().created == ["pages.g3", "decisions.g3"]


def test_without_a_pace_a_full_generation_rolls_at_the_next_look() -> None:
    topics = Topics()
    roller = GenerationRoller(topics, ["pages"], roll_records=100, partitions=1, clock=Clock())
    roller.step()
    roller.step()
    fill(topics, "pages", 0, 100)
    assert roller.step().created == ["pages.g2"]
    fill(topics, "pages", 1, 100)
    assert roller.step().created == ["pages.g3"]


def test_the_stack_rolls_4000_records_a_partition_at_most_every_8_seconds() -> None:
    config = load_config([], {"NEARDUP_TOPIC_GENERATIONS": "on"})
    roller = generation_roller(config, partitions=4)
    assert (config.generation_records, roller.roll_records) == (4000, 4000)
    assert roller.min_roll_s == MIN_ROLL_INTERVAL_S == 8.0
