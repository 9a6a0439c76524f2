"""The demo's site: the planted magazine and the documentation site served together on five
loopback hosts, and the ground truth a crawl of both is scored against.

The truth is exact because the site is generated: every page is rendered and extracted as the
spider does (:mod:`neardup.demo.truth`), so the pages a crawl following every link would fetch
(robots.txt obeyed, redirects followed) are known, and so is which pages resemble which
(Jaccard >= 0.9 of word 4-shingles, the detector's reference relation). The construction adds
what the resemblance cannot say: which page is the copy, of what kind (a print view, a mirror,
...), and which pages only look alike (pagination).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from neardup.demo.planted import Site, Spec, build_site
from neardup.demo.render import render
from neardup.demo.server import SiteServer
from neardup.demo.subtrees import SubtreeSite, build_subtree_site
from neardup.demo.truth import jaccard_partners, reachable, render_site, url_of

Key = tuple[str, str]

#: Where a crawl starts: the magazine, the blog and the documentation site.
SEEDS: tuple[Key, ...] = (("main", "/"), ("other", "/"), ("docs", "/"))

#: Kinds of planted copy, in the order the summary lists them.
KINDS: dict[str, str] = {
    "mirror-host": "mirror on another host",
    "mirror-prefix": "mirror on another host and path prefix",
    "print": "print view",
    "session": "session id in the URL",
    "sort": "sort order in the URL",
    "tracking": "referrer or ad variant (?from=, ?ad=)",
    "timestamp": "only the time differs (?refresh=1)",
    "release": "docs release 2.0 unchanged from 1.0",
    "exact": "byte-identical copy (archive, ?page=1)",
}
_PLANTED_KINDS = {
    "mirror": "mirror-host",
    "print": "print",
    "session": "session",
    "timestamp": "timestamp",
    "counter": "tracking",
    "ad": "tracking",
    "exact": "exact",
}
_PARAM_KINDS = {"print": "print", "sort": "sort", "sessid": "session"}


@dataclass(frozen=True)
class Group:
    """Pages with one content: the construction's original and its copies, each of a kind."""

    original: str
    copies: tuple[tuple[str, str], ...]  # (url, kind)

    @property
    def members(self) -> tuple[str, ...]:
        return (self.original, *(url for url, _ in self.copies))


@dataclass(frozen=True)
class DemoTruth:
    """What a crawl of the demo site is scored against (canonical URLs)."""

    base: Mapping[str, str]
    seeds: tuple[str, ...]
    #: Every page a crawl following every link fetches and decides, breadth-first.
    pages: tuple[str, ...]
    #: Each page's J >= 0.9 partners.
    partners: Mapping[str, frozenset[str]]
    groups: tuple[Group, ...]
    #: Pagination pages: alike in template, different in content, never duplicates.
    traps: frozenset[str]
    #: Mean size of an HTML page of the site, in bytes.
    page_bytes: int


def demo_truth(planted: Site, docs: SubtreeSite, base: Mapping[str, str]) -> DemoTruth:
    """The ground truth of both sites served at ``base`` (host -> ``http://address:port``)."""
    rendered = {**render_site(planted, base), **render_site(docs.site, base)}
    redirects = {url_of(base, a): url_of(base, b) for a, b in planted.redirects}
    disallowed = {url_of(base, key) for key in planted.disallowed}
    seeds = tuple(url_of(base, key) for key in SEEDS)
    sizes = [len(render(spec, dict(base))) for spec in _html_specs(planted, docs)]
    return DemoTruth(
        base=dict(base),
        seeds=seeds,
        pages=tuple(reachable(rendered, seeds, redirects, disallowed)),
        partners=jaccard_partners({url: page.text for url, page in rendered.items()}),
        groups=_groups(planted, docs, base),
        traps=frozenset(url_of(base, key) for key in docs.traps),
        page_bytes=sum(sizes) // max(len(sizes), 1),
    )


def _html_specs(planted: Site, docs: SubtreeSite) -> list[Spec]:
    specs = [*planted.pages.values(), *docs.site.pages.values()]
    return [s for s in specs if s.raw is None and s.redirect_to is None]


def _groups(planted: Site, docs: SubtreeSite, base: Mapping[str, str]) -> tuple[Group, ...]:
    copies: dict[str, list[tuple[str, str]]] = {}
    for family in planted.families:
        kind = _PLANTED_KINDS[family.kind]
        copies.setdefault(url_of(base, family.original), []).append(
            (url_of(base, family.duplicate), kind)
        )
    for copy, original in docs.copies:
        kind = _docs_kind(docs.family[copy], copy)
        copies.setdefault(url_of(base, original), []).append((url_of(base, copy), kind))
    return tuple(Group(original, tuple(members)) for original, members in copies.items())


def _docs_kind(family: str, key: Key) -> str:
    if family == "mirror":
        return "mirror-prefix"
    if family == "params":
        return _PARAM_KINDS[urlsplit(key[1]).query.split("=")[0]]
    if family == "trap":
        return "exact"  # ?page=1: the listing itself
    return family  # release


class DemoSite:
    """Both sites, served: ``with DemoSite() as site: ...`` (``SiteAddressError`` when an
    address cannot be bound; then nothing is left serving)."""

    def __init__(self, addresses: dict[str, str] | None = None) -> None:
        self.planted = build_site()
        self.docs = build_subtree_site()
        self.servers = [SiteServer(self.planted, addresses), SiteServer(self.docs.site, addresses)]

    def start(self) -> Self:
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def base(self) -> dict[str, str]:
        return {host: url for server in self.servers for host, url in server.base.items()}

    def seeds(self) -> tuple[str, ...]:
        return tuple(url_of(self.base, key) for key in SEEDS)

    def addresses(self) -> tuple[str, ...]:
        """The hosts' addresses, as a crawl's allowed domains."""
        return tuple(sorted({urlsplit(url).hostname or "" for url in self.base.values()}))

    def truth(self) -> DemoTruth:
        return demo_truth(self.planted, self.docs, self.base)

    def fetched(self) -> list[str]:
        """HTML pages served (status 200, no robots.txt, redirect or PDF), in the order each
        site received them: the crawl's fetch log as the sites saw it."""
        log: list[str] = []
        for server in self.servers:
            pages = server.site.pages
            for hit in list(server.log):
                spec = pages.get((hit.host, hit.path))
                if hit.status == 200 and spec is not None and spec.raw is None:
                    log.append(server.url(hit.host, hit.path))
        return log


__all__ = ["KINDS", "SEEDS", "DemoSite", "DemoTruth", "Group", "demo_truth"]
