"""Fixtures of the worker tests: per-test topics/group/namespace, and worker subprocesses."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dedup_worker.adapters.kafka import ensure_topics
from neardup.stack import KafkaBroker
from tests.support.worker_helpers import Setup, WorkerProcess


@pytest.fixture
def setup(kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]) -> Callable[..., Setup]:
    """Factory: ``setup(backend_url, partitions=2, **NEARDUP_overrides)``."""

    def make(redis_url: str = "memory", partitions: int = 2, **overrides: str) -> Setup:
        pages = kafka_topic(partitions=partitions, prefix="pages")
        tag = uuid.uuid4().hex[:8]
        env = {
            "NEARDUP_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
            "NEARDUP_REDIS_URL": redis_url,
            "NEARDUP_PAGES_TOPIC": pages,
            "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
            "NEARDUP_GROUP_ID": f"group-{tag}",
            "NEARDUP_INDEX_NAMESPACE": f"ns-{tag}",
            "NEARDUP_PARTITIONS": str(partitions),
            "NEARDUP_EXPECTED_PAGES": "100000",
            "NEARDUP_BATCH_MAX_WAIT_MS": "30",
            "NEARDUP_BACKOFF_MAX_MS": "1000",
            "NEARDUP_TRANSACTIONAL": "on",
            "NEARDUP_WORKER_ID": f"w-{tag}",
        }
        env.update({f"NEARDUP_{k.upper()}": v for k, v in overrides.items()})
        setup = Setup(env, kafka_broker.bootstrap)
        config = setup.config
        topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
        ensure_topics(config.kafka(), topics, config.partitions)
        return setup

    return make


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], WorkerProcess]]:
    """Factory of worker subprocesses; every one still alive at teardown is killed."""
    started: list[WorkerProcess] = []

    def start(env: dict[str, str]) -> WorkerProcess:
        process = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()
