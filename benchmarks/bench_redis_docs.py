"""Benchmark the Redis doc store: memory per page record and claim+finalize throughput.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_redis_docs.py [--n 1000000] [--dups 0.3] [--cluster]

It starts its own redis-server (or a 3-node Redis Cluster with ``--cluster``) on loopback
ports, fills the store with ``--n`` records of ~70-character URLs (claimed pending, then
finalized: a ``--dups`` share as near-duplicates of an earlier page of the same host, the rest
unique), and reports INFO ``used_memory`` growth per record, default Redis settings. Then it
times claim+finalize, get and latest of fresh pages in batches of 500. "redis cpu" is the
servers' CPU time (INFO cpu) over the same interval.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from dedup_worker.adapters.redis_client import Client
from dedup_worker.adapters.redis_docs import RedisDocStore
from dedup_worker.core.records import PENDING, DocRecord, page_id
from dedup_worker.core.sketch import DEFAULT_SKETCH
from neardup.stack import RedisCluster, RedisServer

logger = logging.getLogger(__name__)

_WORDS = [
    "news",
    "sport",
    "travel",
    "market",
    "review",
    "guide",
    "recipe",
    "garden",
    "music",
    "science",
    "health",
]
START = 1_760_000_000.0


def _url(rng: random.Random, host: str) -> str:
    """A URL of ~70 characters on ``host``."""
    slug = "-".join(rng.choice(_WORDS) for _ in range(3))
    return f"https://{host}/{rng.choice(_WORDS)}/{slug}-{rng.randrange(10**6)}.html"


def _pages(n: int, seed: int, start: float) -> list[DocRecord]:
    rng = random.Random(seed)
    hosts = [f"www.{rng.choice(_WORDS)}{h}.example.com" for h in range(2000)]
    records = []
    for i in range(n):
        host = rng.choice(hosts)
        url, fetched_at = _url(rng, host), start + i * 0.003 + rng.random() * 0.001
        checksum = hashlib.blake2b(url.encode(), digest_size=16).hexdigest()
        fp = rng.getrandbits(64)
        records.append(
            DocRecord(
                page_id(url, fetched_at),
                url,
                host,
                fetched_at,
                fp,
                checksum,
                PENDING,
                sketch=rng.randbytes(DEFAULT_SKETCH.nbytes),  # the engine's default sketch size
            )
        )
    return records


def _verdicts(
    records: list[DocRecord], dups: float, seed: int
) -> dict[int, tuple[str, tuple[str, int] | None]]:
    """Unique, or a near-duplicate of an earlier page (a variant URL of the same page)."""
    rng = random.Random(seed)
    out: dict[int, tuple[str, tuple[str, int] | None]] = {}
    for record in records:
        if rng.random() < dups:
            original = record.url.replace(".html", f".html?sid={rng.randrange(10**6)}")
            out[record.id] = ("near_duplicate", (original, record.id - (1 << 30)))
        else:
            out[record.id] = ("unique", None)
    return out


def _fill(docs: RedisDocStore, records: list[DocRecord], dups: float, batch: int) -> None:
    for lo in range(0, len(records), batch):
        chunk = records[lo : lo + batch]
        docs.claim(chunk)
        docs.finalize(_verdicts(chunk, dups, lo))


def _memory(nodes: list[redis.Redis]) -> int:
    return sum(int(c.info("memory")["used_memory"]) for c in nodes)


def _cpu(nodes: list[redis.Redis]) -> float:
    infos = [c.info("cpu") for c in nodes]
    return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in infos)


def _timed(label: str, nodes: list[redis.Redis], count: int, work: Callable[[], object]) -> None:
    cpu0, start = _cpu(nodes), time.perf_counter()
    work()
    elapsed, cpu = time.perf_counter() - start, _cpu(nodes) - cpu0
    print(f"  {label:<36} {count / elapsed:>9,.0f} records/s  (redis cpu {cpu / elapsed:.0%})")


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
    parser.add_argument("--dups", type=float, default=0.3, help="share of near-duplicates")
    parser.add_argument("--extra", type=int, default=50_000, help="records per timing run")
    parser.add_argument("--shard-bits", type=int, default=6)
    parser.add_argument("--expected-n", type=int, default=0, help="bucket sizing (default --n)")
    parser.add_argument("--ttl", type=int, default=0)
    parser.add_argument("--cluster", action="store_true", help="3-node Redis Cluster")
    args = parser.parse_args()
    records = _pages(args.n + args.extra, seed=7, start=START)
    fill, fresh = records[: args.n], records[args.n :]
    url_len = sum(len(r.url) for r in fill[:10_000]) / min(len(fill), 10_000)
    with _servers(args.cluster) as (client, nodes):
        before = _memory(nodes)
        docs = RedisDocStore(
            client,
            "bench",
            args.ttl or None,
            expected_n=args.expected_n or args.n,
            shard_bits=args.shard_bits,
        )
        where = "3-node cluster" if args.cluster else "single redis"
        print(f"{where}, layout {docs.layout.meta()}, mean url {url_len:.0f} chars")
        _timed(
            f"fill 0 -> {args.n:,} (batch 1000)",
            nodes,
            args.n,
            lambda: _fill(docs, fill, args.dups, 1000),
        )
        used = _memory(nodes) - before
        keys = sum(c.dbsize() for c in nodes)
        print(
            f"  memory: {used / 2**20:,.1f} MiB used_memory growth, {used / args.n:.1f} B/record"
            f" ({args.dups:.0%} near-duplicates, {keys:,} keys)"
        )
        _timed(
            "claim+finalize, batch 500",
            nodes,
            len(fresh),
            lambda: _fill(docs, fresh, args.dups, 500),
        )
        ids, urls = [r.id for r in fresh], [r.url for r in fresh]
        _timed(
            "get, batch 500",
            nodes,
            len(ids),
            lambda: [docs.get(ids[lo : lo + 500]) for lo in range(0, len(ids), 500)],
        )
        _timed(
            "latest, batch 500",
            nodes,
            len(urls),
            lambda: [docs.latest(urls[lo : lo + 500]) for lo in range(0, len(urls), 500)],
        )


if __name__ == "__main__":
    main()
