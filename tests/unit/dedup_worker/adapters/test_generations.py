"""Topic generation names, the producers' routing, and the settings that switch them on."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from dedup_worker.adapters.kafka import KafkaSettings
from dedup_worker.adapters.kafka.generations import (
    Router,
    current_generation,
    generation_name,
    generation_number,
    generations_of,
    live_generations,
    merge_changes,
)
from dedup_worker.errors import ConfigError
from dedup_worker.worker.config import load_config
from neardup.crawl_run import generation_roller


class Metadata:
    """A stand-in for a librdkafka client's ``list_topics`` (the only call a Router makes)."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.calls = 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.calls += 1
        meta = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={name: meta for name in self.names})


def test_generation_names_parse_back_and_ignore_look_alikes() -> None:
    assert generation_name("pages", 12) == "pages.g12"
    assert generation_number("pages", "pages.g12") == 12
    for other in ("pages", "pages.dlq", "pages.g", "pages.g01", "pages.gx", "xpages.g1"):
        assert generation_number("pages", other) is None, other
    assert generations_of("pages", ["pages.g10", "pages.g2", "pages.dlq", "decisions.g7"]) == [
        2,
        10,
    ]


def test_the_current_generation_is_the_one_before_the_spare() -> None:
    assert current_generation([]) is None
    assert current_generation([0]) == 0
    assert current_generation([3, 4, 5]) == 4


def test_a_consumer_follows_current_and_spare_and_what_it_has_not_consumed() -> None:
    assert live_generations([0], lambda n: True) == [0]
    assert live_generations([1, 2, 3, 4], lambda n: n != 2) == [2, 3, 4]


def test_a_new_spare_waits_a_look_or_two_for_the_consumed_generation_to_go_with_it() -> None:
    now = ["p.g1", "p.g2"]
    spare_and_old = ["p.g1", "p.g2", "p.g3"]  # p.g1 not consumed yet: it goes a look later
    assert merge_changes(now, spare_and_old, 0) == (now, 1)
    assert merge_changes(now, ["p.g2", "p.g3"], 1) == (["p.g2", "p.g3"], 0)  # one change
    assert merge_changes(now, spare_and_old, 1) == (now, 2)
    assert merge_changes(now, spare_and_old, 2) == (spare_and_old, 0)  # a worker behind
    assert merge_changes(spare_and_old, ["p.g2", "p.g3"], 0) == (["p.g2", "p.g3"], 0)
    assert merge_changes(now, ["p.g2", "p.g3"], 0) == (["p.g2", "p.g3"], 0)


def test_a_router_sends_rolling_topics_to_their_current_generation_only() -> None:
    broker = Metadata("pages.g0", "pages.g1", "pages.dlq")
    router = Router(KafkaSettings("h:1").rolling_topics("pages"), broker)
    assert router.topic("pages") == "pages.g0"  # pages.g1 is the spare
    assert router.topic("pages.dlq") == "pages.dlq"  # not rolling: as named
    broker.names.append("pages.g2")
    assert router.topic("pages") == "pages.g0"  # the answer of the last refresh
    router.refresh()
    assert router.topic("pages") == "pages.g1"


def test_with_rolling_topics_no_client_creates_a_topic_by_asking_for_it() -> None:
    # librdkafka's producers and admin clients ask the broker to create a topic they ask the
    # metadata of: a deleted generation would come back when a producer re-reads it.
    rolling = KafkaSettings("h:1").rolling_topics("pages")
    assert rolling.client_config()["allow.auto.create.topics"] is False
    assert rolling.producer_config()["allow.auto.create.topics"] is False
    assert "allow.auto.create.topics" not in KafkaSettings("h:1").producer_config()


def test_without_rolling_topics_nothing_changes() -> None:
    broker = Metadata("pages.g0")
    router = Router(KafkaSettings("h:1"), broker)
    assert router.topic("pages") == "pages"
    router.refresh_if_due()
    assert broker.calls == 0
    assert "allow.auto.create.topics" not in KafkaSettings("h:1").client_config()


def test_a_longer_fetch_wait_allows_larger_generations() -> None:
    env = {"NEARDUP_TOPIC_GENERATIONS": "on", "NEARDUP_GENERATION_RECORDS": "20000"}
    assert load_config([], {**env, "NEARDUP_FETCH_WAIT_MS": "12"}).generation_records == 20000
    assert load_config([], {**env, "NEARDUP_TOPIC_GENERATIONS": "off"}).fetch_wait_ms == 5


def test_generations_are_off_unless_asked_and_roll_pages_and_decisions() -> None:
    assert load_config([], {}).kafka().rolling == frozenset()
    config = load_config([], {"NEARDUP_TOPIC_GENERATIONS": "on", "NEARDUP_PAGES_TOPIC": "p"})
    assert config.kafka().rolling == {"p", "decisions"}
    roller = generation_roller(config, partitions=3)
    assert roller.bases == ["p", "decisions"]
    assert roller.roll_records == config.generation_records


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NEARDUP_TOPIC_GENERATIONS": "maybe"}, "NEARDUP_TOPIC_GENERATIONS must be true or"),
        ({"NEARDUP_GENERATION_RECORDS": "10"}, "NEARDUP_GENERATION_RECORDS must be an integer"),
        (
            {"NEARDUP_TOPIC_GENERATIONS": "on", "NEARDUP_GENERATION_RECORDS": "20000"},
            "NEARDUP_FETCH_WAIT_MS=5 is too short for NEARDUP_GENERATION_RECORDS=20000",
        ),
        (
            {"NEARDUP_TOPIC_GENERATIONS": "on", "NEARDUP_DLQ_TOPIC": "pages.g1"},
            "NEARDUP_DLQ_TOPIC=pages.g1 reads as a generation",
        ),
        (
            {"NEARDUP_TOPIC_GENERATIONS": "on", "NEARDUP_DECISIONS_TOPIC": "pages.g0"},
            "NEARDUP_DECISIONS_TOPIC=pages.g0 reads as a generation",
        ),
    ],
)
def test_bad_generation_settings_fail_at_start_up_naming_the_setting(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config([], env)
