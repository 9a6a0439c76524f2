"""A CrawlSpider: rules follow every link, a callback makes one item per page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from myproject import scope


class RulesSpider(CrawlSpider):
    name = "rules"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True),)

    def __init__(self, start_urls: str = "", allowed_domains: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = scope.split_urls(start_urls)
        # Not given: the start URLs' hosts (Scrapy's empty list would mean the whole web).
        self.allowed_domains = scope.allowed_domains(allowed_domains, self.start_urls)

    def parse_start_url(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.parse_page(response)

    def parse_page(self, response: Response) -> Iterator[dict[str, Any]]:
        yield {"url": response.url, "title": response.css("title::text").get(), "spider": self.name}
