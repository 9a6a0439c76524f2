"""Kafka and Redis security settings: parsed once for every process, checked at start-up,
and never shown (repr, describe, error messages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler.config import crawl_config
from dedup_worker.adapters.kafka import KafkaSecurity, KafkaSettings
from dedup_worker.adapters.redis_client import RedisSecurity
from dedup_worker.adapters.security import Secret, environment, redact_url
from dedup_worker.errors import ConfigError
from dedup_worker.worker.config import load_config

SECRET = "hunter2-Sekr3t"


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def test_a_secret_never_shows_its_value() -> None:
    secret = Secret(SECRET)
    shown = [repr(secret), str(secret), f"{secret}", f"{secret:>20}", repr([secret])]
    assert all(SECRET not in text for text in shown), shown
    assert secret.reveal() == SECRET and secret == Secret(SECRET) and not Secret()


def test_kafka_defaults_to_plaintext_with_nothing_to_send() -> None:
    security = KafkaSecurity.from_settings(environment({}))
    assert security.client_config() == {"security.protocol": "plaintext"}


def test_kafka_sasl_ssl_maps_to_librdkafka(ca_file: str) -> None:
    env = {
        "NEARDUP_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "NEARDUP_KAFKA_SASL_MECHANISM": "scram-sha-512",
        "NEARDUP_KAFKA_SASL_USERNAME": "crawler",
        "NEARDUP_KAFKA_SASL_PASSWORD": SECRET,
        "NEARDUP_KAFKA_TLS_CA_FILE": ca_file,
    }
    security = KafkaSecurity.from_settings(environment(env))
    assert security.client_config() == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "crawler",
        "sasl.password": SECRET,
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": ca_file,
    }
    settings = KafkaSettings("k:9093", "neardup", security)
    for shown in (repr(settings), settings.describe(), security.describe()):
        assert SECRET not in shown and "crawler" in shown


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"NEARDUP_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "NEARDUP_KAFKA_SASL_USERNAME": "u"},
            "NEARDUP_KAFKA_SECURITY_PROTOCOL=sasl_ssl needs NEARDUP_KAFKA_SASL_MECHANISM, "
            "NEARDUP_KAFKA_SASL_PASSWORD",
        ),
        (
            {"NEARDUP_KAFKA_SASL_PASSWORD": SECRET},
            "NEARDUP_KAFKA_SASL_PASSWORD set, but NEARDUP_KAFKA_SECURITY_PROTOCOL=plaintext "
            "sends no SASL credentials",
        ),
        ({"NEARDUP_KAFKA_SECURITY_PROTOCOL": "tls"}, "NEARDUP_KAFKA_SECURITY_PROTOCOL must be"),
        (
            {"NEARDUP_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
             "NEARDUP_KAFKA_SASL_MECHANISM": "GSSAPI"},
            "NEARDUP_KAFKA_SASL_MECHANISM must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            {"NEARDUP_KAFKA_SECURITY_PROTOCOL": "ssl", "NEARDUP_KAFKA_TLS_CA_FILE": "/no/ca.pem"},
            "NEARDUP_KAFKA_TLS_CA_FILE must name a readable file, got '/no/ca.pem'",
        ),
        (
            {"NEARDUP_KAFKA_TLS_KEY_PASSWORD": SECRET},
            "NEARDUP_KAFKA_TLS_KEY_PASSWORD set, but NEARDUP_KAFKA_SECURITY_PROTOCOL=plaintext "
            "does not use TLS",
        ),
    ],
)  # fmt: skip
def test_half_configured_kafka_security_is_refused_naming_the_setting(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        KafkaSecurity.from_settings(environment(env))
    assert message in str(raised.value) and SECRET not in str(raised.value)


def test_redis_credentials_and_tls_options(ca_file: str) -> None:
    env = {
        "NEARDUP_REDIS_USERNAME": "neardup",
        "NEARDUP_REDIS_PASSWORD": SECRET,
        "NEARDUP_REDIS_TLS_CA_FILE": ca_file,
    }
    security = RedisSecurity.from_settings(environment(env))
    options = security.client_options("rediss://r:6380/0")
    assert options["username"] == "neardup" and options["password"] == SECRET
    assert options["ssl_ca_certs"] == ca_file and options["ssl_check_hostname"] is True
    assert "ssl_ca_certs" not in security.client_options("redis://r:6379/0")
    assert SECRET not in repr(security) and SECRET not in security.describe()
    with pytest.raises(ConfigError, match="does not use TLS: use rediss://"):
        security.check_url("redis://r:6379/0")
    with pytest.raises(ConfigError, match="NEARDUP_REDIS_USERNAME is set: NEARDUP_REDIS_PASSWORD"):
        RedisSecurity.from_settings(environment({"NEARDUP_REDIS_USERNAME": "neardup"}))


def test_urls_are_shown_redacted() -> None:
    assert redact_url(f"redis://user:{SECRET}@h:6379/0") == "redis://user:***@h:6379/0"
    assert redact_url(f"rediss://:{SECRET}@h/0") == "rediss://:***@h/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_no_config_dump_shows_a_secret(ca_file: str) -> None:
    env = {
        "NEARDUP_REDIS_URL": f"redis://app:{SECRET}@r:6379/0",
        "NEARDUP_REDIS_PASSWORD": SECRET,
        "NEARDUP_REDIS_USERNAME": "app",
        "NEARDUP_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
        "NEARDUP_KAFKA_SASL_MECHANISM": "PLAIN",
        "NEARDUP_KAFKA_SASL_USERNAME": "worker",
        "NEARDUP_KAFKA_SASL_PASSWORD": SECRET,
        "NEARDUP_KAFKA_TLS_CA_FILE": ca_file,
        "NEARDUP_KAFKA_BOOTSTRAP": "k:9093",
    }
    config = load_config([], env)
    assert config.kafka().security.sasl_password.reveal() == SECRET
    for shown in (repr(config), config.describe(), repr(config.kafka())):
        assert SECRET not in shown, shown
    assert "redis://app:***@r:6379/0" in config.describe() and "user=worker" in config.describe()
    crawl = crawl_config(Settings({k: v for k, v in env.items()}))
    assert crawl.kafka().security.sasl_password.reveal() == SECRET
    assert SECRET not in repr(crawl) and "redis://app:***@r:6379/0" in repr(crawl)


def test_a_bad_redis_url_error_does_not_show_its_password() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config([], {"NEARDUP_REDIS_URL": f"http://u:{SECRET}@h/0"})
    assert "NEARDUP_REDIS_URL must be" in str(raised.value) and SECRET not in str(raised.value)
