"""The URL-seen filter: one set of claimed URLs per crawl, shared through Redis.

A URL is *claimed* the first time any crawler process schedules it; every later attempt, in this
process or another one sharing the crawl id, sees it as seen. Members are 16-byte BLAKE2b digests
of the canonical URL (stable across processes and releases, unlike ``hash()``; 2**-64 collision
odds at a billion URLs), kept in one Redis set per crawl, ``neardup:crawl:<id>:seen``. Stopping
a crawl leaves the set in place, so a resumed crawl (same ``NEARDUP_CRAWL_ID``) skips what it
already fetched. Without Redis the set lives in process memory.

As in scrapy-redis, :class:`SeenFilter` plugs into Scrapy's scheduler as ``DUPEFILTER_CLASS``.
The scheduling extension claims a decision's outlinks in one round trip
(:meth:`CrawlSeen.claim_many`); the scheduler's own per-request check then finds them in the
local ``preclaimed`` set instead of asking Redis a second time.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any, Protocol, Self
from weakref import WeakKeyDictionary

from scrapy import signals

from crawler.config import crawl_config, default_crawl_id
from crawler.urls import canonicalize_url

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

logger = logging.getLogger(__name__)

FINGERPRINT_BYTES = 16


def url_fingerprint(url: str, method: str = "GET", body: bytes = b"") -> bytes:
    """Stable fingerprint of a request: its canonical URL (and method and body unless GET)."""
    digest = hashlib.blake2b(digest_size=FINGERPRINT_BYTES)
    digest.update(canonicalize_url(url).encode("utf-8"))
    if method.upper() != "GET" or body:
        digest.update(b"\x00" + method.upper().encode("ascii") + b"\x00" + body)
    return digest.digest()


def seen_key(crawl_id: str) -> str:
    return f"neardup:crawl:{crawl_id}:seen"


class SeenStore(Protocol):
    """Set of fingerprints: ``add_many`` returns, per item, whether it was new."""

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def remove(self, fingerprint: bytes) -> None: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class MemorySeenStore:
    """The in-process fallback: one crawler process, forgotten when it exits."""

    def __init__(self) -> None:
        self._members: set[bytes] = set()

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        fresh = []
        for fp in fingerprints:
            fresh.append(fp not in self._members)
            self._members.add(fp)
        return fresh

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        return [fp in self._members for fp in fingerprints]

    def remove(self, fingerprint: bytes) -> None:
        self._members.discard(fingerprint)

    def size(self) -> int:
        return len(self._members)

    def close(self) -> None:
        pass


class RedisSeenStore:
    """One Redis set per crawl; SADD's reply says atomically who claimed a URL first."""

    def __init__(self, client: Any, key: str) -> None:
        self._client = client
        self.key = key

    @classmethod
    def from_url(cls, url: str, crawl_id: str) -> Self:
        import redis

        return cls(redis.Redis.from_url(url), seen_key(crawl_id))

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        if not fingerprints:
            return []
        # One pipelined round trip; a multi-member SADD would only report how many were new.
        pipe = self._client.pipeline(transaction=False)
        for fp in fingerprints:
            pipe.sadd(self.key, fp)
        return [bool(added) for added in pipe.execute()]

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        found: list[bool] = []
        for start in range(0, len(fingerprints), 10_000):  # bounded replies, bounded stalls
            chunk = list(fingerprints[start : start + 10_000])
            found.extend(bool(m) for m in self._client.smismember(self.key, chunk))
        return found

    def remove(self, fingerprint: bytes) -> None:
        self._client.srem(self.key, fingerprint)

    def size(self) -> int:
        return int(self._client.scard(self.key))

    def close(self) -> None:
        self._client.close()


