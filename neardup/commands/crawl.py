"""``neardup crawl`` (a whole crawl) and ``neardup worker`` (one dedup worker)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    crawl = commands.add_parser(
        "crawl",
        help="crawl from seed URLs with near-duplicate suppression (embedded stack by default)",
        description=(
            "Without NEARDUP_KAFKA_BOOTSTRAP / NEARDUP_REDIS_URL this starts a local broker and "
            "Redis, N dedup workers and the spider; with them set it uses those services. Every "
            "decision is written to --out; nothing is left running afterwards."
        ),
    )
    crawl.add_argument("seeds", nargs="*", help="seed URLs")
    crawl.add_argument("--seed-file", type=Path, help="file with one seed URL per line")
    crawl.add_argument("--max-pages", type=int, default=None, help="stop fetching after N pages")
    crawl.add_argument("--max-depth", type=int, default=None, help="link depth limit")
    crawl.add_argument("--workers", type=int, default=2, help="dedup worker processes (0: none)")
    crawl.add_argument(
        "--crawlers", type=int, default=1,
        help="spider processes sharing the crawl (>= 1; --max-pages is split between them)",
    )  # fmt: skip
    crawl.add_argument("--out", type=Path, default=Path("decisions.jsonl"), help="decisions file")
    crawl.add_argument(
        "--allowed-domains", default="", help="comma-separated (default: the seeds' hosts)"
    )
    crawl.add_argument("--state-dir", type=Path, default=Path(".neardup"), help="logs, state")
    crawl.add_argument("--crawl-id", default="", help="share or resume a crawl under this id")
    crawl.add_argument("--partitions", type=int, default=4, help="partitions of the topics")
    crawl.add_argument("--quiet", action="store_true", help="no live progress lines")
    crawl.set_defaults(handler=run_crawl)

    worker = commands.add_parser(
        "worker", help="run one dedup worker (same as dedup-worker)", add_help=False
    )
    worker.add_argument("worker_args", nargs=argparse.REMAINDER)
    worker.set_defaults(handler=run_worker)


def run_crawl(args: argparse.Namespace) -> int:
    from neardup.crawl_run import CrawlError, CrawlOptions, CrawlRun
    from neardup.errors import NeardupError
    from neardup.extras import require_extra

    require_extra("crawler", "neardup crawl (the spider runs Scrapy)")

    seeds = list(args.seeds)
    if args.seed_file is not None:
        try:
            seeds += [s.strip() for s in args.seed_file.read_text().splitlines() if s.strip()]
        except OSError as exc:
            return _fail(f"cannot read --seed-file: {exc}")
    problem = _check(seeds, args)
    if problem:
        return _fail(problem)
    options = CrawlOptions(
        seeds=tuple(seeds), out=args.out, workers=args.workers, crawlers=args.crawlers,
        max_pages=args.max_pages,
        max_depth=args.max_depth, state_dir=args.state_dir, crawl_id=args.crawl_id,
        allowed_domains=tuple(d for d in args.allowed_domains.split(",") if d),
        partitions=args.partitions, progress=not args.quiet,
    )  # fmt: skip
    try:
        return CrawlRun(options).run()
    except (CrawlError, NeardupError) as exc:
        return _fail(str(exc), code=1)


def _check(seeds: list[str], args: argparse.Namespace) -> str:
    if not seeds:
        return "give at least one seed URL (or --seed-file)"
    bad = [s for s in seeds if not s.startswith(("http://", "https://"))]
    if bad:
        return f"seeds must be http(s) URLs, got {bad[0]!r}"
    if args.workers < 0 or args.partitions < 1:
        return "--workers must be >= 0 and --partitions >= 1"
    if args.max_pages is not None and args.max_pages < 1:
        return "--max-pages must be >= 1"
    return crawlers_problem(args.crawlers, args.max_pages)


def crawlers_problem(crawlers: int, max_pages: int | None) -> str:
    """What is wrong with ``--crawlers`` ("" if nothing)."""
    if crawlers < 1:
        return "--crawlers must be >= 1 (the spider processes of the crawl)"
    if max_pages is not None and max_pages < crawlers:
        return (
            f"--max-pages {max_pages} is split between {crawlers} crawlers: "
            "give each at least one page"
        )
    return ""


def run_worker(args: argparse.Namespace) -> int:
    from dedup_worker.worker.main import main as worker_main

    return int(worker_main(args.worker_args) or 0)


def _fail(message: str, code: int = 2) -> int:
    print(f"neardup crawl: error: {message}", file=sys.stderr)
    return code
