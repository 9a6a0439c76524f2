"""``neardup demo``: a whole crawl of a generated local site, scored against its ground truth."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="crawl a local demo site with planted near-duplicates (offline), print what was "
        "found and saved, write the report",
        description=(
            "Serves a generated five-host site on 127.0.0.2-6 (mirrors on another host and "
            "path, print views, session ids, sort and tracking parameters, two releases of a "
            "docs tree, pagination that is not duplicate), crawls it on the embedded broker "
            "and Redis like `neardup crawl` (NEARDUP_* variables are ignored), and compares "
            "the crawl with one that fetches every link. No network beyond loopback."
        ),
    )
    demo.add_argument(
        "--out", type=Path, default=Path("neardup-demo"),
        help="directory for decisions.jsonl, report.html, summary.json and logs",
    )  # fmt: skip
    demo.add_argument("--workers", type=int, default=2, help="dedup worker processes (>= 1)")
    demo.add_argument(
        "--crawlers", type=int, default=1,
        help="spider processes sharing the crawl, as `neardup crawl --crawlers`",
    )  # fmt: skip
    demo.add_argument(
        "--keep-serving", action="store_true", help="leave the site up for a browser (Ctrl-C)"
    )
    demo.add_argument("--quiet", action="store_true", help="no live progress lines")
    demo.add_argument(
        "--site", type=Path, metavar="DIR",
        help="crawl this folder of real pages instead of the generated site: one folder per "
        "host (DIR/<host>/index.html, ...), as `wget --mirror` writes them; scored against "
        "the pages' own resemblance",
    )  # fmt: skip
    demo.add_argument(
        "--max-pages", type=int, metavar="N",
        help="a crawl budget, as `neardup crawl --max-pages`: what the crawl reaches with N "
        "fetches is scored against the whole site",
    )  # fmt: skip
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from neardup.commands.crawl import crawlers_problem
    from neardup.crawl_run import CrawlError
    from neardup.demo.run import DemoOptions
    from neardup.demo.run import run_demo as run
    from neardup.errors import NeardupError
    from neardup.extras import require_extra

    # Checked before anything starts: the demo crawls (Scrapy), on the embedded broker and
    # Redis, and writes the HTML report.
    require_extra("crawler", "neardup demo (the spider runs Scrapy)")
    require_extra("stack", "neardup demo (it runs the embedded broker and Redis)")
    require_extra("report", "neardup demo (it writes the HTML report)")
    if args.workers < 1:
        return _fail("--workers must be >= 1 (the workers decide; without one nothing would)")
    if args.max_pages is not None and args.max_pages < 1:
        return _fail("--max-pages must be >= 1 (leave it out for no budget)")
    problem = crawlers_problem(args.crawlers, args.max_pages)
    if problem:
        return _fail(problem)
    if args.out.exists() and not args.out.is_dir():
        return _fail(f"--out must be a directory, {args.out} is a file")
    options = DemoOptions(
        out=args.out,
        workers=args.workers,
        crawlers=args.crawlers,
        keep_serving=args.keep_serving,
        quiet=args.quiet,
        site=args.site,
        max_pages=args.max_pages,
    )
    try:
        return run(options)
    except (CrawlError, NeardupError) as exc:
        return _fail(str(exc), code=1)


def _fail(message: str, code: int = 2) -> int:
    print(f"neardup demo: error: {message}", file=sys.stderr)
    return code