class CrawlSeen:
    """The crawl's seen set as this process uses it (shared by the filter and the extension).

    ``_known`` caches fingerprints known to be claimed: a site's navigation links repeat on
    every page, and asking Redis about them again and again would cost most of the round trips.
    Claims are never undone except by :meth:`release`, which also drops the cache entry, so a
    cached "seen" stays true (a release by another process is the one thing it misses).
    """

    def __init__(self, store: SeenStore, known_limit: int = 1_000_000) -> None:
        self.store = store
        self._preclaimed: set[bytes] = set()
        self._known: set[bytes] = set()
        self._known_limit = known_limit

    def claim_many(self, urls: Sequence[str]) -> list[bool]:
        """Claim URLs for this process; True where nobody had claimed the URL before."""
        fps = [url_fingerprint(url) for url in urls]
        unknown = list(dict.fromkeys(fp for fp in fps if fp not in self._known))
        answers = dict(zip(unknown, self.store.add_many(unknown), strict=True))
        self._preclaimed.update(fp for fp, new in answers.items() if new)
        self._remember(answers)
        # A URL listed twice is fresh only the first time.
        fresh = []
        for fp in fps:
            fresh.append(answers.pop(fp, False))
        return fresh

    def _remember(self, fps: Iterable[bytes]) -> None:
        if len(self._known) > self._known_limit:
            self._known.clear()  # a cache: forgetting only costs round trips
        self._known.update(fps)

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        return self.store.contains_many([url_fingerprint(url) for url in urls])

    def request_seen(self, url: str, method: str = "GET", body: bytes = b"") -> bool:
        fp = url_fingerprint(url, method, body)
        if fp in self._preclaimed:
            self._preclaimed.discard(fp)
            return False
        return not self.store.add_many([fp])[0]

    def release(self, url: str) -> None:
        """Un-claim a URL that was claimed but will not be fetched, so others may schedule it."""
        fp = url_fingerprint(url)
        self._preclaimed.discard(fp)
        self._known.discard(fp)
        self.store.remove(fp)


_SEEN: WeakKeyDictionary[Any, CrawlSeen] = WeakKeyDictionary()


def seen_for(crawler: Any) -> CrawlSeen:
    """The crawler's one :class:`CrawlSeen`, built on first use (the spider must exist)."""
    seen = _SEEN.get(crawler)
    if seen is None:
        seen = CrawlSeen(_build_store(crawler))
        _SEEN[crawler] = seen
        # Closed when the engine stops, after every user (filter, extension, middleware).
        crawler.signals.connect(
            lambda: _close_seen(crawler), signal=signals.engine_stopped, weak=False
        )
    return seen


def _close_seen(crawler: Any) -> None:
    seen = _SEEN.pop(crawler, None)
    if seen is not None:
        seen.store.close()


def crawl_id_of(crawler: Any) -> str:
    config = crawl_config(crawler.settings)
    seeds = getattr(crawler.spider, "seeds", None) or []
    return config.crawl_id or default_crawl_id(seeds)


def _build_store(crawler: Any) -> SeenStore:
    config = crawl_config(crawler.settings)
    if not config.shared_seen:
        logger.info("URL-seen filter in process memory (no NEARDUP_REDIS_URL)")
        return MemorySeenStore()
    crawl_id = crawl_id_of(crawler)
    store = RedisSeenStore.from_url(config.redis_url, crawl_id)
    size = store.size()
    logger.info(
        "URL-seen filter in Redis, crawl id %r (key %s): %d URLs already seen%s",
        crawl_id,
        store.key,
        size,
        " - resuming" if size else "",
    )
    return store


class SeenFilter:
    """Scrapy ``DUPEFILTER_CLASS`` backed by the crawl's shared seen set."""

    def __init__(self, crawler: Any, debug: bool = False) -> None:
        self.crawler = crawler
        self.debug = debug
        self._logged = False

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        return cls(crawler, crawler.settings.getbool("DUPEFILTER_DEBUG"))

    def open(self) -> None:
        seen_for(self.crawler)  # connect early: a bad NEARDUP_REDIS_URL fails at start-up

    def close(self, reason: str) -> None:
        pass  # the store outlives the scheduler: the extension counts suppressed links after

    def request_seen(self, request: Any) -> bool:
        return seen_for(self.crawler).request_seen(request.url, request.method, request.body)

    def log(self, request: Any, spider: Any) -> None:
        if self.debug or not self._logged:
            logger.debug("filtered already-seen request %s", request)
            self._logged = not self.debug
        self.crawler.stats.inc_value("dupefilter/filtered")
