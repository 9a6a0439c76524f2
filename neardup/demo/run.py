"""``neardup demo``: serve the demo site on loopback (or, with ``--site DIR``, a folder of real
pages: :mod:`neardup.demo.static`), crawl it as ``neardup crawl`` does (embedded broker and Redis,
dedup workers, the spider), score the crawl against the site's ground truth, and write the
decisions, the HTML report and the figures to one directory.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from neardup.crawl_run import CrawlOptions, CrawlRun
from neardup.demo.score import score, score_lines
from neardup.demo.site import DemoSite, DemoTruth
from neardup.demo.static import FolderSite, SiteTruth
from neardup.demo.static_score import rule_score_lines, score_rules, score_site, site_score_lines
from neardup.demo.static_waste import duplicates_by_rule
from neardup.rules_table import read_rules, rules_path

DECISIONS = "decisions.jsonl"
REPORT = "report.html"
FIGURES = "summary.json"


@dataclass(frozen=True)
class DemoOptions:
    out: Path
    workers: int = 2
    crawlers: int = 1
    keep_serving: bool = False
    quiet: bool = False
    #: A folder of real pages, one folder per host (``--site``); None: the generated demo site.
    site: Path | None = None
    #: The crawl's budget (``--max-pages``); None: no budget.
    max_pages: int | None = None


Served = DemoSite | FolderSite


def run_demo(options: DemoOptions) -> int:
    """Exit code: 0 after a complete crawl, the crawl's code otherwise. Raises
    ``SiteAddressError`` when the site cannot be served, ``SiteFolderError`` for a ``--site``
    that holds no hosts, ``CrawlError`` as ``neardup crawl``."""
    served: Served = DemoSite() if options.site is None else FolderSite(options.site)
    options.out.mkdir(parents=True, exist_ok=True)
    with served as site:
        truth = site.truth()
        lines = banner(site.base, len(truth.pages), options.site)
        print("\n".join(lines), flush=True)
        code = CrawlRun(_crawl_options(options, site)).run()
        if code != 0:
            return code
        print("\n".join(_score_and_report(options, site, truth)))
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


def banner(base: Mapping[str, str], pages: int, folder: Path | None = None) -> list[str]:
    what = "a generated site of" if folder is None else f"the site folder {folder}:"
    lines = [f"neardup demo: {what} {pages} pages on {len(base)} loopback hosts"]
    width = max(10, *(len(host) for host in base))
    lines += [
        f"  {host:<{width}} {url}/  {HOST_ROLES.get(host, '') if folder is None else ''}".rstrip()
        for host, url in base.items()
    ]
    return lines


def _crawl_options(options: DemoOptions, site: Served) -> CrawlOptions:
    return CrawlOptions(
        seeds=site.seeds(),
        out=options.out / DECISIONS,
        workers=options.workers,
        crawlers=options.crawlers,
        max_pages=options.max_pages,
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


def _score_and_report(
    options: DemoOptions, site: Served, truth: DemoTruth | SiteTruth
) -> list[str]:
    """Score the crawl, write the report and the figures; the summary's lines."""
    from neardup.report import write_report

    summary = write_report(options.out / DECISIONS, options.out / REPORT, truth.page_bytes)
    by_url = {key.url: decision for key, decision in summary.final.items()}
    if isinstance(truth, DemoTruth):
        planted = score(truth, site.fetched(), by_url)
        figures, lines = planted.as_dict(), score_lines(planted)
    else:
        log = site.fetched()
        folder = score_site(truth, log, by_url, options.max_pages)
        by_rule = duplicates_by_rule(truth, log)
        figures, lines = folder.as_dict(), site_score_lines(folder, by_rule)
        figures["duplicates_fetched_by_rule"] = by_rule.as_dict()
        rules_file = rules_path(options.out / DECISIONS)
        if rules_file.exists():
            rules = score_rules(truth, read_rules(rules_file))
            figures["rules"] = [asdict(rule) for rule in rules]
            lines += ["", *rule_score_lines(rules)]
    figures |= {"site": dict(truth.base), "seeds": list(truth.seeds)}
    (options.out / FIGURES).write_text(json.dumps(figures, indent=2) + "\n")
    return lines


def _serve_until_interrupted(site: Served) -> None:
    print("the site stays up for a browser (Ctrl-C to stop):")
    for host, url in site.base.items():
        print(f"  {host:<10} {url}/")
    sys.stdout.flush()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped")
