"""One contract for every page ``SketchStore`` of the URL rules' direct comparisons: in process
memory and Redis (server, cluster): what one process stores another reads; an unknown page
reads as None; a page's sketch compares as the worker's verification would, against the
stricter bar of a check (``CHECK_SKETCH``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.crc import key_slot

from crawler.rules.redis_sketches import RedisSketchStore
from crawler.rules.sketches import PAGE_SKETCH, MemorySketchStore, PageComparer, SketchStore
from dedup_worker.errors import ConfigError

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]
TEXT = " ".join(f"word{i % 97} term{i % 13} item{i}" for i in range(400))


@pytest.fixture
def store(request: pytest.FixtureRequest, backend: str) -> SketchStore:
    if backend == "memory":
        return MemorySketchStore()
    fixture = "shared_redis_client" if backend == "redis" else "shared_cluster_client"
    return RedisSketchStore(request.getfixturevalue(fixture), f"c{uuid.uuid4().hex[:8]}", 60)


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_one_process_stores_another_reads(store: SketchStore) -> None:
    writer, reader = PageComparer(store), PageComparer(store)
    writer.remember("http://a.test/1", TEXT)
    writer.remember("http://a.test/2", TEXT + " one more line of words")
    writer.remember("http://a.test/3", "something else entirely " * 50)
    writer.flush()
    assert reader.resembles("http://a.test/1", "http://a.test/2") is True
    assert reader.resembles("http://a.test/1", "http://a.test/3") is False
    assert reader.resembles("http://a.test/1", "http://a.test/unknown") is None
    assert store.get_many([]) == [] and store.get_many(["http://a.test/none"]) == [None]
    assert reader.compared == 2


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_redis_sketches_expire_and_share_the_crawls_slot(store: SketchStore) -> None:
    assert isinstance(store, RedisSketchStore)
    keys = [store.key(f"http://a.test/{i}") for i in range(20)]
    assert len({key_slot(key.encode()) for key in keys}) == 1
    store.put_many({"http://a.test/1": b"\x01" * 8})
    ttl = store._client.ttl(store.key("http://a.test/1"))
    assert 0 < ttl <= 60


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_redis_sketch_keys_name_the_sketch_format(store: SketchStore) -> None:
    """A crawler of another sketch version resuming the crawl must not read these sketches as
    its own (a fingerprint or sketch version in every stored key)."""
    assert isinstance(store, RedisSketchStore)
    key = store.key("http://a.test/1")
    assert f":sk:{PAGE_SKETCH.version_tag}:" in key
    store.put_many({"http://a.test/1": b"\x01" * 8})
    assert store._client.exists(key) == 1


def test_a_redis_sketch_store_refuses_no_expiry() -> None:
    with pytest.raises(ConfigError, match="NEARDUP_RULE_SKETCH_TTL"):
        RedisSketchStore(None, "c", 0)  # type: ignore[arg-type]
