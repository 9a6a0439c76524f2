"""Scrapy ``DOWNLOAD_HANDLERS`` entry of neardup for ``http`` and ``https``.

Scrapy's HTTP/1.1 handler, asking at the last moment whether a correction cancelled a request
released by a decision (:meth:`crawler.links.LinkScheduler.going_out`), and telling the crawl's
seen set that it went out. Not a downloader middleware: middlewares run when a request leaves
the scheduler, but with a download delay (AutoThrottle) requests then wait in the downloader's
per-host queue, where a correction would miss them; the handler runs when the request really
goes out. Other requests (seeds, robots.txt, anything not released by a decision) pass as they
would through Scrapy's own handler.
"""

from __future__ import annotations

from typing import Any

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler

from crawler.links import LINK_META
from crawler.session import NeardupSession


class CancellableDownloadHandler(HTTP11DownloadHandler):
    async def download_request(self, request: Any) -> Any:
        if request.meta.get(LINK_META):
            NeardupSession.of(self.crawler).links.going_out(request)
        return await super().download_request(request)
