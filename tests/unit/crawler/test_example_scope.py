"""The example project's spiders stay on the start URLs' hosts unless told otherwise: Scrapy's
empty ``allowed_domains`` means every domain, and a spider that follows every link would then
crawl the web from the README's one-line command."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

from tests.support.crawl_helpers import REPO

PROJECT = REPO / "examples" / "myproject"


@pytest.fixture
def spiders(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    monkeypatch.syspath_prepend(str(PROJECT))
    names = ("rules", "pages")
    return {name: importlib.import_module(f"myproject.spiders.{name}") for name in names}


@pytest.mark.parametrize("name", ["rules", "pages"])
def test_without_allowed_domains_the_spider_keeps_to_its_start_hosts(
    spiders: dict[str, ModuleType], name: str
) -> None:
    cls = {"rules": "RulesSpider", "pages": "PagesSpider"}[name]
    spider = getattr(spiders[name], cls)(
        start_urls="https://docs.example.org/en/latest/, http://127.0.0.2:8080/a?b=1,"
        "https://docs.example.org/other"
    )
    assert spider.start_urls == [
        "https://docs.example.org/en/latest/",
        "http://127.0.0.2:8080/a?b=1",
        "https://docs.example.org/other",
    ]
    assert spider.allowed_domains == ["127.0.0.2", "docs.example.org"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [("a.example,b.example", ["a.example", "b.example"]), ("*", [])],
)
def test_allowed_domains_given_or_any(
    spiders: dict[str, ModuleType], given: str, expected: list[str]
) -> None:
    spider = spiders["pages"].PagesSpider(start_urls="https://c.example/", allowed_domains=given)
    assert spider.allowed_domains == expected
