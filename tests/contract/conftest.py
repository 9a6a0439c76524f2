"""Fixtures of the index contract tests (helpers without fixtures are in ``index_helpers``).

``make_index`` builds a fresh, empty index of the requested backend: the in-memory reference,
``RedisIndex`` on the session redis-server, or on the session 3-node Redis Cluster. Redis
indexes get a new namespace each time, so tests (and hypothesis examples) never see each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from dedup_worker.adapters.redis_index import RedisIndex
from dedup_worker.core.design import Design
from dedup_worker.core.index_api import HammingIndex
from dedup_worker.core.memory_index import InMemoryIndex
from neardup.stack import RedisCluster, RedisServer
from tests.support.index_helpers import IndexFactory
from tests.support.namespaces import new_namespace


@pytest.fixture(scope="session")
def shared_redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def shared_cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture
def backend_client(request: pytest.FixtureRequest, backend: str) -> Any:
    """The session client of the backend under test (None for the in-memory index)."""
    if backend == "redis":
        return request.getfixturevalue("shared_redis_client")
    if backend == "cluster":
        return request.getfixturevalue("shared_cluster_client")
    return None


@pytest.fixture
def make_index(backend: str, backend_client: Any) -> IndexFactory:
    """Factory: ``make_index(design, **redis_options)`` -> a new empty index of ``backend``."""

    def build(design: Design, **options: Any) -> HammingIndex:
        if backend == "memory":
            flips = options.get("flips", 0)
            return InMemoryIndex(design, radius=options.get("radius"), flips=flips)
        options.setdefault("namespace", new_namespace())
        options.setdefault("expected_n", 256)
        return RedisIndex(backend_client, design, "vtest", **options)

    return build
