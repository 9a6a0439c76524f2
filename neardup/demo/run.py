"""``neardup demo``: serve the demo site on loopback, crawl it as ``neardup crawl`` does (embedded
broker and Redis, dedup workers, the spider), score the crawl against the site's ground truth,
and write the decisions, the HTML report and the figures to one directory.

Nothing leaves the machine: the site is served on 127.0.0.2-6, the broker and Redis on
127.0.0.1, and the children get a ``no_proxy`` naming the site's addresses, so a proxy
configured in the environment is not asked for them. The crawl ignores ``NEARDUP_*`` variables
of the environment: a demo always runs on a fresh embedded stack (an index holding an earlier
demo's pages would find every page a duplicate of it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from neardup.crawl_run import CrawlOptions, CrawlRun
from neardup.demo.score import DemoScore, score, score_lines
from neardup.demo.site import DemoSite, DemoTruth

DECISIONS = "decisions.jsonl"
REPORT = "report.html"
FIGURES = "summary.json"


@dataclass(frozen=True)
class DemoOptions:
    out: Path
    workers: int = 2
    keep_serving: bool = False
    quiet: bool = False


def run_demo(options: DemoOptions) -> int:
    """Exit code: 0 after a complete crawl, the crawl's code otherwise. Raises
    ``SiteAddressError`` when the site cannot be served, ``CrawlError`` as ``neardup crawl``."""
    options.out.mkdir(parents=True, exist_ok=True)
    with DemoSite() as site:
        truth = site.truth()
        print("\n".join(banner(site.base, len(truth.pages))), flush=True)
        code = CrawlRun(_crawl_options(options, site)).run()
        if code != 0:
            return code
        result = _score_and_report(options, site, truth)
        print("\n".join(score_lines(result)))
        print(f"report: {options.out / REPORT}; figures: {options.out / FIGURES}")
        if options.keep_serving:
            _serve_until_interrupted(site)
    return 0


#: What each host of the demo site serves.
HOST_ROLES = {
    "main": "a magazine: articles, a shop, a guide, a status page (seed)",
    "mirror": "a mirror of the magazine's guide",
    "other": "a blog (seed)",
    "docs": "documentation: a manual, releases 1.0 and 2.0, a catalog, listings (seed)",
    "pubmirror": "a mirror of the manual under /pub/manual-3.2/",
}


def banner(base: Mapping[str, str], pages: int) -> list[str]:
    lines = [f"neardup demo: a generated site of {pages} pages on {len(base)} loopback hosts"]
    lines += [f"  {host:<10} {url}/  {HOST_ROLES.get(host, '')}" for host, url in base.items()]
    return lines


def _crawl_options(options: DemoOptions, site: DemoSite) -> CrawlOptions:
    return CrawlOptions(
        seeds=site.seeds(),
        out=options.out / DECISIONS,
        workers=options.workers,
        allowed_domains=site.addresses(),
        state_dir=options.out / "state",
        progress=not options.quiet,
        environment=demo_environment(os.environ, site.addresses()),
    )


def demo_environment(environ: Mapping[str, str], addresses: tuple[str, ...]) -> dict[str, str]:
    """``environ`` without ``NEARDUP_*`` (always the embedded stack, fresh), with the site's
    addresses in ``no_proxy``/``NO_PROXY`` (a proxy of the environment is never asked for them)."""
    env = {k: v for k, v in environ.items() if not k.startswith("NEARDUP_")}
    local = ["127.0.0.1", "localhost", *addresses]
    for name in ("no_proxy", "NO_PROXY"):
        present = [h for h in env.get(name, "").split(",") if h.strip()]
        env[name] = ",".join([*present, *(h for h in local if h not in present)])
    return env


def _score_and_report(options: DemoOptions, site: DemoSite, truth: DemoTruth) -> DemoScore:
    from neardup.report import write_report

    summary = write_report(options.out / DECISIONS, options.out / REPORT, truth.page_bytes)
    by_url = {key.url: decision for key, decision in summary.final.items()}
    result = score(truth, site.fetched(), by_url)
    figures = {**result.as_dict(), "site": dict(truth.base), "seeds": list(truth.seeds)}
    (options.out / FIGURES).write_text(json.dumps(figures, indent=2) + "\n")
    return result


def _serve_until_interrupted(site: DemoSite) -> None:
    print("the site stays up for a browser (Ctrl-C to stop):")
    for host, url in site.base.items():
        print(f"  {host:<10} {url}/")
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped")
