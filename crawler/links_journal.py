"""What a process's crawl journal keeps, and when a request leaves it (a mixin of
:class:`crawler.links.LinkScheduler`).

With work sharing on (:mod:`crawler.sharing`), every request a process claims is journaled in
Redis until its page's decision settles it, so a killed process's requests are taken over by
the crawl's next process rather than lost. A request leaves the journal when it can no longer
become a page to wait for: its page is decided (:meth:`LinksJournal.settle_page`), it ended
without a page (an HTTP error, a body that is not HTML), or it redirected to a page whose
decision settles the chain with it. Each leaves with the next claim's round trip
(``CrawlSeen.settle``), not one of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from crawler.seen import CrawlSeen
from crawler.sharing import WorkSharing, encode_request
from dedup_worker.contract.reading import PageKey


class LinksJournal:
    """The journal's entries in and out (see the module docstring)."""

    crawler: Any
    sharing: WorkSharing | None
    _seen: Callable[[], CrawlSeen]
    # The URLs that redirected to a page (url, method, body), by the page's URL, until its
    # decision settles them with it.
    _redirected: dict[str, list[tuple[str, str, bytes]]]

    def settle_page(self, source: PageKey) -> None:
        """Page ``source`` leaves this process's journal with the next claim: its outlinks
        are claimed (journaled), or dropped, or kept back by the rules (not for a recovery
        to fetch)."""
        seen = self._seen()
        seen.settle(source.url)
        for url, method, body in self._redirected.pop(source.url, ()):
            seen.settle(url, method, body)

    def never_a_page(self, request: Any) -> None:
        """``request`` ended without a page (an HTTP error status, a body that is not HTML):
        it leaves this process's journal with the next claim, and so do the URLs that
        redirected to it. Taken over after a kill, it was fetched again for nothing."""
        self._settle_all([*request.meta.get("redirect_urls", ()), request.url], request)

    def redirected(self, request: Any) -> None:
        """A page came for ``request``: the URLs that redirected to it will never be pages. They
        leave the journal with the page's decision (:meth:`settle_page`), not before: the page
        itself may not be journaled (a retry's redirect passes the filter unclaimed), and a kill
        before its decision must leave the chain's first URL to be taken over."""
        urls = request.meta.get("redirect_urls", ())
        if urls:
            chain = [(url, request.method, request.body) for url in urls]
            self._redirected.setdefault(request.url, []).extend(chain)

    def redirect_filtered(self, request: Any) -> None:
        """``request``, a redirect's target, was claimed already (its claimant fetches it): the
        URLs that redirected to it leave this process's journal with the next claim."""
        self._settle_all(request.meta.get("redirect_urls", ()), request)

    def _settle_all(self, urls: Sequence[str], request: Any) -> None:
        seen = self._seen()
        for url in urls:
            seen.settle(url, request.method, request.body)

    def journal_entry(self, request: Any) -> bytes | None:
        """``request`` as this process's journal keeps it (None: it journals nothing)."""
        if self.sharing is None or self.sharing.fingerprint is None:
            return None
        return encode_request(request, self.crawler.spider)

    def _journaled(self, fps: list[bytes], requests: list[Any]) -> dict[bytes, bytes] | None:
        """The requests as the crawl's journal keeps them, when this process journals (see
        ``crawler.sharing``): what a killed process's journal gives back to the crawl."""
        if self.sharing is None or self.sharing.fingerprint is None:
            return None
        seen, spider = self._seen(), self.crawler.spider
        fresh = [(fp, r) for fp, r in zip(fps, requests, strict=True) if not seen.knows(fp)]
        encoded = ((fp, encode_request(r, spider)) for fp, r in fresh)
        return {fp: raw for fp, raw in encoded if raw is not None}
