"""The machine-readable ground truth of a served site (absolute canonical URLs).

``manifest(server)`` returns a JSON-ready dict:

- ``duplicates``: ``{url, original, kind, verdict}`` for every planted duplicate;
- ``only_via_duplicates``: URLs linked only from duplicates, each with text of its own: a crawl
  with ``NEARDUP_RULES=false`` never fetches them (a duplicate's requests are all dropped), one
  with the rules on (the default) fetches them as new content (no counterpart under the keeper);
- ``unique``: every page a crawl from the seeds must fetch and find unique;
- ``disallowed`` (robots.txt), ``aliases`` (spellings canonicalised into another URL),
  ``redirects`` (``{requested, url}``), ``non_html``: the special cases.
"""

from __future__ import annotations

from typing import Any

from neardup.demo.planted import Site
from neardup.demo.server import SiteServer


def manifest(server: SiteServer[Site]) -> dict[str, Any]:
    site, url = server.site, server.url
    duplicates = [
        {
            "url": url(*f.duplicate),
            "original": url(*f.original),
            "kind": f.kind,
            "verdict": f.verdict,
        }
        for f in site.families
    ]
    only = sorted(url(*page) for f in site.families for page in f.only_via_duplicate)
    return {
        "hosts": dict(server.base),
        "seeds": {"main": url("main", "/"), "other": url("other", "/")},
        "duplicates": duplicates,
        "only_via_duplicates": only,
        "unique": sorted(url(*key) for key in unique_pages(site)),
        "disallowed": sorted(url(*key) for key in site.disallowed),
        "aliases": sorted(server.base[h] + p for h, p in site.aliases),
        "redirects": [{"requested": url(*a), "url": url(*b)} for a, b in site.redirects],
        "non_html": sorted(url(*key) for key in site.non_html),
    }


def unique_pages(site: Site) -> set[tuple[str, str]]:
    """Pages reachable from the seeds without passing through a duplicate, minus the special
    ones: the pages a crawl must fetch and decide ``unique``."""
    duplicates = {f.duplicate for f in site.families}
    special = set(site.disallowed) | set(site.non_html) | {r[0] for r in site.redirects}
    reachable: set[tuple[str, str]] = set()
    frontier = [("main", "/"), ("other", "/")]
    while frontier:
        key = frontier.pop()
        if key in reachable or key not in site.pages:
            continue
        reachable.add(key)
        if key in duplicates or key in special:
            continue
        spec = site.pages[key]
        frontier.extend((link.host, link.path) for link in spec.links)
    redirect_targets = {b for _, b in site.redirects}
    reachable |= redirect_targets
    return {k for k in reachable if k not in duplicates and k not in special}
