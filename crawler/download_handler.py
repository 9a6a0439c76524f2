"""Scrapy ``DOWNLOAD_HANDLERS`` entry of neardup for ``http`` and ``https``.

Scrapy's HTTP/1.1 handler, asking at the last moment whether a correction cancelled a request
released by a decision (:meth:`crawler.links.LinkScheduler.going_out`), and telling the crawl's
seen set that it went out. Not a downloader middleware: middlewares run when a request leaves
the scheduler, but with a download delay (AutoThrottle) requests then wait in the downloader's
per-host queue, where a correction would miss them; the handler runs when the request really
goes out. Other requests (seeds, robots.txt, anything not released by a decision) pass as they
would through Scrapy's own handler.

Its connection pool never takes back a connection that is being closed
(:class:`ClosingAwarePool`): see there for the double fetch it prevents.
"""

from __future__ import annotations

import logging
from typing import Any

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from twisted.web.client import HTTPConnectionPool

from crawler.links import LINK_META
from crawler.session import NeardupSession

logger = logging.getLogger(__name__)


class ClosingAwarePool(HTTPConnectionPool):
    """Twisted's pool of persistent connections, refusing connections already being closed.

    The spider stops a non-HTML download as soon as its headers arrive (``StopDownload`` in
    ``headers_received``), and Scrapy closes that response's connection. When the whole small
    body came in the same read as the headers, Twisted still finishes parsing the response
    afterwards and hands the closing connection back to the pool as idle: the close only
    happens on a later pass of the reactor. A request of the same host started before then
    (a download slot's delay timer firing in that pass) is written on that connection, reaches
    the server, and loses its response when the connection closes; the pool's automatic retry
    of idempotent requests then sends it again on a new connection. The server has served the
    URL twice (and fails writing the first response: a broken pipe). Not caching a connection
    whose transport is disconnecting closes that window."""

    def _putConnection(self, key: Any, connection: Any) -> None:  # noqa: N802 (Twisted's name)
        transport = connection.transport
        if transport is None or getattr(transport, "disconnecting", False):
            # Closing: it goes away on its own, and nothing may be sent on it.
            logger.debug("not reusing a closing connection to %s", key[1:])
            return
        super()._putConnection(key, connection)  # type: ignore[no-untyped-call]


class CancellableDownloadHandler(HTTP11DownloadHandler):
    def __init__(self, crawler: Any) -> None:
        super().__init__(crawler)
        from twisted.internet import reactor  # the installed one (as Scrapy's handler does)

        pool = ClosingAwarePool(reactor, persistent=True)  # type: ignore[no-untyped-call]
        pool.maxPersistentPerHost = self._pool.maxPersistentPerHost
        pool._factory = self._pool._factory
        self._pool = pool

    async def download_request(self, request: Any) -> Any:
        if request.meta.get(LINK_META):
            NeardupSession.of(self.crawler).links.going_out(request)
        return await super().download_request(request)
