"""RedisIndex beyond the shared contract: concurrent workers, outages, namespaces, TTL, errors.

All against real servers: the session redis-server and the session 3-node Redis Cluster.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dedup_worker.adapters.redis_client import BackendError, connect
from dedup_worker.adapters.redis_index import RedisIndex
from dedup_worker.core.design import build_design
from dedup_worker.errors import BackendUnavailable, ConfigError
from neardup.stack import RedisServer, free_port
from tests.support.index_helpers import REDIS_BACKENDS, Oracle, planted, rows, without_self
from tests.support.namespaces import new_namespace

pytestmark = pytest.mark.integration

U64 = np.uint64
DESIGN = build_design(3, (4,))


def _worker_client(request: pytest.FixtureRequest, backend: str) -> Any:
    """A client of its own, as a separate worker process would have."""
    server = request.getfixturevalue("redis_server" if backend == "redis" else "redis_cluster")
    return server.client()


def _run_worker(
    index: RedisIndex, batches: list[tuple[np.ndarray, np.ndarray]], start: threading.Barrier
) -> dict[int, set[int]]:
    saw: dict[int, set[int]] = {}
    start.wait()
    for fps, ids in batches:
        found = index.probe_insert(fps, ids)
        for q, other in zip(found.query.tolist(), found.id.tolist(), strict=True):
            saw.setdefault(int(ids[q]), set()).add(other)
    return saw


def _near_pairs(fps: np.ndarray, k: int) -> list[tuple[int, int]]:
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    a, b = np.nonzero(np.triu(dist <= k, 1))
    return list(zip(a.tolist(), b.tolist(), strict=True))


@pytest.mark.parametrize("backend", REDIS_BACKENDS)
def test_concurrent_workers_never_miss_a_pair(backend: str, request: pytest.FixtureRequest) -> None:
    """Of every pair within k, at least one saw the other; no entry is stored twice."""
    rng = np.random.default_rng(21)
    fps, ids = planted(rng, families=40, members=6, singles=60, k=3)
    namespace, workers = new_namespace(), 4
    indexes = [
        RedisIndex(_worker_client(request, backend), DESIGN, "vtest", namespace=namespace)
        for _ in range(workers)
    ]
    plans = []
    for _ in range(workers):  # overlapping subsets: the same entry also races with itself
        mine = rng.permutation(fps.size)[: fps.size * 3 // 5]
        plans.append([(fps[c], ids[c]) for c in np.array_split(mine, len(mine) // 20)])
    start = threading.Barrier(workers)
    results: list[dict[int, set[int]]] = [{} for _ in range(workers)]

    def work(n: int) -> None:
        results[n] = _run_worker(indexes[n], plans[n], start)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    saw: dict[int, set[int]] = {}
    for result in results:
        for ident, others in result.items():
            saw.setdefault(ident, set()).update(others)
    done = np.array(sorted(saw.keys() | {int(i) for p in plans for _, b in p for i in b}))
    assert done.size > 0
    done_fps = fps[done]
    for a, b in _near_pairs(done_fps, 3):
        ia, ib = int(done[a]), int(done[b])
        assert ib in saw.get(ia, set()) or ia in saw.get(ib, set()), (ia, ib)
    stored = {(int(fps[i]), int(i)) for i in done}
    for table in range(len(DESIGN.tables)):
        t_fps, t_ids = indexes[0].entries(table)
        listed = list(zip(t_fps.tolist(), t_ids.tolist(), strict=True))
        assert len(listed) == len(set(listed)) and set(listed) == stored
    assert len(indexes[0]) == len(stored)


def test_paused_redis_is_unavailable_then_the_same_call_succeeds(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client(
        socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    index = RedisIndex(client, DESIGN, "vtest", namespace=new_namespace(), expected_n=256)
    fps, ids = planted(np.random.default_rng(4), families=10, members=4, singles=20, k=3)
    half = fps.size // 2
    oracle = Oracle(3)
    for part in (slice(0, half),):
        assert rows(index.probe_insert(fps[part], ids[part])) == oracle.probe_insert(
            fps[part], ids[part]
        )
    second = (fps[half:], ids[half:])
    expected = oracle.probe_insert(*second)
    redis_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match=str(redis_server.port)):
            index.probe_insert(*second)
        assert time.monotonic() - started < 5
    finally:
        redis_server.resume()
    got = without_self(rows(index.probe_insert(*second)), second[1])
    # The failed attempt may have been applied once the server resumed: then the retry is a
    # replay and also meets later entries of its own batch, nothing else.
    assert expected <= got <= Oracle(3, oracle.entries).query(second[0])
    assert len(index) == len(oracle.entries)
    client.close()


def test_unreachable_server_is_backend_unavailable() -> None:
    client = connect(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    with pytest.raises(BackendUnavailable, match="unavailable"):
        RedisIndex(client, DESIGN, "vtest", namespace=new_namespace())


@pytest.mark.parametrize("backend", REDIS_BACKENDS)
def test_connect_gives_a_working_client(backend: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue("redis_server" if backend == "redis" else "redis_cluster")
    index = RedisIndex(
        connect(server.url, cluster=backend == "cluster"), DESIGN, "v", namespace=new_namespace()
    )
    index.insert(np.array([7], dtype=U64), np.array([1], dtype=U64))
    assert rows(index.query(np.array([6], dtype=U64))) == {(0, 1, 7, 1)}


def test_namespace_pins_design_version_and_ttl(shared_redis_client: redis.Redis) -> None:
    namespace = new_namespace()
    first = RedisIndex(shared_redis_client, DESIGN, "v1", namespace=namespace, expected_n=10**6)
    with pytest.raises(ConfigError, match="design"):
        RedisIndex(shared_redis_client, build_design(3, (5,)), "v1", namespace=namespace)
    with pytest.raises(ConfigError, match="version"):
        RedisIndex(shared_redis_client, DESIGN, "v2", namespace=namespace)
    with pytest.raises(ConfigError, match="ttl"):
        RedisIndex(shared_redis_client, DESIGN, "v1", namespace=namespace, ttl=60)
    later = RedisIndex(shared_redis_client, DESIGN, "v1", namespace=namespace, expected_n=10)
    assert later.layout == first.layout


@pytest.mark.parametrize("backend", REDIS_BACKENDS)
def test_scripts_are_reloaded_when_redis_forgets_them(backend: str, backend_client: Any) -> None:
    index = RedisIndex(backend_client, DESIGN, "vtest", namespace=new_namespace())
    index.insert(np.array([1], dtype=U64), np.array([1], dtype=U64))
    backend_client.script_flush()
    assert rows(index.probe_insert(np.array([3], dtype=U64), np.array([2], dtype=U64))) == {
        (0, 1, 1, 1)
    }
    assert len(index) == 2


def test_ttl_ages_buckets_out(shared_redis_client: redis.Redis) -> None:
    """Buckets carry the TTL and age out. The TTL is long enough that a busy machine cannot
    let it lapse between the insert and the first checks (a 1 s TTL did, once, with one core
    taken by another process), and the expiry is waited for, not slept for."""
    ttl_s = 5
    index = RedisIndex(shared_redis_client, DESIGN, "vtest", namespace=new_namespace(), ttl=ttl_s)
    fps = np.array([0, 2**64 - 1, 0xFFFFFFFF], dtype=U64)
    inserted = time.monotonic()
    index.insert(fps, np.arange(3, dtype=U64))
    keys = list(shared_redis_client.scan_iter(match=index.layout.bucket_pattern(0)))
    assert keys and all(0 < shared_redis_client.pttl(key) <= ttl_s * 1000 for key in keys)
    assert len(index.query(fps)) == 3 or time.monotonic() - inserted >= ttl_s
    deadline = time.monotonic() + ttl_s + 60
    while index.query(fps) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(index.query(fps)) == 0, "the buckets outlived their TTL by a minute"


def test_wrong_type_at_a_key_is_a_backend_error(shared_redis_client: redis.Redis) -> None:
    index = RedisIndex(shared_redis_client, DESIGN, "vtest", namespace=new_namespace())
    for key in index.layout.counter_keys():
        shared_redis_client.hset(key, "not", "a counter")
    with pytest.raises(BackendError, match="WRONGTYPE") as caught:
        index.probe_insert(np.array([5], dtype=U64), np.array([2], dtype=U64))
    assert not isinstance(caught.value, BackendUnavailable)


def test_decoding_client_is_refused(redis_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match="decode_responses"):
        RedisIndex(redis_server.client(decode_responses=True), DESIGN, "vtest")


def test_one_call_of_thousands_of_entries_reports_every_pair(
    request: pytest.FixtureRequest,
) -> None:
    """One shard per table: each table's script call takes the whole batch of 3,300 entries,
    more than the 1,000 the script packs its replies by, so every slice boundary is crossed."""
    rng = np.random.default_rng(5)
    fps, ids = planted(rng, families=300, members=6, singles=1500, k=3)
    index = RedisIndex(
        _worker_client(request, "redis"), DESIGN, "v1", namespace=new_namespace(), shard_bits=0
    )
    found = index.probe_insert(fps, ids)
    dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
    earlier = np.tril(dist <= DESIGN.k, -1)  # entry q sees the entries before it in the batch
    q, j = np.nonzero(earlier)
    expected = set(
        zip(q.tolist(), ids[j].tolist(), fps[j].tolist(), dist[q, j].tolist(), strict=True)
    )
    assert len(fps) > 3000 and len(expected) > 1000
    assert rows(found) == expected
