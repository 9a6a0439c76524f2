"""Benchmark issue 13 (duplicate subtrees, URL rules): coverage, waste, W0, rule lookup cost per
outlink, and crawler pages/s per process with the rules on.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_subtrees.py [--baseline] [--skip-throughput] [--pages 2000]
                                        [--repeat N]

It starts what it needs on loopback and stops it at the end (``neardup.demo.server`` for the
site, ``neardup.stack.EmbeddedStack`` for a Tansu broker and a redis-server, one
``dedup-worker``), then:

1. **Quality**: ``scrapy crawl neardup`` over the subtree test site (``neardup.demo.subtrees``:
   a mirror under another prefix linked from unique pages, two releases of a guide, print /
   sort / session parameters, pagination traps) with URL rules on (the default). From the
   site's access log and its ground truth (J >= 0.9 over word 4-shingles,
   ``neardup.demo.truth``): coverage, waste, W0 (the waste of a crawl of every reachable page)
   and trap pages never fetched (must be 0). ``--baseline`` also crawls with
   ``NEARDUP_RULES=false`` (a duplicate's outlinks all dropped, nothing skipped by rule).
2. **Lookup**: the gate the crawler asks about every released outlink
   (:meth:`crawler.crawl_rules.CrawlRules.admit`) with the rules that crawl learned (read back
   from Redis) and its fetched pages, over every outlink of every page of the site; best of 5
   passes, us per outlink.
3. **Throughput**: ``benchmarks/bench_crawler.py``'s site (``--pages`` distinct 50 KB pages,
   4 hosts) crawled with the rules on: pages published / elapsed seconds, and the crawler
   process's CPU per page; with ``--repeat N`` (N > 1), N runs with the rules on interleaved
   with N runs with them off (the machine's speed drifts between minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_crawler import Site, crawl, serve, stat

from crawler.coverage import measure
from crawler.crawl_rules import CrawlRules
from crawler.rules.redis_store import RedisRuleStore
from crawler.rules.shared import SharedRules
from crawler.urls import canonicalize_url
from dedup_worker.adapters.redis_client import connect
from dedup_worker.contract.reading import PageKey
from neardup.demo.server import SiteServer
from neardup.demo.subtrees import build_subtree_site
from neardup.demo.truth import Truth, subtree_truth
from neardup.stack import EmbeddedStack

REPO = Path(__file__).resolve().parents[1]


class NullStats:
    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None:
        pass

    def set_value(self, key: str, value: Any) -> None:
        pass


def crawl_site(stack: EmbeddedStack, workdir: Path, rules: bool) -> tuple[list[str], Truth, str]:
    """One crawl of the subtree site: (fetch log, truth, crawl id)."""
    tag = f"sub-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    env = {
        **os.environ,
        "NEARDUP_KAFKA_BOOTSTRAP": stack.bootstrap,
        "NEARDUP_REDIS_URL": stack.redis_url,
        "NEARDUP_PAGES_TOPIC": f"pages-{tag}",
        "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
        "NEARDUP_PREDICTIONS_TOPIC": f"predicted-{tag}",
        "NEARDUP_GROUP_ID": tag,
        "NEARDUP_INDEX_NAMESPACE": tag,
        "NEARDUP_CRAWL_ID": tag,
        "NEARDUP_PARTITIONS": "2",
        "NEARDUP_BATCH_MAX_WAIT_MS": "20",
        "NEARDUP_RULES": "true" if rules else "false",
        "NEARDUP_STATS_FILE": str(workdir / f"stats-{tag}.json"),
    }
    sub = build_subtree_site()
    with SiteServer(sub.site) as server:
        truth = subtree_truth(sub, server.base)
        domains = ",".join(server.addresses[h] for h in sub.site.hosts)
        command = [sys.executable, "-m", "scrapy", "crawl", "neardup",
                   "-a", "seeds=" + ",".join(truth.seeds), "-a", f"allowed_domains={domains}",
                   "-s", "AUTOTHROTTLE_START_DELAY=0.05", "-s", "NEARDUP_DECISION_TIMEOUT=60",
                   "-s", "CONCURRENT_REQUESTS_PER_DOMAIN=4"]  # fmt: skip
        with (workdir / f"worker-{tag}.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "dedup_worker.worker.main"],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                with (workdir / f"crawler-{tag}.log").open("wb") as out:
                    subprocess.run(command, cwd=REPO, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, check=True, timeout=600)  # fmt: skip
            finally:
                worker.terminate()
                worker.wait(30)
        return server.fetched(), truth, tag


def report_quality(name: str, fetch_log: list[str], truth: Truth) -> None:
    measures = measure(fetch_log, truth.pages, truth.partners)
    w0 = measure(truth.pages, truth.pages, truth.partners).waste
    trap_misses = sorted(truth.traps - set(fetch_log))
    print(
        f"{name}: {len(truth.pages)} reachable pages, {measures.fetches} fetches; "
        f"coverage {measures.coverage:.4f} (goal >= 0.99), waste {measures.waste:.4f}, "
        f"W0 {w0:.4f} (goal waste <= W0/2 = {w0 / 2:.4f}); "
        f"trap pages not fetched: {len(trap_misses)} (goal 0)"
    )
    if measures.lost:
        print(f"  lost: {', '.join(measures.lost[:10])}")


def lookup_us(stack: EmbeddedStack, crawl_id: str, fetch_log: list[str], truth: Truth) -> None:
    """us per outlink of the crawler's gate, with the rules the crawl learned."""
    client = connect(stack.redis_url)
    try:
        shared = SharedRules(RedisRuleStore(client, crawl_id))
        shared.refresh()
    finally:
        client.close()
    gate = CrawlRules(shared, NullStats(), canonicalize_url, lambda prediction: None)
    for url in fetch_log:
        gate.fetched.note(url, None)
    outlinks = [(link, PageKey(page.url, 0.0)) for page in truth.rendered.values()
                for link in page.outlinks]  # fmt: skip
    best = float("inf")
    skipped = 0
    for _ in range(5):
        start = time.perf_counter()
        skipped = sum(1 for link, source in outlinks if gate.admit(link, source) is not None)
        best = min(best, time.perf_counter() - start)
    active = len(shared.active)
    print(
        f"rule lookup (CrawlRules.admit, {active} active of {len(shared.book)} rules): "
        f"{best / len(outlinks) * 1e6:.2f} us per outlink over {len(outlinks)} outlinks "
        f"({skipped} would be skipped) (goal < 50 us)"
    )


