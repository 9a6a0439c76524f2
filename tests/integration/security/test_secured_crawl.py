"""A whole crawl on a secured deployment: Kafka over TLS with a client certificate, Redis with
an ACL user over TLS with a client certificate. ``neardup crawl`` (its recorder), the spider
(publisher, decision feed, seen store) and the worker all connect with the same environment;
the crawl completes, and no secret shows in any output or log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dedup_worker.contract.messages import decode_decision
from neardup.demo.manifest import manifest
from neardup.demo.planted import build_site
from neardup.demo.server import SiteServer
from neardup.stack import KafkaBroker
from tests.support.security_helpers import (
    KEY_PASSWORD,
    REDIS_PASSWORD,
    Pki,
    TlsProxy,
    no_secret_in,
    read_text,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def site() -> Iterator[SiteServer]:
    with SiteServer(build_site()) as server:
        yield server


def test_a_crawl_on_secured_kafka_and_redis(
    site: SiteServer,
    tls_kafka: tuple[KafkaBroker, TlsProxy],
    redis_tls: TlsProxy,
    pki: Pki,
    tmp_path: Path,
) -> None:
    _, kafka_proxy = tls_kafka
    tag = uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    env.update(
        {
            "SCRAPY_SETTINGS_MODULE": "crawler.settings",
            "NEARDUP_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_proxy.port}",
            "NEARDUP_KAFKA_SECURITY_PROTOCOL": "ssl",
            "NEARDUP_KAFKA_TLS_CA_FILE": str(pki.ca),
            "NEARDUP_KAFKA_TLS_CERT_FILE": str(pki.client_cert),
            "NEARDUP_KAFKA_TLS_KEY_FILE": str(pki.client_key),
            "NEARDUP_KAFKA_TLS_KEY_PASSWORD": KEY_PASSWORD,
            "NEARDUP_REDIS_URL": f"rediss://127.0.0.1:{redis_tls.port}/0",
            "NEARDUP_REDIS_USERNAME": "neardup",
            "NEARDUP_REDIS_PASSWORD": REDIS_PASSWORD,
            "NEARDUP_REDIS_TLS_CA_FILE": str(pki.ca),
            "NEARDUP_REDIS_TLS_CERT_FILE": str(pki.client_cert),
            "NEARDUP_REDIS_TLS_KEY_FILE": str(pki.client_key),
            "NEARDUP_REDIS_TLS_KEY_PASSWORD": KEY_PASSWORD,
            "NEARDUP_PAGES_TOPIC": f"pages-{tag}",
            "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
            "NEARDUP_GROUP_ID": f"group-{tag}",
            "NEARDUP_INDEX_NAMESPACE": f"ns-{tag}",
            "NEARDUP_CRAWL_ID": f"crawl-{tag}",
        }
    )
    exe = shutil.which("neardup", path=str(Path(sys.executable).parent))
    assert exe, "the neardup console script is installed"
    state, out = tmp_path / "state", tmp_path / "decisions.jsonl"
    crawl = subprocess.run(
        [exe, "crawl", manifest(site)["seeds"]["main"], "--workers", "1", "--max-pages", "8",
         "--state-dir", str(state), "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    logs = {path.name: read_text(path) for path in state.glob("*.log")}
    assert crawl.returncode == 0, (crawl.stdout[-2000:], crawl.stderr[-2000:], logs)
    decisions = [decode_decision(line) for line in out.read_bytes().splitlines() if line]
    assert decisions and "neardup crawl finished" in crawl.stdout, crawl.stdout
    assert {"spider.log", "worker-0.log"} <= set(logs)
    assert "URL-seen filter in Redis" in logs["spider.log"]  # the seen store logged in too
    assert kafka_proxy.handshakes > 0 and redis_tls.handshakes > 0
    no_secret_in(crawl.stdout, crawl.stderr, *logs.values())
