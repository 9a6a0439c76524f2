"""Benchmark the crawler: pages/s of one ``scrapy crawl neardup`` process against a local site,
with extraction, publishing to Kafka and decision-driven link following included; and the
median extraction time of a 50 KB page.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_crawler.py [--pages 2000] [--size-kb 50] [--hosts 4]

It starts everything it needs on loopback and stops it at the end: a Tansu broker and a
redis-server (``neardup.stack.EmbeddedStack``), one ``dedup-worker`` process, and a threaded
HTTP server that serves a site of ``--pages`` distinct pages over ``--hosts`` addresses
(127.0.0.2, ...). The site is a tree: the home page of each host links to 20 pages, each of
which links to 20 more, so every page after the first is scheduled from a dedup decision.
AutoThrottle is off (a politeness delay would measure the delay, not the crawler).

The rate reported is pages published / the crawl's elapsed time (Scrapy's
``elapsed_time_seconds``, start-up and the wait for the last decisions included).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench_extract import build_page

from crawler.extract import extract
from neardup.stack import EmbeddedStack

REPO = Path(__file__).resolve().parents[1]
FANOUT = 20
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
VOCABULARY = sorted({"".join(random.Random(i).choices(SYLLABLES, k=3)) for i in range(6000)})


class Site:
    """``pages`` distinct article pages spread over hosts; page ``i`` links to its children."""

    def __init__(self, pages: int, size_kb: int, hosts: list[str]) -> None:
        self.pages, self.size_kb, self.hosts = pages, size_kb, hosts
        self.ports: dict[str, int] = {}

    def url(self, i: int) -> str:
        host = self.hosts[i % len(self.hosts)]
        return f"http://{host}:{self.ports[host]}/p/{i}"

    def children(self, i: int) -> list[int]:
        first = len(self.hosts) + i * FANOUT  # the roots 0..hosts-1 are the seeds
        return [c for c in range(first, first + FANOUT) if c < self.pages]

    @cache  # noqa: B019 - one Site per run
    def body(self, i: int) -> bytes:
        rng = random.Random(i)
        links = "".join(f'<li><a href="{self.url(c)}">Story {c}</a></li>' for c in self.children(i))
        nav = "".join(f'<a href="{self.url(s)}">Top {s}</a> ' for s in range(min(30, self.pages)))
        parts = [
            f"<html><head><title>Story {i}</title><style>p{{margin:0}}</style></head>"
            f"<body><header><nav>{nav}</nav></header><main><h1>Story {i}</h1><ul>{links}</ul>"
        ]
        while sum(map(len, parts)) < self.size_kb * 1024:
            words = " ".join(rng.choices(VOCABULARY, k=60))
            parts.append(f"<p>{words.capitalize()}.</p>\n")
        parts.append("</main><footer>Copyright Benchmark Press</footer></body></html>")
        return "".join(parts).encode()


def serve(site: Site) -> list[ThreadingHTTPServer]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            match = re.fullmatch(r"/p/(\d+)", self.path)
            if self.path == "/robots.txt":
                status, kind, body = 200, "text/plain", b"User-agent: *\nAllow: /\n"
            elif match and int(match.group(1)) < site.pages:
                status, kind, body = 200, "text/html; charset=utf-8", site.body(int(match[1]))
            else:
                status, kind, body = 404, "text/html", b"<html>no</html>"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    servers = []
    for host in site.hosts:
        server = ThreadingHTTPServer((host, 0), Handler)
        server.daemon_threads = True
        site.ports[host] = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


def extraction_median_ms(size_kb: int, runs: int) -> float:
    page = build_page(size_kb)
    url = "https://www.example.com/news/2024/energy-plan"
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        extract(page, url)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples[10:])


def crawl(site: Site, stack: EmbeddedStack, workdir: Path, settings: dict[str, str]) -> str:
    tag = f"bench-{os.getpid()}-{int(time.time())}"
    env = {
        **os.environ,
        "NEARDUP_KAFKA_BOOTSTRAP": stack.bootstrap,
        "NEARDUP_REDIS_URL": stack.redis_url,
        "NEARDUP_PAGES_TOPIC": f"pages-{tag}",
        "NEARDUP_DECISIONS_TOPIC": f"decisions-{tag}",
        "NEARDUP_GROUP_ID": tag,
        "NEARDUP_INDEX_NAMESPACE": tag,
        "NEARDUP_CRAWL_ID": tag,
        "NEARDUP_PARTITIONS": "4",
        "NEARDUP_BATCH_MAX_WAIT_MS": "20",
        "NEARDUP_EXPECTED_PAGES": str(max(site.pages, 1000)),
        "NEARDUP_LOG_LEVEL": "WARNING",
    }
    with (workdir / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dedup_worker.worker.main"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            return _run_crawler(site, env, workdir, settings)
        finally:
            worker.terminate()
            worker.wait(30)


def _run_crawler(site: Site, env: dict[str, str], workdir: Path, settings: dict[str, str]) -> str:
    seeds = ",".join(site.url(i) for i in range(len(site.hosts)))
    profile = (
        ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]]
        if os.environ.get("BENCH_PROFILE")
        else []
    )
    command = [
        sys.executable,
        *profile,
        "-m",
        "scrapy",
        "crawl",
        "neardup",
        "-a",
        f"seeds={seeds}",
        "-a",
        "allowed_domains=" + ",".join(site.hosts),
    ]
    for key, value in settings.items():
        command += ["-s", f"{key}={value}"]
    log = workdir / "crawler.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("wb") as out:
        subprocess.run(
            command,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=900,
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return log.read_text(errors="replace") + f"\n'crawler_cpu_seconds': {cpu:.2f},\n"


def stat(log: str, key: str) -> float:
    match = re.search(rf"'{re.escape(key)}': ([0-9.e+-]+)", log)
    return float(match.group(1)) if match else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--size-kb", type=int, default=50)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32, help="CONCURRENT_REQUESTS")
    args = parser.parse_args()

    print(f"extract(): median {extraction_median_ms(50, 200):.2f} ms per 50 KB page")
    site = Site(args.pages, args.size_kb, [f"127.0.0.{2 + i}" for i in range(args.hosts)])
    servers = serve(site)
    for i in range(args.pages):  # a static site: pages are built before the clock starts
        site.body(i)
    settings = {
        "AUTOTHROTTLE_ENABLED": "False",
        "CONCURRENT_REQUESTS": str(args.concurrency),
        "CONCURRENT_REQUESTS_PER_DOMAIN": str(args.concurrency),
        "LOG_LEVEL": "INFO",
        "NEARDUP_DECISION_TIMEOUT": "60",
    }
    try:
        with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp) / "stack") as stack:
            log = crawl(site, stack, Path(tmp), settings)
    finally:
        for server in servers:
            server.shutdown()
    published = stat(log, "dedup/pages_published")
    elapsed = stat(log, "elapsed_time_seconds")
    megabytes = stat(log, "dedup/html_bytes") / 1e6
    print(
        f"crawl: {published:.0f} pages ({megabytes:.0f} MB of HTML) in {elapsed:.1f} s = "
        f"{published / elapsed:.0f} pages/s per crawler process "
        f"({args.size_kb} KB pages, {args.hosts} hosts, concurrency {args.concurrency})"
    )
    print(
        f"crawler process CPU: {stat(log, 'crawler_cpu_seconds'):.1f} s "
        f"= {1000 * stat(log, 'crawler_cpu_seconds') / max(published, 1):.1f} ms per page"
    )
    if published < args.pages:
        print(f"warning: only {published:.0f} of {args.pages} pages were published")


if __name__ == "__main__":
    main()
