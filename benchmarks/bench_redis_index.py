"""Benchmark the Redis index: memory per fingerprint and probe_insert throughput at 1M entries.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_redis_index.py [--n 1000000] [--k 3] [--radius 6] [--replicas 2]
                                           [--flips 1] [--shard-bits 4] [--cluster]

It starts its own redis-server (or a 3-node Redis Cluster with ``--cluster``) on loopback
ports, plans the table design for ``--n`` fingerprints (``planner.plan``), fills the index with
``--n`` fingerprints in batches of 1000 (a third of them near-duplicates of earlier ones), and
reports INFO ``used_memory`` growth per fingerprint. Then it times probe_insert of fresh
batches of 500 and 1000 at that size. "redis cpu" is the server's CPU time (INFO cpu) over the
same interval: the rest of the wall time is this process (numpy, redis-py) and the wire.
``--flips F`` gives every probe random bit margins, so each also reads F flipped key bits'
buckets per table (``NEARDUP_PROBE_FLIPS``; the buckets a real page flips are as random).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import redis

from dedup_worker.adapters.redis_client import Client
from dedup_worker.adapters.redis_index import RedisIndex
from dedup_worker.core.planner import plan
from dedup_worker.core.simhash import FeatureConfig
from neardup.stack import RedisCluster, RedisServer

logger = logging.getLogger(__name__)


def _fingerprints(n: int, k: int, seed: int) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """n fingerprints: two thirds random, one third 1..k bits away from an earlier one."""
    rng = np.random.default_rng(seed)
    fps = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    variants = rng.random(n) < 1 / 3
    variants[0] = False
    sources = (rng.random(n) * np.arange(n)).astype(np.int64)
    for _ in range(max(k, 1)):
        flips = np.uint64(1) << rng.integers(0, 64, n).astype(np.uint64)
        fps[variants] = fps[sources[variants]] ^ flips[variants]
    return fps


def _memory(clients: list[redis.Redis]) -> int:
    return sum(int(c.info("memory")["used_memory"]) for c in clients)


def _cpu(clients: list[redis.Redis]) -> float:
    infos = [c.info("cpu") for c in clients]
    return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in infos)


def _run(
    index: RedisIndex, fps: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], batch: int
) -> int:
    found = 0
    rng = np.random.default_rng(int(ids[0]) if ids.size else 0)
    for lo in range(0, fps.size, batch):
        chunk = fps[lo : lo + batch]
        margins = rng.integers(0, 1000, (chunk.size, 64), dtype=np.int32) if index.flips else None
        found += len(index.probe_insert(chunk, ids[lo : lo + batch], margins))
    return found


def _timed(
    label: str, index: RedisIndex, nodes: list[redis.Redis], fps: Any, ids: Any, batch: int
) -> None:
    cpu0, start = _cpu(nodes), time.perf_counter()
    found = _run(index, fps, ids, batch)
    elapsed, cpu = time.perf_counter() - start, _cpu(nodes) - cpu0
    print(
        f"  {label:<34} batch {batch:>5}: {fps.size / elapsed:>9,.0f} fp/s"
        f"  ({found / fps.size:.2f} matches/fp, redis cpu {cpu / elapsed:.0%} of wall)"
    )


@contextmanager
def _servers(cluster: bool) -> Iterator[tuple[Client, list[redis.Redis]]]:
    if cluster:
        with RedisCluster() as rc:
            yield rc.client(), [node.client() for node in rc.nodes]
    else:
        with RedisServer() as server:
            yield server.client(), [server.client()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=3, help="the tables' k (NEARDUP_TABLES_K)")
    parser.add_argument("--radius", type=int, help="search radius (NEARDUP_K); default --k")
    parser.add_argument("--replicas", type=int, default=1, help="NEARDUP_TABLE_REPLICAS")
    parser.add_argument("--flips", type=int, default=0, help="NEARDUP_PROBE_FLIPS")
    parser.add_argument("--shard-bits", type=int, default=4)
    parser.add_argument("--extra", type=int, default=50_000, help="fingerprints per timing run")
    parser.add_argument("--ttl", type=int, default=0)
    parser.add_argument("--cluster", action="store_true", help="3-node Redis Cluster")
    args = parser.parse_args()
    design = plan(args.n, args.k, replicas=args.replicas).design()
    fps = _fingerprints(args.n + 2 * args.extra, args.k, seed=11)
    ids = np.arange(fps.size, dtype=np.uint64)
    with _servers(args.cluster) as (client, nodes):
        before = _memory(nodes)
        index = RedisIndex(
            client,
            design,
            FeatureConfig().version_tag,
            namespace="bench",
            expected_n=args.n,
            shard_bits=args.shard_bits,
            ttl=args.ttl or None,
            radius=args.radius,
            flips=args.flips,
        )
        where = "3-node cluster" if args.cluster else "single redis"
        print(
            f"{where}, {design.describe()}, layout bucket bits {index.layout.bucket_bits}, "
            f"shard bits {index.layout.shard_bits}, radius {index.k}, flips {index.flips}"
        )
        n = args.n
        _timed(f"fill 0 -> {n:,}", index, nodes, fps[:n], ids[:n], 1000)
        used = _memory(nodes) - before
        print(
            f"  memory: {used / 2**20:,.1f} MiB used_memory growth, {used / len(index):.1f} B/fp"
            f" ({len(index):,} entries, {sum(c.dbsize() for c in nodes):,} keys)"
        )
        for step, batch in enumerate((500, 1000)):
            lo, hi = n + step * args.extra, n + (step + 1) * args.extra
            _timed(f"probe_insert at ~{n / 1e6:.1f}M", index, nodes, fps[lo:hi], ids[lo:hi], batch)


if __name__ == "__main__":
    main()
