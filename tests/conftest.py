"""Shared fixtures: real servers on loopback ports, started once per test session.

No mocks: ``redis_server`` is a real redis-server, ``redis_cluster`` a real 3-master Redis
Cluster, ``kafka_broker`` a real Tansu broker. A server that cannot start makes the fixture fail
(with the server's log tail), never skip. When a test fails, the log tails of the servers it used
are attached to its report.
"""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol

import pytest
import redis

from dedup_worker.adapters.kafka import TopicAdmin
from neardup.errors import StackError
from neardup.stack import KafkaBroker, RedisCluster, RedisServer

_SERVER_FIXTURES = ("kafka_broker", "redis_server", "redis_cluster")


def pytest_configure(config: pytest.Config) -> None:
    """Give the processes the tests start a working Ctrl-C even when this run has none.

    A shell starts a background job (``pytest &``, ``nohup pytest &`` in a script) with SIGINT
    ignored, an ignored signal stays ignored across exec, and Python then installs no
    KeyboardInterrupt handler: every test that stops a child with SIGINT would wait for nothing
    (three did, in a suite run from a script). A caught signal is reset to the default on exec,
    so catching it here gives every child its normal Ctrl-C."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _Startable(Protocol):
    def start(self) -> Any: ...
    def close(self) -> None: ...


def _start_or_fail(server: _Startable, what: str) -> None:
    try:
        server.start()
    except StackError as exc:
        server.close()
        pytest.fail(f"could not start {what}:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server (no persistence) for the whole session; ``.url``, ``.client()``."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    _start_or_fail(server, "redis-server")
    yield server
    server.close()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session redis-server, emptied (FLUSHALL) before the test."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A real 3-master Redis Cluster; ``.startup_nodes``, ``.url``, ``.client()``."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    _start_or_fail(cluster, "the redis cluster")
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Tansu broker (memory storage) for the whole session; ``.bootstrap``."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    _start_or_fail(broker, "the tansu kafka broker")
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def kafka_admin(kafka_broker: KafkaBroker) -> TopicAdmin:
    """One admin client (the project's ``TopicAdmin``) for the session broker."""
    return kafka_broker.admin()


@pytest.fixture
def kafka_topic(kafka_admin: TopicAdmin, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory: ``kafka_topic(partitions=1)`` creates a new, uniquely named topic and returns
    its name (derived from the test's name, so broker logs stay readable)."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]

    def create(partitions: int = 1, prefix: str | None = None) -> str:
        name = f"{prefix or base}-{uuid.uuid4().hex[:8]}"
        kafka_admin.create([name], partitions)
        return name

    return create


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the log tails of the servers a failed test used to its report."""
    report = yield
    if report.failed:
        funcargs: dict[str, Any] = getattr(item, "funcargs", {})
        for name in _SERVER_FIXTURES:
            server = funcargs.get(name)
            if server is not None:
                report.sections.append((f"{name} log tail", server.log_tail()))
    return report
