"""Fixtures of the crawler's end-to-end tests: the planted site, a per-test crawl environment."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neardup.demo.planted import build_site
from neardup.demo.server import SiteServer
from neardup.stack import KafkaBroker, RedisServer
from tests.support.crawl_helpers import Env


@pytest.fixture
def site_server() -> Iterator[SiteServer]:
    """The planted three-host site on 127.0.0.2-4, with a fresh access log."""
    with SiteServer(build_site()) as server:
        yield server


@pytest.fixture
def crawl_env(
    kafka_broker: KafkaBroker, redis_server: RedisServer, tmp_path: Path
) -> Iterator[Env]:
    """Fresh topics, consumer group, index namespace and crawl id on the session's servers;
    every process started through it is killed at teardown."""
    tag = uuid.uuid4().hex[:8]
    env = Env(
        {
            "NEARDUP_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
            "NEARDUP_REDIS_URL": redis_server.url,
            "NEARDUP_PAGES_TOPIC": f"pages-{tag}",
            "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
            "NEARDUP_PREDICTIONS_TOPIC": f"predicted-{tag}",
            "NEARDUP_PARTITIONS": "2",
            "NEARDUP_GROUP_ID": f"crawl-{tag}",
            "NEARDUP_INDEX_NAMESPACE": f"ns-{tag}",
            "NEARDUP_WORKER_ID": f"w-{tag}",
            "NEARDUP_CRAWL_ID": f"crawl-{tag}",
            "NEARDUP_EXPECTED_PAGES": "100000",
            "NEARDUP_BATCH_MAX_WAIT_MS": "20",
        },
        tmp_path,
    )
    yield env
    env.close()
