"""Deferreds waiting for pages' verdicts: an item yielded by a callback carries its page's
verdict once the decision applied (:mod:`crawler.middleware`). Twisted only, no Scrapy."""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed

from crawler.frontier import Ledger
from dedup_worker.contract.reading import PageKey


class VerdictWaiters:
    """Who waits for which page's verdict (one per link scheduler)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._waiters: dict[PageKey, list[Deferred[str | None]]] = {}

    def of(self, key: PageKey) -> Deferred[str | None]:
        """Fires with the page's verdict once its decision applied (None if none will come)."""
        standing = self._ledger.pages.get(key)
        if standing is None and key not in self._ledger.awaiting:
            return succeed(None)
        if standing is not None and key not in self._ledger.awaiting:
            return succeed(standing.verdict.value)
        waiter: Deferred[str | None] = Deferred()
        self._waiters.setdefault(key, []).append(waiter)
        return waiter

    def resolve(self, key: PageKey, verdict: str | None) -> None:
        for waiter in self._waiters.pop(key, []):
            waiter.callback(verdict)

    def release_all(self) -> None:
        """The crawl is closing: nothing waits for a decision any more."""
        for key in list(self._waiters):
            self.resolve(key, None)
