"""Fixtures and helpers of the doc store contract tests (imported by the test module).

``make_docs()`` builds a fresh, empty ``DocStore`` of the backend under test: the in-memory
reference, ``RedisDocStore`` on the session redis-server, or on the session 3-node Redis
Cluster. Redis stores get a new namespace each time, so tests (and hypothesis examples) never
see each other's records. Fixtures are registered under ``name=``
so that importing their ``*_fixture`` functions does not shadow the test arguments.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from dedup_worker.adapters.redis_docs import RedisDocStore
from dedup_worker.core.records import PENDING, DocRecord, DocStore, MemoryDocStore, page_id
from neardup.stack import RedisCluster, RedisServer

DocsFactory = Callable[..., DocStore]

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]
REDIS_BACKENDS: list[Any] = BACKENDS[1:]


def new_namespace() -> str:
    return f"d{uuid.uuid4().hex[:12]}"


def record(
    url: str,
    fetched_at: float,
    *,
    verdict: str = PENDING,
    host: str = "example.com",
    fingerprint: int = 0x0123_4567_89AB_CDEF,
    checksum: str = "9f" * 16,
    ident: int | None = None,
    sketch: bytes | None = None,
) -> DocRecord:
    """A page record; its id is ``page_id(url, fetched_at)`` unless given.

    The default sketch is 132 arbitrary bytes derived from the URL, so every round trip also
    checks that the resemblance sketch survives the store.
    """
    ident = page_id(url, fetched_at) if ident is None else ident
    if sketch is None:
        sketch = hashlib.shake_128(url.encode("utf-8", "surrogatepass")).digest(132)
    return DocRecord(ident, url, host, fetched_at, fingerprint, checksum, verdict, sketch=sketch)


@pytest.fixture(scope="session", name="docs_redis_client")
def docs_redis_client_fixture(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture(scope="session", name="docs_cluster_client")
def docs_cluster_client_fixture(
    redis_cluster: RedisCluster,
) -> Iterator[redis.cluster.RedisCluster]:
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture(name="docs_client")
def docs_client_fixture(request: pytest.FixtureRequest, backend: str) -> Any:
    """The session client of the backend under test (None for the in-memory store)."""
    if backend == "redis":
        return request.getfixturevalue("docs_redis_client")
    if backend == "cluster":
        return request.getfixturevalue("docs_cluster_client")
    return None


@pytest.fixture(name="make_docs")
def make_docs_fixture(backend: str, docs_client: Any) -> DocsFactory:
    """Factory: ``make_docs(**redis_options)`` -> a new empty store of ``backend``."""

    def build(**options: Any) -> DocStore:
        if backend == "memory":
            return MemoryDocStore()
        # 8 shards of 8 buckets: calls span buckets, buckets hold several records.
        options.setdefault("expected_n", 1000)
        options.setdefault("shard_bits", 3)
        return RedisDocStore(docs_client, new_namespace(), **options)

    return build
