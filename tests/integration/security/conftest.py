"""Fixtures of the secured-deployment tests: a PKI, a redis-server that wants passwords (the
default user's ``requirepass`` and ACL users), TLS proxies, a Tansu that wants SASL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from neardup.stack import KafkaBroker, RedisServer
from tests.support.security_helpers import (
    KEY_PASSWORD,
    REDIS_PASSWORD,
    REQUIREPASS,
    Pki,
    TlsProxy,
    make_pki,
)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), KEY_PASSWORD)


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server whose default user needs ``REQUIREPASS``, with two ACL users:
    ``neardup`` (what the README says the worker and the crawler need) and ``reader`` (read
    commands only, no scripts)."""
    server = RedisServer(tmp_path_factory.mktemp("secured-redis"))
    server.start()
    admin = server.client()
    admin.acl_setuser(
        "neardup", enabled=True, passwords=[f"+{REDIS_PASSWORD}"], keys=["*"],
        categories=["+@read", "+@write", "+@scripting", "+@connection"],
        commands=["+info", "+time"],
    )  # fmt: skip
    admin.acl_setuser(
        "reader", enabled=True, passwords=[f"+{REDIS_PASSWORD}"], keys=["*"],
        categories=["+@read", "+@connection"],
    )  # fmt: skip
    admin.config_set("requirepass", REQUIREPASS)
    admin.close()
    yield server
    server.close()


@pytest.fixture
def redis_tls(pki: Pki, secured_redis: RedisServer) -> Iterator[TlsProxy]:
    """TLS in front of ``secured_redis``; clients must show a certificate of the test CA."""
    proxy = TlsProxy(pki, secured_redis.port, client_ca=pki.ca).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def tls_kafka(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[tuple[KafkaBroker, TlsProxy]]:
    """A Tansu broker reachable only through a TLS proxy that wants a client certificate: the
    broker advertises the proxy, so a client that does not speak TLS gets nowhere."""
    broker = KafkaBroker(tmp_path_factory.mktemp("tls-kafka"))
    proxy = TlsProxy(pki, broker.port, client_ca=pki.ca)
    broker.advertised_port = proxy.port
    broker.start()
    proxy.start()
    yield broker, proxy
    proxy.stop()
    broker.close()


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A Tansu broker that requires a SASL login (and refuses every one: see
    ``neardup.servers.kafka.tansu_argv``)."""
    broker = KafkaBroker(tmp_path_factory.mktemp("sasl-kafka"), authentication=True)
    broker.start()
    yield broker
    broker.close()
