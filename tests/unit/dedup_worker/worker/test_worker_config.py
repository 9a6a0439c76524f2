"""WorkerConfig: environment and flags (flags win), derived defaults, and errors that say what
to fix, naming the variable or flag the bad value came from."""

from __future__ import annotations

import re

import pytest

from dedup_worker.core.simhash import Fingerprinter, to_hex
from dedup_worker.core.sketch import (
    RECOMMENDED_FLIPS,
    RECOMMENDED_K,
    RECOMMENDED_REPLICAS,
    RECOMMENDED_TABLES_K,
)
from dedup_worker.errors import ConfigError
from dedup_worker.worker.config import WorkerConfig, load_config
from dedup_worker.worker.config_options import OPTIONS
from dedup_worker.worker.main import build_backends, engine_settings, main


def test_defaults_and_derived_values() -> None:
    config = load_config([], {})
    assert config.dlq_topic == "pages.dlq"
    assert config.worker_id  # the host name: memory mode is one process
    assert config.memory_backend and config.transactional == "auto"
    assert config.transactional_id == f"neardup-dedup.{config.worker_id}"
    assert (config.commit_retry_ms, config.lease_ttl_ms, config.lease_renew_ms) == (
        120_000,
        10_000,
        2_000,
    )


def test_the_detector_defaults_are_the_measured_ones() -> None:
    """The worker's index defaults are those ``neardup eval`` scores as the default (README,
    "The detector"): radius 8, tables complete to 3 over two orders of the bits, one flip."""
    config = load_config([], {})
    assert (config.k, config.tables_k, config.table_replicas, config.probe_flips) == (
        RECOMMENDED_K,
        RECOMMENDED_TABLES_K,
        RECOMMENDED_REPLICAS,
        RECOMMENDED_FLIPS,
    )
    assert "flips=1" in config.describe()
    assert engine_settings(config).k == RECOMMENDED_K


def test_flips_within_the_tables_k_are_reported_as_doing_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    index, _ = build_backends(load_config(["--k", "3"], {}), "vtest")
    assert index.k == 3
    assert "NEARDUP_PROBE_FLIPS=1 changes nothing" in caplog.text
    caplog.clear()
    build_backends(load_config([], {}), "vtest")
    assert "changes nothing" not in caplog.text and "before the flips" in caplog.text


def test_with_redis_and_no_worker_id_the_worker_leases_a_slot() -> None:
    redis = {"NEARDUP_REDIS_URL": "redis://r:6379/0"}
    leased = load_config([], redis)
    assert leased.worker_id == "" and leased.leased_identity
    assert "worker=(leased slot)" in leased.describe()
    assert leased.client_name.startswith("dedup-worker-") and leased.client_name != "dedup-worker-"
    explicit = load_config(["--worker-id", "w1"], redis)
    assert not explicit.leased_identity and explicit.transactional_id == "neardup-dedup.w1"
    off = load_config([], redis | {"NEARDUP_TRANSACTIONAL": "off"})
    assert not off.leased_identity and off.worker_id  # no transactions: nothing to fence


def test_environment_is_read_and_flags_win() -> None:
    env = {
        "NEARDUP_KAFKA_BOOTSTRAP": "k1:9092,k2:9093",
        "NEARDUP_REDIS_URL": "redis://r:6379/1",
        "NEARDUP_PAGES_TOPIC": "crawl.pages",
        "NEARDUP_K": "4",
        "NEARDUP_CREATE_TOPICS": "no",
        "NEARDUP_LOG_FORMAT": "JSON",
    }
    config = load_config(["--k", "2", "--create-topics", "--worker-id", "w7"], env)
    assert config.kafka_bootstrap == "k1:9092,k2:9093"
    assert config.redis_url == "redis://r:6379/1"
    assert config.dlq_topic == "crawl.pages.dlq"
    assert (config.k, config.create_topics, config.worker_id) == (2, True, "w7")
    assert config.log_format == "json"


