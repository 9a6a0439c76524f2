"""Seeds, allowed domains, settings validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler.config import (
    ConfigError,
    crawl_config,
    default_crawl_id,
    env_settings,
    optional_int,
    parse_domains,
    parse_seeds,
)
from dedup_worker import errors
from dedup_worker.worker.config import load_config


def test_seeds_from_arguments_and_a_file_canonical_and_unique(tmp_path: Path) -> None:
    seed_file = tmp_path / "seeds.txt"
    seed_file.write_text("# comment\nhttp://b.test/x  # trailing\n\nHTTP://A.test:80/\n")
    seeds = parse_seeds("http://a.test/, http://c.test/?b=2&a=1", seed_file)
    assert seeds == ["http://a.test/", "http://c.test/?a=1&b=2", "http://b.test/x"]


@pytest.mark.parametrize("bad", ["ftp://a.test/", "a.test/page", "http://"])
def test_bad_seeds_are_refused_by_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="seed"):
        parse_seeds(bad)


def test_missing_seed_file_says_which() -> None:
    with pytest.raises(ConfigError, match="cannot read seed file"):
        parse_seeds(None, "/nonexistent/seeds.txt")


def test_allowed_domains_default_to_the_seed_hosts() -> None:
    assert parse_domains(None, ["http://a.test:8080/x", "http://b.test/"]) == ["a.test", "b.test"]
    assert parse_domains("x.test, Y.test.", ["http://a.test/"]) == ["x.test", "y.test"]


def test_optional_limits() -> None:
    assert optional_int(None, "max_depth") is None and optional_int("", "max_depth") is None
    assert optional_int("3", "max_depth") == 3
    with pytest.raises(ConfigError, match="max_pages must be >= 1"):
        optional_int("0", "max_pages", minimum=1)
    with pytest.raises(ConfigError, match="max_depth must be an integer"):
        optional_int("deep", "max_depth")


def test_settings_and_environment() -> None:
    env = env_settings({"NEARDUP_KAFKA_BOOTSTRAP": "k:9092", "NEARDUP_REDIS_URL": "memory"})
    config = crawl_config(Settings(env))
    assert config.publishing and not config.shared_seen
    assert (config.pages_topic, config.decisions_topic) == ("pages", "decisions")
    assert not crawl_config(Settings({})).publishing
    with pytest.raises(ConfigError, match="NEARDUP_PRIORITY_LEVELS"):
        crawl_config(Settings({"NEARDUP_PRIORITY_LEVELS": 0}))


def test_default_crawl_id_is_stable_and_order_free() -> None:
    one = default_crawl_id(["http://a.test/", "http://b.test/"])
    assert one == default_crawl_id(["http://b.test/", "http://a.test/"])
    assert one != default_crawl_id(["http://a.test/"])


def test_a_setting_wins_over_the_environment_which_wins_over_the_default() -> None:
    env = {"NEARDUP_CRAWL_ID": "from-env", "NEARDUP_MAX_PAGES": "7", "NEARDUP_DROP_PARAMS": "a b"}
    config = crawl_config(Settings({"NEARDUP_CRAWL_ID": "from-setting"}), env)
    assert (config.crawl_id, config.max_pages) == ("from-setting", 7)
    assert config.extract_options.drop_params == frozenset({"a", "b"})
    # Set, even empty, the setting wins: -s NEARDUP_KAFKA_BOOTSTRAP= switches publishing off.
    off = crawl_config(Settings({"NEARDUP_KAFKA_BOOTSTRAP": ""}), {"NEARDUP_KAFKA_BOOTSTRAP": "k"})
    assert not off.publishing
    assert crawl_config(Settings({}), {}).max_pages is None


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"NEARDUP_ITEM_VERDICT": "maybe"}, "NEARDUP_ITEM_VERDICT must be true or false"),
        ({"NEARDUP_DECISION_TIMEOUT": "soon"}, "NEARDUP_DECISION_TIMEOUT must be a number"),
        ({"NEARDUP_CRAWL_ID": "a{b}"}, "NEARDUP_CRAWL_ID must not contain"),
        ({"NEARDUP_REDIS_CLUSTER": "true"}, "NEARDUP_REDIS_CLUSTER is set but NEARDUP_REDIS_URL"),
        ({"NEARDUP_MAX_PAGES": "0"}, "NEARDUP_MAX_PAGES must be >= 1"),
        (
            {"NEARDUP_KAFKA_COMPRESSION": "brotli"},
            "NEARDUP_KAFKA_COMPRESSION must be one of none, gzip, snappy, lz4, zstd",
        ),
    ],
)
def test_bad_values_name_the_setting(settings: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        crawl_config(Settings(settings), {})


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("NEARDUP_KAFKA_BOOTSTRAP", "kafka"),
        ("NEARDUP_KAFKA_BOOTSTRAP", "kafka:9092,kafka2:99999"),
        ("NEARDUP_REDIS_URL", "localhost:6379"),
        ("NEARDUP_PAGES_TOPIC", "crawl/pages"),
        ("NEARDUP_DECISIONS_TOPIC", "x" * 250),
    ],
)
def test_the_crawler_refuses_what_the_workers_refuse_in_the_same_words(
    setting: str, value: str
) -> None:
    """A value the workers refuse at start-up must not start a crawl that then waits for
    decisions that never come (a broker may well accept a topic the workers refuse)."""
    env = {"NEARDUP_KAFKA_BOOTSTRAP": "127.0.0.1:9092", setting: value}
    with pytest.raises(errors.ConfigError) as by_worker:
        load_config([], env)
    with pytest.raises(ConfigError) as by_crawler:
        crawl_config(Settings({}), env)
    assert str(by_crawler.value) == str(by_worker.value)
    assert setting in str(by_crawler.value)


def test_the_predictions_topic_is_a_topic_name_too() -> None:
    with pytest.raises(ConfigError, match="NEARDUP_PREDICTIONS_TOPIC must be a Kafka topic name"):
        crawl_config(Settings({"NEARDUP_PREDICTIONS_TOPIC": "predicted decisions"}), {})


def test_good_services_and_topics_pass_both() -> None:
    env = {
        "NEARDUP_KAFKA_BOOTSTRAP": "kafka-0.kafka:9092, [::1]:9093",
        "NEARDUP_REDIS_URL": "rediss://:secret@redis.internal:6380/2",
        "NEARDUP_PAGES_TOPIC": "crawl.pages_v2",
    }
    config = crawl_config(Settings({}), env)
    assert config.pages_topic == load_config([], env).pages_topic == "crawl.pages_v2"
    assert config.shared_seen


def test_the_pages_producer_compresses_with_the_codec_asked_for() -> None:
    assert crawl_config(Settings({}), {}).kafka().producer_config()["compression.type"] == "none"
    config = crawl_config(Settings({"NEARDUP_KAFKA_COMPRESSION": "LZ4"}), {})
    assert config.kafka().producer_config()["compression.type"] == "lz4"
    assert "compression=lz4" in repr(config)
