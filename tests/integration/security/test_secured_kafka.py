"""Kafka over TLS with a client certificate, and SASL logins refused, for every client: the
worker, the crawler, ``neardup decisions``. Against the real Tansu broker; TLS is terminated
by a proxy in front of it (see ``security_helpers``), SASL by Tansu itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dedup_worker.adapters.kafka import (
    KafkaSecurity,
    KafkaSettings,
    TopicReader,
    check_access,
    ensure_topics,
    produce_all,
)
from dedup_worker.adapters.security import environment
from dedup_worker.contract.messages import Page, decode_decision
from dedup_worker.errors import BackendUnavailable
from neardup.stack import KafkaBroker
from tests.support.security_helpers import (
    KAFKA_PASSWORD,
    KEY_PASSWORD,
    Pki,
    TlsProxy,
    no_secret_in,
    read_text,
)

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _tls_env(proxy: TlsProxy, pki: Pki, ca: Path | None = None) -> dict[str, str]:
    return {
        "NEARDUP_KAFKA_BOOTSTRAP": f"127.0.0.1:{proxy.port}",
        "NEARDUP_KAFKA_SECURITY_PROTOCOL": "ssl",
        "NEARDUP_KAFKA_TLS_CA_FILE": str(ca or pki.ca),
        "NEARDUP_KAFKA_TLS_CERT_FILE": str(pki.client_cert),
        "NEARDUP_KAFKA_TLS_KEY_FILE": str(pki.client_key),
        "NEARDUP_KAFKA_TLS_KEY_PASSWORD": KEY_PASSWORD,
    }


def _sasl_env(broker: KafkaBroker, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {
        "NEARDUP_KAFKA_BOOTSTRAP": broker.bootstrap,
        "NEARDUP_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
        "NEARDUP_KAFKA_SASL_MECHANISM": mechanism,
        "NEARDUP_KAFKA_SASL_USERNAME": "crawler",
        "NEARDUP_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD,
    }


def _settings(env: dict[str, str]) -> KafkaSettings:
    security = KafkaSecurity.from_settings(environment(env))
    return KafkaSettings(env["NEARDUP_KAFKA_BOOTSTRAP"], "test", security)


def _pages(count: int) -> list[Page]:
    return [
        Page(url=f"https://h{i % 3}.test/{i}", host=f"h{i % 3}.test", fetched_at=100.0 + i,
             text=f"page {i} " + " ".join(f"w{i}x{j}" for j in range(200)), depth=0)
        for i in range(count)
    ]  # fmt: skip


def _run(
    argv: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


def test_the_worker_and_the_decisions_tail_over_tls_with_a_client_certificate(
    tls_kafka: tuple[KafkaBroker, TlsProxy], pki: Pki, tmp_path: Path
) -> None:
    """Pages in and decisions out through TLS only (the broker advertises the proxy); the
    client key is encrypted, so the key password is a secret no output may show."""
    _, proxy = tls_kafka
    tag = uuid.uuid4().hex[:8]
    env = {
        **_tls_env(proxy, pki),
        "NEARDUP_REDIS_URL": "memory",
        "NEARDUP_PAGES_TOPIC": f"pages-{tag}",
        "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
        "NEARDUP_GROUP_ID": f"group-{tag}",
        "NEARDUP_WORKER_ID": f"w-{tag}",
        "NEARDUP_TRANSACTIONAL": "on",
        "NEARDUP_PARTITIONS": "2",
        "NEARDUP_LOG_LEVEL": "INFO",
    }
    kafka = _settings(env)
    ensure_topics(kafka, [env["NEARDUP_PAGES_TOPIC"], env["NEARDUP_DECISIONS_TOPIC"]], 2)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(BIN / "dedup-worker")], env={**os.environ, **env}, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        pages = _pages(12)
        messages = [(p.host.encode(), p.to_json()) for p in pages]
        assert produce_all(kafka, env["NEARDUP_PAGES_TOPIC"], messages) == 12
        decided = _read_decisions(kafka, env["NEARDUP_DECISIONS_TOPIC"], 12, worker, log)
        assert decided == {p.url for p in pages}
        tail = _run(
            [str(BIN / "neardup"), "decisions", "--topic", env["NEARDUP_DECISIONS_TOPIC"],
             "--from-beginning", "--max", "12", "--idle-timeout", "20"],
            env,
        )  # fmt: skip
        assert tail.returncode == 0, tail.stderr[-2000:]
        assert len(tail.stdout.splitlines()) == 12 and "unique" in tail.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(60)
    assert code == 0, read_text(log)[-3000:]
    assert proxy.handshakes > 0 and "ssl ca=" in read_text(log)
    no_secret_in(read_text(log), tail.stdout, tail.stderr)
    # A client that does not speak TLS gets nowhere: the broker is only reachable through it.
    with pytest.raises(BackendUnavailable):
        check_access(KafkaSettings(env["NEARDUP_KAFKA_BOOTSTRAP"]), timeout=3)


def _read_decisions(
    kafka: KafkaSettings, topic: str, count: int, worker: subprocess.Popen[bytes], log: Path
) -> set[str]:
    reader = TopicReader(kafka, topic)
    reader.start("beginning")
    decided: set[str] = set()
    deadline = time.monotonic() + 120
    try:
        while len(decided) < count:
            assert worker.poll() is None, read_text(log)[-3000:]
            assert time.monotonic() < deadline, f"{len(decided)} decided:\n{read_text(log)[-3000:]}"
            decided |= {decode_decision(r.value or b"").url for r in reader.poll(0.5)}
    finally:
        reader.close()
    return decided


def test_a_broker_certificate_from_another_ca_stops_the_worker_naming_the_setting(
    tls_kafka: tuple[KafkaBroker, TlsProxy], pki: Pki
) -> None:
    _, proxy = tls_kafka
    env = {**_tls_env(proxy, pki, ca=pki.other_ca), "NEARDUP_REDIS_URL": "memory"}
    worker = _run([str(BIN / "dedup-worker")], env)
    assert worker.returncode == 2, worker.stderr[-3000:]
    assert "TLS with Kafka" in worker.stderr and "NEARDUP_KAFKA_TLS_CA_FILE" in worker.stderr
    no_secret_in(worker.stdout, worker.stderr)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_a_refused_sasl_login_stops_every_client_at_start_up_naming_the_settings(
    sasl_kafka: KafkaBroker, mechanism: str, tmp_path: Path
) -> None:
    """The broker refuses the login (a wrong password, or a mechanism it does not enable):
    the worker and ``neardup decisions`` exit 2 with one line, the crawler stops before
    fetching anything; each names the settings, none shows the password."""
    env = {**_sasl_env(sasl_kafka, mechanism), "NEARDUP_REDIS_URL": "memory"}
    worker = _run([str(BIN / "dedup-worker")], env)
    assert worker.returncode == 2, worker.stderr[-3000:]
    assert "refused the SASL" in worker.stderr, worker.stderr[-3000:]
    assert "NEARDUP_KAFKA_SASL_USERNAME, NEARDUP_KAFKA_SASL_PASSWORD" in worker.stderr
    tail = _run([str(BIN / "neardup"), "decisions"], env)
    assert tail.returncode == 2 and "NEARDUP_KAFKA_SASL_PASSWORD" in tail.stderr, tail.stderr
    crawl = _run(
        [sys.executable, "-m", "scrapy", "crawl", "neardup", "-a", "seeds=http://127.0.0.2:9/"],
        {**env, "SCRAPY_SETTINGS_MODULE": "crawler.settings", "NEARDUP_REDIS_URL": ""},
    )
    assert crawl.returncode != 0 and "NEARDUP_KAFKA_SASL_PASSWORD" in crawl.stderr
    assert "Crawled 0 pages" in crawl.stderr or "Crawled" not in crawl.stderr
    no_secret_in(worker.stdout, worker.stderr, tail.stdout, tail.stderr, crawl.stdout, crawl.stderr)
