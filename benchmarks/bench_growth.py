"""How the worker's engine slows down as its index grows: store steps per window of pages.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_growth.py [--pages 300000] [--window 50000] [--record-cache N]
                                      [--corpus corpus.jsonl [--stream renamed]]

It starts its own redis-server on a loopback port, builds the engine exactly as the worker
does (the worker's configuration and backends: defaults, any ``NEARDUP_*`` variable set in the
environment, e.g. ``NEARDUP_DROP_STOP_WORDS=yes``, and ``--record-cache`` overriding
``NEARDUP_RECORD_CACHE``), and feeds it batches of 1,000 pages: by default the soak benchmark's
pages (halves of 2,000 synthetic 900-word documents recombined, ``bench_soak.Pages``), or the
texts of ``--corpus``, recombined the same way or renamed pass by pass (``--stream renamed``,
``page_streams``). No Kafka: this is the engine alone, as the
worker's main thread runs it.

Per window it prints the engine's time per page (``decide``: everything after fingerprinting),
the index entries the probes read back per page (over all tables), the candidates per page
(entries within the search radius, each verified), each store step's time per page as the
engine waits for it, the same steps' time inside Redis (each Lua script's own duration, from
Redis's SLOWLOG: what a faster script would save, apart from the client's share), and the
record cache's hits and misses.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis
from page_streams import MARK, STREAMS, Pages

from dedup_worker.adapters.redis_docs_lua import SCRIPTS as DOC_SCRIPTS
from dedup_worker.adapters.redis_index import RedisIndex
from dedup_worker.adapters.redis_lua import PROBE_INSERT
from dedup_worker.contract.messages import Decision, Page, Verdict, decode_page
from dedup_worker.core.engine import DedupEngine
from dedup_worker.worker.config import load_config
from dedup_worker.worker.main import build_backends, engine_settings
from neardup.stack import RedisServer

BATCH = 1000
DUPLICATE = (Verdict.NEAR_DUPLICATE, Verdict.EXACT_DUPLICATE)


def _timed(owner: Any, name: str, times: collections.defaultdict[str, float]) -> None:
    """Wrap ``owner.name`` so that its wall time adds up in ``times[name]``."""
    call: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            times[name] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def _pages(pages: Pages) -> Callable[[int], Page]:
    def page(i: int) -> Page:
        return decode_page(pages.body(i).replace(b"%FETCHED%", str(1.7e9 + i / 1000).encode()))

    return page


class Agreement:
    """The renamed stream's check of the verdicts: a renaming keeps every pair of texts within a
    pass exactly as similar as in the corpus, so each pass should repeat the first pass's
    verdicts. A duplicate there that is unique here is a duplicate the grown index lost; a unique
    page there that is a duplicate here was matched to a page of another pass (counted apart
    when the text has no word to rename, so that it is the same text in every pass)."""

    def __init__(self, pages: Pages, total: int) -> None:
        self.n = len(pages.templates)
        self.fixed = np.array([MARK not in t for t in pages.templates])
        self.duplicate = np.zeros(total, dtype=bool)
        self.across = np.zeros(total, dtype=bool)  # its original is a page of another pass

    def add(self, decisions: list[Decision]) -> None:
        """Each page's verdict; a correction (a later batch's) overrides the first one."""
        for d in decisions:
            i = _number(d.url)
            self.duplicate[i] = d.verdict in DUPLICATE
            self.across[i] = (
                d.duplicate_of is not None and _number(d.duplicate_of) // self.n != i // self.n
            )

    def report(self, lo: int, hi: int) -> str:
        lo = max(lo, self.n)
        if lo >= hi:
            return ""
        here = self.duplicate[lo:hi]
        first = self.duplicate[np.arange(lo, hi) % self.n]
        fixed = self.fixed[np.arange(lo, hi) % self.n]
        lost = int((first & ~here).sum())
        gained = here & ~first
        across = int((gained & ~fixed & self.across[lo:hi]).sum())
        return (
            f"; against the first pass: {lost} duplicates lost, {int((gained & ~fixed).sum())} "
            f"unique pages taken for duplicates ({across} of another pass; +"
            f"{int((gained & fixed).sum())} texts the same in every pass) of {hi - lo:,}"
        )


def _number(url: str) -> int:
    return int(url.rsplit("/p", 1)[1])


class ScriptTimes:
    """Each Lua script's time inside Redis, from SLOWLOG: every command slower than 200 us is
    logged (a script call on a batch of 1,000 takes milliseconds; the commands it runs, a few
    us each, stay out of the log) and the EVALSHA entries are summed by script."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        scripts = {"probe_insert": PROBE_INSERT, **DOC_SCRIPTS}
        self.names = {hashlib.sha1(s.encode()).hexdigest(): n for n, s in scripts.items()}
        client.config_set("slowlog-log-slower-than", 200)
        client.config_set("slowlog-max-len", 100_000)
        client.slowlog_reset()

    def take(self) -> dict[str, float]:
        """Seconds per script since the last call."""
        out: collections.Counter[str] = collections.Counter()
        for entry in self.client.slowlog_get(100_000):
            command = [_text(part) for part in entry["command"].split()[:2]]
            if command and command[0].upper() == "EVALSHA" and len(command) > 1:
                out[self.names.get(command[1], command[1][:8])] += entry["duration"] / 1e6
        self.client.slowlog_reset()
        return dict(out)


