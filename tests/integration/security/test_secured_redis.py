"""Redis with passwords, ACL users and TLS, for the index, the page records and the crawler's
seen store: against a real redis-server (``requirepass`` and ``ACL SETUSER``), TLS through
a proxy that also wants a client certificate."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crawler.seen import CrawlSeen
from crawler.seen_redis import RedisSeenStore
from dedup_worker.adapters.redis_client import RedisSecurity
from dedup_worker.adapters.security import Secret
from dedup_worker.errors import ConfigError, NeardupError
from dedup_worker.worker.config import load_config
from dedup_worker.worker.identity import build_identity
from dedup_worker.worker.main import build_backends, build_leave_turn
from neardup.stack import RedisServer
from tests.support.security_helpers import (
    KEY_PASSWORD,
    REDIS_PASSWORD,
    REQUIREPASS,
    Pki,
    TlsProxy,
    no_secret_in,
)

pytestmark = pytest.mark.integration


def _backends_work(env: dict[str, str]) -> None:
    """The worker's index and record store on ``env``'s Redis: a probe-and-insert and a read."""
    config = load_config([], {"NEARDUP_INDEX_NAMESPACE": f"ns-{uuid.uuid4().hex[:8]}", **env})
    index, docs = build_backends(config, "v1")
    fps = np.array([0x0123456789ABCDEF, 0x0123456789ABCDEE], dtype=np.uint64)
    found = index.probe_insert(fps, np.array([1, 2], dtype=np.uint64))
    assert 1 in found.id.tolist()  # the second page found the first, within k
    assert docs.latest({"https://a.test/"}) == {}
    # The worker's other Redis clients log in the same way: its slot lease (no worker id) and
    # the leave turn of a rolling topic's group.
    leased = replace(config, worker_id="", transactional="on", topic_generations=True)
    identity = build_identity(leased, lambda lapsed: None)
    try:
        assert identity.transactional_id.startswith(f"{config.group_id}.")
    finally:
        identity.close(clean=True)
    turn = build_leave_turn(leased)
    assert turn is not None
    with turn(lambda: None):
        pass


def test_an_acl_user_reaches_the_index_and_the_records(secured_redis: RedisServer) -> None:
    _backends_work(
        {
            "NEARDUP_REDIS_URL": secured_redis.url,
            "NEARDUP_REDIS_USERNAME": "neardup",
            "NEARDUP_REDIS_PASSWORD": REDIS_PASSWORD,
        }
    )


def test_requirepass_alone_and_a_password_in_the_url(secured_redis: RedisServer) -> None:
    _backends_work({"NEARDUP_REDIS_URL": secured_redis.url, "NEARDUP_REDIS_PASSWORD": REQUIREPASS})
    with_password = secured_redis.url.replace("redis://", f"redis://neardup:{REDIS_PASSWORD}@")
    _backends_work({"NEARDUP_REDIS_URL": with_password})


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "NEARDUP_REDIS_PASSWORD"),  # no password at all
        ({"NEARDUP_REDIS_PASSWORD": "wrong-" + REQUIREPASS}, "NEARDUP_REDIS_PASSWORD"),
        (
            {"NEARDUP_REDIS_USERNAME": "neardup", "NEARDUP_REDIS_PASSWORD": REQUIREPASS},
            "NEARDUP_REDIS_USERNAME",
        ),
    ],
)
def test_the_worker_stops_at_start_up_on_wrong_credentials_naming_the_setting(
    secured_redis: RedisServer, tmp_path: Path, env: dict[str, str], named: str
) -> None:
    """``dedup-worker`` exits 2 at once (no retrying), with one line naming what to fix, and
    no password in anything it printed."""
    worker = subprocess.run(
        [str(Path(sys.executable).parent / "dedup-worker")],
        env={
            "PATH": "/usr/bin:/bin",
            "NEARDUP_REDIS_URL": secured_redis.url,
            "NEARDUP_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # never reached: Redis is checked first
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 2, worker.stderr[-2000:]
    assert "configuration error" in worker.stderr and named in worker.stderr, worker.stderr
    assert "refused our credentials" in worker.stderr
    no_secret_in(worker.stdout, worker.stderr)


def test_an_acl_user_without_scripts_is_told_what_it_lacks(secured_redis: RedisServer) -> None:
    env = {
        "NEARDUP_REDIS_URL": secured_redis.url,
        "NEARDUP_REDIS_USERNAME": "reader",
        "NEARDUP_REDIS_PASSWORD": REDIS_PASSWORD,
    }
    with pytest.raises(NeardupError) as raised:
        _backends_work(env)
    message = str(raised.value)
    assert "refused access" in message and "NEARDUP_REDIS_USERNAME" in message, message
    no_secret_in(message)


def test_the_crawlers_seen_store_logs_in(secured_redis: RedisServer) -> None:
    secured = RedisSecurity(username="neardup", password=Secret(REDIS_PASSWORD))
    one = CrawlSeen(RedisSeenStore.from_url(secured_redis.url, "secured", secured))
    two = CrawlSeen(RedisSeenStore.from_url(secured_redis.url, "secured", secured))
    assert one.claim_many(["http://a.test/1", "http://a.test/2"]) == [True, True]
    assert two.claim_many(["http://a.test/2", "http://a.test/3"]) == [False, True]
    wrong = RedisSecurity(username="neardup", password=Secret("wrong"))
    with pytest.raises(ConfigError, match="NEARDUP_REDIS_USERNAME and NEARDUP_REDIS_PASSWORD"):
        RedisSeenStore.from_url(secured_redis.url, "secured", wrong)


def _tls_env(proxy: TlsProxy, ca: Path, pki: Pki) -> dict[str, str]:
    return {
        "NEARDUP_REDIS_URL": f"rediss://127.0.0.1:{proxy.port}/0",
        "NEARDUP_REDIS_USERNAME": "neardup",
        "NEARDUP_REDIS_PASSWORD": REDIS_PASSWORD,
        "NEARDUP_REDIS_TLS_CA_FILE": str(ca),
        "NEARDUP_REDIS_TLS_CERT_FILE": str(pki.client_cert),
        "NEARDUP_REDIS_TLS_KEY_FILE": str(pki.client_key),
        "NEARDUP_REDIS_TLS_KEY_PASSWORD": KEY_PASSWORD,
    }


def test_tls_with_a_client_certificate(redis_tls: TlsProxy, pki: Pki) -> None:
    _backends_work(_tls_env(redis_tls, pki.ca, pki))
    assert redis_tls.handshakes > 0
    config = load_config([], _tls_env(redis_tls, pki.ca, pki))
    lookup = _tls_env(redis_tls, pki.ca, pki).get
    seen = CrawlSeen(
        RedisSeenStore.from_url(config.redis_url, "tls", RedisSecurity.from_settings(lookup))
    )
    assert seen.claim_many(["http://tls.test/"]) == [True]
    no_secret_in(repr(config), config.describe())


def test_a_server_certificate_from_another_ca_fails_naming_the_ca_setting(
    redis_tls: TlsProxy, pki: Pki
) -> None:
    with pytest.raises(ConfigError) as raised:
        _backends_work(_tls_env(redis_tls, pki.other_ca, pki))
    message = str(raised.value)
    assert "TLS with redis" in message and "NEARDUP_REDIS_TLS_CA_FILE" in message, message
    no_secret_in(message)
