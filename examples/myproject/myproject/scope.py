"""The crawl's scope from the spiders' ``-a`` arguments."""

from __future__ import annotations

from urllib.parse import urlsplit


def split_urls(value: str) -> list[str]:
    """``-a start_urls=`` as a list: comma-separated URLs."""
    return [url.strip() for url in value.split(",") if url.strip()]


def allowed_domains(value: str, start_urls: list[str]) -> list[str]:
    """``-a allowed_domains=`` as a list; when not given, the start URLs' hosts.

    Scrapy treats an empty list as "every domain": a spider that follows every link would
    leave the site at its first external link and crawl the web. ``*`` asks for that.
    """
    if value == "*":
        return []
    if value:
        return [domain.strip() for domain in value.split(",") if domain.strip()]
    return sorted({host for url in start_urls if (host := urlsplit(url).hostname)})