def _text(part: bytes | str) -> str:
    return part.decode() if isinstance(part, bytes) else part


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=300_000)
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--record-cache", type=int, help="NEARDUP_RECORD_CACHE (default: its own)")
    parser.add_argument(
        "--expected-pages", type=int, default=1_000_000, help="NEARDUP_EXPECTED_PAGES (planner)"
    )
    parser.add_argument("--corpus", type=Path, help="JSONL corpus of {'text': ...} lines")
    parser.add_argument(
        "--stream", choices=STREAMS, default="recombined", help="how pages are made (page_streams)"
    )
    args = parser.parse_args()
    pages = Pages(corpus=args.corpus, stream=args.stream)
    page = _pages(pages)
    agreement = Agreement(pages, args.pages) if args.stream == "renamed" else None
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)).start() as server:
        # Any other NEARDUP_* setting of this process applies too (e.g. NEARDUP_DROP_STOP_WORDS).
        env = {k: v for k, v in os.environ.items() if k.startswith("NEARDUP_")}
        env |= {"NEARDUP_REDIS_URL": server.url, "NEARDUP_EXPECTED_PAGES": str(args.expected_pages)}
        if args.record_cache is not None:
            env["NEARDUP_RECORD_CACHE"] = str(args.record_cache)
        config = load_config([], env)
        settings = engine_settings(config)
        print(f"fingerprint {settings.version_tag}; {config.describe()}", flush=True)
        index, docs = build_backends(config, settings.version_tag)
        assert isinstance(index, RedisIndex)
        engine = DedupEngine(index, docs, settings, record_cache=config.record_cache)
        times: collections.defaultdict[str, float] = collections.defaultdict(float)
        for name in ("claim_latest", "latest", "claim", "get", "finalize", "correct"):
            _timed(engine.docs, name, times)
        _timed(engine.index, "probe_insert", times)
        decide = 0.0
        candidates = 0
        scripts = ScriptTimes(server.client())
        print(f"{'pages':>9} {'decide us':>10} {'entries':>8} {'cand.':>6}  store steps, us a page")
        for lo in range(0, args.pages, BATCH):
            prepared = engine.prepare([page(i) for i in range(lo, lo + BATCH)])
            start = time.perf_counter()
            decisions = engine.decide(prepared)
            decide += time.perf_counter() - start
            if agreement is not None:
                agreement.add(decisions)
            candidates += sum(
                d.evidence.get("candidates") or 0 for d in decisions if not d.corrects
            )
            if (lo + BATCH) % args.window == 0:
                w = args.window
                steps = " ".join(f"{k} {v / w * 1e6:.1f}" for k, v in sorted(times.items()))
                inside = scripts.take()
                steps += (
                    " (in Redis: "
                    + " ".join(f"{k} {v / w * 1e6:.1f}" for k, v in sorted(inside.items()))
                    + f", all {sum(inside.values()) / w * 1e6:.1f})"
                )
                cache = engine.records
                print(
                    f"{lo + BATCH:>9,} {decide / w * 1e6:>10.1f} {index.entries_read / w:>8.0f} "
                    f"{candidates / w:>6.2f}  {steps}; record cache {len(cache):,} held, "
                    f"{cache.hits:,} hits, {cache.misses:,} misses"
                    + (agreement.report(lo + BATCH - w, lo + BATCH) if agreement else ""),
                    flush=True,
                )
                times.clear()
                decide, candidates, index.entries_read = 0.0, 0, 0
                cache.hits = cache.misses = 0
        used = server.client().info("memory")["used_memory"]
        print(f"redis used_memory {used / 2**20:.0f} MiB ({used / args.pages:.0f} B a page)")


if __name__ == "__main__":
    main()
