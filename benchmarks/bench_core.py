"""Core benchmark: fingerprinting, index at scale, batch mode. Prints figures; asserts nothing.

    python benchmarks/bench_core.py [--docs 20000] [--index-size 10000000] [--batch-size 1000000]

Single core (numba kernels are not parallel). Run on a quiet machine: figures are best-of-3.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from synthetic_text import documents

from dedup_worker.core.batch import all_pairs
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.planner import plan
from dedup_worker.core.simhash import FeatureConfig, Fingerprinter


def best_of(runs: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def bench_fingerprints(count: int) -> None:
    docs = documents(count)
    words = sum(len(d.split()) for d in docs) / len(docs)
    size = sum(map(len, docs)) / len(docs)
    print(f"fingerprinting: {count} docs, {words:.0f} words / {size / 1024:.1f} KiB each")
    for shingle in (1, 2, 3, 4):
        fingerprinter = Fingerprinter(FeatureConfig(shingle=shingle))
        fingerprinter.fingerprint_texts(docs[:10])

        def run(f: Fingerprinter = fingerprinter) -> None:
            for start in range(0, len(docs), 1000):
                f.fingerprint_texts(docs[start : start + 1000])

        elapsed = best_of(3, run)
        print(f"  shingle={shingle}: {count / elapsed:10,.0f} docs/s  (batches of 1000)")


def bench_index(n: int, k: int = 3, max_bytes: float = 100) -> None:
    chosen = plan(n, k, max_bytes=max_bytes)
    print(f"index: {n:,} fingerprints, k={k}, planner bound {max_bytes} B/fp")
    print("  " + chosen.explain(3).replace("\n", "\n  "))
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    ids = np.arange(n, dtype=np.uint64)
    index = InMemoryIndex(chosen.design())
    index.insert(fps[:1000], ids[:1000])  # compile
    index = InMemoryIndex(chosen.design())
    batch = 100_000
    start = time.perf_counter()
    for at in range(0, n, batch):
        index.insert(fps[at : at + batch], ids[at : at + batch])
    elapsed = time.perf_counter() - start
    stats = index.stats()
    print(f"  insert (batches of {batch:,}): {n / elapsed:12,.0f} /s")
    print(
        f"  memory: {stats['bytes_per_entry']:.1f} bytes per fingerprint, {stats['runs']:.0f} runs"
    )
    near = fps[rng.integers(0, n, size=200_000)] ^ np.uint64(0b10010)
    fresh = rng.integers(0, 2**64, size=200_000, dtype=np.uint64)
    for label, queries in (
        ("random queries (no match)", fresh),
        ("near-dup queries (1 match each)", near),
    ):

        def run(q: np.ndarray = queries) -> None:
            for at in range(0, q.size, 10_000):
                index.query(q[at : at + 10_000])

        elapsed = best_of(3, run)
        print(f"  query, {label}, batches of 10,000: {queries.size / elapsed:12,.0f} /s")
    probe_batch = 1000
    extra = rng.integers(0, 2**64, size=100_000, dtype=np.uint64)
    extra_ids = np.arange(n, n + extra.size, dtype=np.uint64)
    start = time.perf_counter()
    for at in range(0, extra.size, probe_batch):
        index.probe_insert(extra[at : at + probe_batch], extra_ids[at : at + probe_batch])
    elapsed = time.perf_counter() - start
    print(f"  probe_insert, batches of {probe_batch}: {extra.size / elapsed:12,.0f} /s")


def bench_batch(n: int, k: int = 3) -> None:
    rng = np.random.default_rng(12)
    base = rng.integers(0, 2**64, size=n - n // 10, dtype=np.uint64)
    variants = base[: n // 10] ^ (
        np.uint64(1) << rng.integers(0, 64, size=n // 10).astype(np.uint64)
    )
    fps = np.concatenate([base, variants])
    all_pairs(fps[:1000], k)
    result: list[int] = []

    def run() -> None:
        result[:] = [all_pairs(fps, k)[0].size]

    elapsed = best_of(3, run)
    print(f"batch mode: all pairs within k={k} among {n:,} fingerprints: {elapsed:.3f} s")
    print(f"  ({result[0]:,} pairs found)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--index-size", type=int, default=10_000_000)
    parser.add_argument("--batch-size", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["fingerprint", "index", "batch"])
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    if args.only in (None, "fingerprint"):
        bench_fingerprints(args.docs)
    if args.only in (None, "batch"):
        bench_batch(args.batch_size)
    if args.only in (None, "index"):
        bench_index(args.index_size)
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
