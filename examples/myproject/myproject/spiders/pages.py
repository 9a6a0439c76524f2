"""A plain spider: one callback that yields an item and a request per link."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.http import HtmlResponse, Response

from myproject import scope


class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(self, start_urls: str = "", allowed_domains: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = scope.split_urls(start_urls)
        # Not given: the start URLs' hosts (Scrapy's empty list would mean the whole web).
        self.allowed_domains = scope.allowed_domains(allowed_domains, self.start_urls)

    def parse(self, response: Response) -> Iterator[Any]:
        if not isinstance(response, HtmlResponse):
            return
        yield {"url": response.url, "title": response.css("title::text").get(), "spider": self.name}
        yield from response.follow_all(css="a")