def throughput(stack: EmbeddedStack, workdir: Path, pages: int, rules: bool) -> None:
    site = Site(pages, 50, [f"127.0.0.{2 + i}" for i in range(4)])
    servers = serve(site)
    for i in range(pages):
        site.body(i)
    settings = {
        "AUTOTHROTTLE_ENABLED": "False",
        "CONCURRENT_REQUESTS": "32",
        "CONCURRENT_REQUESTS_PER_DOMAIN": "32",
        "LOG_LEVEL": "INFO",
        "NEARDUP_DECISION_TIMEOUT": "60",
        "NEARDUP_RULES": str(rules),
    }
    try:
        log = crawl(site, stack, workdir, settings)
    finally:
        for server in servers:
            server.shutdown()
    published = stat(log, "dedup/pages_published")
    elapsed = stat(log, "elapsed_time_seconds")
    print(
        f"crawler with URL rules {'on' if rules else 'off'}: {published:.0f} pages in "
        f"{elapsed:.1f} s = {published / elapsed:.0f} pages/s per process (goal >= 150), "
        f"{1000 * stat(log, 'crawler_cpu_seconds') / max(published, 1):.1f} ms CPU per page"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", action="store_true", help="also crawl with rules off")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--pages", type=int, default=2000, help="pages of the throughput site")
    parser.add_argument(
        "--repeat", type=int, default=1, help="throughput runs, rules on and off interleaved"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp) / "stack") as stack:
        workdir = Path(tmp)
        fetch_log, truth, crawl_id = crawl_site(stack, workdir, rules=True)
        report_quality("subtree site, URL rules on", fetch_log, truth)
        stats = json.loads((workdir / f"stats-{crawl_id}.json").read_text())
        print(
            f"  skipped by rule {stats.get('dedup/requests_skipped/rule', 0)}, groups sampled "
            f"{stats.get('dedup/groups_sampled', 0)} (suppressed "
            f"{stats.get('dedup/groups_suppressed', 0)}, followed "
            f"{stats.get('dedup/groups_followed', 0)}), rules active "
            f"{stats.get('dedup/rules/active', 0)}, dropped {stats.get('dedup/rules/dropped', 0)}"
        )
        lookup_us(stack, crawl_id, fetch_log, truth)
        if args.baseline:
            base_log, base_truth, _ = crawl_site(stack, workdir, rules=False)
            report_quality("subtree site, URL rules off", base_log, base_truth)
        for _ in range(0 if args.skip_throughput else args.repeat):
            throughput(stack, workdir, args.pages, rules=True)
            if args.repeat > 1:
                throughput(stack, workdir, args.pages, rules=False)


if __name__ == "__main__":
    main()
