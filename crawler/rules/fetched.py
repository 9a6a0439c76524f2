"""What one crawler process remembers of the crawl's URLs: bounded sets and the fetched
pages' keepers (pure; used by :mod:`crawler.crawl_rules`)."""

from __future__ import annotations

#: URLs a process remembers in its bounded sets (see :class:`UrlSet`).
URL_LIMIT = 2_000_000


class UrlSet:
    """A set of URLs that forgets everything past ``limit`` (a cache: forgetting costs a fetch
    or a repeated message, never content)."""

    def __init__(self, limit: int = URL_LIMIT) -> None:
        self.limit = limit
        self._urls: set[str] = set()

    def add(self, url: str) -> None:
        if len(self._urls) >= self.limit:
            self._urls.clear()
        self._urls.add(url)

    def discard(self, url: str) -> None:
        self._urls.discard(url)

    def __contains__(self, url: object) -> bool:
        return url in self._urls

    def __len__(self) -> int:
        return len(self._urls)


class Fetched:
    """The fetched pages this process read decisions of: URL -> keeper (the page itself if it
    is new, else the keeper of the page it duplicates), and which of them came back
    ``changed`` (a recrawl). Past ``limit`` pages it starts over: an unknown page only means no
    check and no skip."""

    def __init__(self, limit: int = URL_LIMIT) -> None:
        self.limit = limit
        self._keepers: dict[str, str] = {}
        self._changed: set[str] = set()

    def note(self, url: str, duplicate_of: str | None, changed: bool = False) -> str:
        if len(self._keepers) >= self.limit:
            self._keepers.clear()
            self._changed.clear()
        keeper = url if duplicate_of is None else self._keepers.get(duplicate_of, duplicate_of)
        self._keepers[url] = keeper
        if changed:
            self._changed.add(url)
        else:
            self._changed.discard(url)
        return keeper

    def keeper_of(self, url: str) -> str | None:
        return self._keepers.get(url)

    def changed(self, url: str) -> bool:
        """Whether ``url``'s fetch in this crawl found other content than its previous one."""
        return url in self._changed

    def __len__(self) -> int:
        return len(self._keepers)