def test_every_option_has_a_variable_and_a_flag() -> None:
    """... except the security settings: environment only, so no secret is ever a flag."""
    names = {option.field for option in OPTIONS}
    security = {"kafka_security", "redis_security"}
    assert names == set(WorkerConfig.__dataclass_fields__) - security
    assert all(option.env.startswith("NEARDUP_") for option in OPTIONS)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KAFKA_BOOTSTRAP", "x", "NEARDUP_KAFKA_BOOTSTRAP must be host:port[,host:port...], got"),
        ("KAFKA_BOOTSTRAP", "h:99999", "must be host:port"),
        ("REDIS_URL", "localhost:6379", "NEARDUP_REDIS_URL must be 'memory' or a URL like"),
        ("K", "three", "NEARDUP_K must be an integer 0..8, got 'three'"),
        ("K", "9", "NEARDUP_K must be an integer 0..8, got 9"),
        ("SHINGLE", "0", "NEARDUP_SHINGLE must be an integer 1..8"),
        ("PROBE_FLIPS", "4", "NEARDUP_PROBE_FLIPS must be an integer 0..3, got 4"),
        ("TRANSACTIONAL", "maybe", "NEARDUP_TRANSACTIONAL must be one of auto, on, off"),
        ("CREATE_TOPICS", "sure", "NEARDUP_CREATE_TOPICS must be true or false"),
        ("PAGES_TOPIC", "my pages", "NEARDUP_PAGES_TOPIC must be a Kafka topic name"),
        ("METRICS_PORT", "70000", "NEARDUP_METRICS_PORT must be an integer 0..65535"),
        ("LOG_LEVEL", "chatty", "NEARDUP_LOG_LEVEL must be one of DEBUG, INFO"),
        ("MAX_BYTES_PER_FINGERPRINT", "lots", "must be a number"),
        ("BATCH_MAX_RECORDS", "0", "NEARDUP_BATCH_MAX_RECORDS must be an integer 1..100000"),
        ("COMMIT_RETRY_MS", "-1", "NEARDUP_COMMIT_RETRY_MS must be an integer 0..3600000"),
        ("LEASE_TTL_MS", "500", "NEARDUP_LEASE_TTL_MS must be an integer 1000..600000"),
        ("WORKER_SLOTS", "0", "NEARDUP_WORKER_SLOTS must be an integer 1..100000"),
    ],
)
def test_bad_environment_values_say_what_to_fix(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config([], {f"NEARDUP_{variable}": value})


def test_the_message_quotes_the_bad_value() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config([], {"NEARDUP_KAFKA_BOOTSTRAP": "x"})
    assert str(caught.value) == (
        "NEARDUP_KAFKA_BOOTSTRAP must be host:port[,host:port...], got 'x'"
    )


def test_a_bad_flag_is_named_as_a_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--batch-max-wait-ms must be an integer"):
        load_config(["--batch-max-wait-ms", "-5"], {"NEARDUP_BATCH_MAX_WAIT_MS": "10"})


def test_options_are_checked_against_each_other() -> None:
    with pytest.raises(ConfigError, match="three different topics"):
        load_config(["--decisions-topic", "pages"], {})
    with pytest.raises(ConfigError, match="NEARDUP_REDIS_CLUSTER needs a redis:// URL"):
        load_config(["--redis-cluster"], {})
    with pytest.raises(ConfigError, match="NEARDUP_LEASE_RENEW_MS must be at most a third of"):
        load_config(["--lease-ttl-ms", "3000", "--lease-renew-ms", "1500"], {})
    with pytest.raises(ConfigError, match="MAX_MESSAGE_BYTES must be at least"):
        load_config(["--max-message-bytes", str(2 << 20), "--max-text-bytes", str(8 << 20)], {})


def test_main_exits_2_with_one_line_on_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEARDUP_KAFKA_BOOTSTRAP", "nowhere")
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "NEARDUP_KAFKA_BOOTSTRAP must be host:port" in err


def test_dropping_stop_words_changes_the_fingerprint_and_its_version_tag() -> None:
    """Off by default; on, the stop words do not vote (the page fingerprints as its other
    words alone) and the stored keys' version tag changes, so the two never mix."""
    default = engine_settings(load_config([], {}))
    dropped_config = load_config([], {"NEARDUP_DROP_STOP_WORDS": "yes"})
    dropped = engine_settings(dropped_config)
    assert not default.features.drop_stop_words and dropped.features.drop_stop_words
    assert default.version_tag == "f1w1t0h1kc4-s1b10x2"
    assert dropped.version_tag == "f1w1t0h1sc4-s1b10x2"
    assert "stop_words=dropped" in dropped_config.describe()
    assert "stop_words" not in load_config([], {}).describe()
    text = "the the the the the the cat the the mat the the"
    with_stop_words = Fingerprinter(default.features).fingerprint(text)
    without = Fingerprinter(dropped.features).fingerprint(text)
    assert to_hex(with_stop_words) == "5a4b53e6154757b4"  # pinned in test_simhash too
    assert to_hex(without) == "009522860ca00286"
    assert without == Fingerprinter(dropped.features).fingerprint("cat mat")
    flag_wins = load_config(["--no-drop-stop-words"], {"NEARDUP_DROP_STOP_WORDS": "1"})
    assert flag_wins.drop_stop_words is False


def test_the_worker_compresses_what_it_produces_with_the_codec_asked_for() -> None:
    assert load_config([], {}).kafka().producer_config()["compression.type"] == "none"
    config = load_config([], {"NEARDUP_KAFKA_COMPRESSION": "ZSTD"})
    assert config.kafka().producer_config()["compression.type"] == "zstd"
    assert "compression=zstd" in config.describe()
    with pytest.raises(ConfigError, match="NEARDUP_KAFKA_COMPRESSION must be one of none, gzip"):
        load_config([], {"NEARDUP_KAFKA_COMPRESSION": "brotli"})


@pytest.mark.parametrize(
    ("setting", "generations", "cluster_id", "turns"),
    [
        ("auto", "off", "neardup", True),  # the embedded stack's broker (Tansu): its groups wedge
        ("auto", "on", "kafka-prod", True),  # rolling topics: the embedded stack's setting
        ("auto", "off", "kafka-prod", False),  # a Kafka cluster: stops of many workers stay fast
        ("auto", "off", None, False),
        ("on", "off", "kafka-prod", True),
        ("off", "on", "neardup", False),
    ],
)
def test_workers_take_turns_leaving_their_group_on_the_embedded_broker(
    setting: str, generations: str, cluster_id: str | None, turns: bool
) -> None:
    from dedup_worker.worker.main import build_leave_turn

    env = {
        "NEARDUP_REDIS_URL": "redis://127.0.0.1:1/0",  # never reached: a turn is made lazily
        "NEARDUP_LEAVE_TURN": setting,
        "NEARDUP_TOPIC_GENERATIONS": generations,
    }
    assert (build_leave_turn(load_config([], env), cluster_id) is not None) is turns
    memory = load_config([], {**env, "NEARDUP_REDIS_URL": "memory"})
    assert build_leave_turn(memory, cluster_id) is None  # one worker: no turn
