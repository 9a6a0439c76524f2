"""The URL-seen filter: one set of claimed URLs per crawl, shared through Redis.

A URL is *claimed* the first time any crawler process schedules it; every later attempt, in this
process or another one sharing the crawl id, sees it as seen. Members are 16-byte BLAKE2b digests
of the canonical URL (stable across processes and releases, unlike ``hash()``; 2**-64 collision
odds at a billion URLs), kept in one Redis set per crawl, ``neardup:crawl:<id>:seen``. Stopping
a crawl leaves the set in place, so a resumed crawl (same ``NEARDUP_CRAWL_ID``) skips what it
already fetched. Without Redis the set lives in process memory.

A decision's outlinks are claimed *in flight* (also in ``neardup:crawl:<id>:inflight``) until
the request goes out. A failed claim of a URL in flight marks it *wanted elsewhere*
(``neardup:crawl:<id>:wanted``) in the same atomic step. A process that cancels a link because
its source page was corrected to a duplicate un-claims it only when nobody else wanted it
(:meth:`CrawlSeen.release_unwanted`); otherwise it fetches it after all. Without the mark, a
page of another process that linked to the URL after the claim would lose its link: that
process had already filtered it as seen. Whichever comes first, the mark or the release, the
link is fetched once. Requests that went out leave both sets with the next claim (batched), so
they hold the crawl frontier, not the crawl.

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
from dedup_worker.adapters.redis_client import RedisSecurity, connect, describe, translated

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
    """The crawl's claimed URLs (fingerprints), and the decision outlinks still in flight.

    ``add_many``: claim; per item, whether it was new. ``claim_many``: the same for outlinks,
    which stay in flight until ``done`` reports them sent; an item already claimed and still
    in flight is marked wanted elsewhere. ``release_unwanted``: un-claim a cancelled outlink
    unless it is so marked (True if un-claimed). ``remove``: un-claim, whatever the marks."""

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]: ...
    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def remove(self, fingerprint: bytes) -> None: ...
    def release_unwanted(self, fingerprint: bytes) -> bool: ...
    def size(self) -> int: ...
    def in_flight(self) -> tuple[int, int]: ...
    def close(self) -> None: ...


class MemorySeenStore:
    """The in-process fallback: one crawler process, forgotten when it exits."""

    def __init__(self) -> None:
        self._members: set[bytes] = set()
        self._in_flight: set[bytes] = set()
        self._wanted: set[bytes] = set()

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        fresh = []
        for fp in fingerprints:
            fresh.append(fp not in self._members)
            self._members.add(fp)
        return fresh

    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]:
        self._in_flight.difference_update(done)
        self._wanted.difference_update(done)
        fresh = self.add_many(fingerprints)
        for fp, new in zip(fingerprints, fresh, strict=True):
            if new:
                self._in_flight.add(fp)
            elif fp in self._in_flight:
                self._wanted.add(fp)
        return fresh

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        return [fp in self._members for fp in fingerprints]

    def remove(self, fingerprint: bytes) -> None:
        for members in (self._members, self._in_flight, self._wanted):
            members.discard(fingerprint)

    def release_unwanted(self, fingerprint: bytes) -> bool:
        self._in_flight.discard(fingerprint)
        if fingerprint in self._wanted:
            self._wanted.discard(fingerprint)
            return False
        self._members.discard(fingerprint)
        return True

    def size(self) -> int:
        return len(self._members)

    def in_flight(self) -> tuple[int, int]:
        return len(self._in_flight), len(self._wanted)

    def close(self) -> None:
        pass


#: KEYS[1] seen set, KEYS[2] in-flight set, KEYS[3] wanted set; ARGV[1] = n, ARGV[2..n+1] =
#: fingerprints of outlinks that went out (they leave KEYS[2] and KEYS[3]), the rest =
#: fingerprints to claim. Per claim: 1 if this call claimed it (now in flight), else 0, and
#: the fingerprint is marked wanted if it is still in flight.
CLAIM_SCRIPT = """
local done = tonumber(ARGV[1])
for i = 2, done + 1 do
  redis.call('SREM', KEYS[2], ARGV[i])
  redis.call('SREM', KEYS[3], ARGV[i])
end
local out = {}
for i = done + 2, #ARGV do
  local fp = ARGV[i]
  if redis.call('SADD', KEYS[1], fp) == 1 then
    redis.call('SADD', KEYS[2], fp)
    out[#out + 1] = 1
  else
    if redis.call('SISMEMBER', KEYS[2], fp) == 1 then
      redis.call('SADD', KEYS[3], fp)
    end
    out[#out + 1] = 0
  end
end
return out
"""

#: KEYS as CLAIM_SCRIPT; ARGV[1] = a cancelled outlink's fingerprint. It leaves the in-flight
#: set; if it was wanted elsewhere it stays claimed (0: fetch it), else it is un-claimed (1).
RELEASE_UNWANTED_SCRIPT = """
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SREM', KEYS[3], ARGV[1]) == 1 then
  return 0
end
redis.call('SREM', KEYS[1], ARGV[1])
return 1
"""


class RedisSeenStore:
    """One Redis set per crawl; SADD's reply says atomically who claimed a URL first."""

    def __init__(self, client: Any, key: str) -> None:
        self._client = client
        self.key = key
        self._keys = [key, f"{key}:inflight", f"{key}:wanted"]
        self._claim = client.register_script(CLAIM_SCRIPT)
        self._release_unwanted = client.register_script(RELEASE_UNWANTED_SCRIPT)

    @classmethod
    def from_url(cls, url: str, crawl_id: str, secured: RedisSecurity | None = None) -> Self:
        """A store on ``url`` with the credentials and TLS of ``secured``, checked now: wrong
        credentials or TLS settings stop the crawl at start-up, naming the settings."""
        client = connect(url, secured=secured, fail_fast=False)
        with translated(describe(client)):
            client.ping()
        return cls(client, seen_key(crawl_id))

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        if not fingerprints:
            return []
        # One pipelined round trip; a multi-member SADD would only report how many were new.
        pipe = self._client.pipeline(transaction=False)
        for fp in fingerprints:
            pipe.sadd(self.key, fp)
        return [bool(added) for added in pipe.execute()]

    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]:
        if not fingerprints and not done:
            return []
        args = [len(done), *done, *fingerprints]
        return [bool(new) for new in self._claim(keys=self._keys, args=args)]

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        found: list[bool] = []
        for start in range(0, len(fingerprints), 10_000):  # bounded replies, bounded stalls
            chunk = list(fingerprints[start : start + 10_000])
            found.extend(bool(m) for m in self._client.smismember(self.key, chunk))
        return found

    def remove(self, fingerprint: bytes) -> None:
        pipe = self._client.pipeline(transaction=False)
        for key in self._keys:
            pipe.srem(key, fingerprint)
        pipe.execute()

    def release_unwanted(self, fingerprint: bytes) -> bool:
        return bool(self._release_unwanted(keys=self._keys, args=[fingerprint]))

    def size(self) -> int:
        return int(self._client.scard(self.key))

    def in_flight(self) -> tuple[int, int]:
        """(outlinks claimed and not yet sent, those of them wanted elsewhere)."""
        return int(self._client.scard(self._keys[1])), int(self._client.scard(self._keys[2]))

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
        self._sent: list[bytes] = []  # outlinks that went out, reported with the next claim

    def claim_many(self, urls: Sequence[str]) -> list[bool]:
        """Claim URLs for this process; True where nobody had claimed the URL before."""
        fps = [url_fingerprint(url) for url in urls]
        unknown = list(dict.fromkeys(fp for fp in fps if fp not in self._known))
        sent, self._sent = self._sent, []
        answers = dict(zip(unknown, self.store.claim_many(unknown, sent), strict=True))
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

    def sent(self, url: str) -> None:
        """A claimed outlink went out: it stops being in flight (with the next claim)."""
        self._sent.append(url_fingerprint(url))

    def flush(self) -> None:
        """Report the outlinks sent since the last claim (at the end of the crawl)."""
        if self._sent:
            self.claim_many([])

    def release(self, url: str) -> None:
        """Un-claim a URL that was claimed but will not be fetched, so others may schedule it."""
        fp = self._forget(url)
        self.store.remove(fp)

    def release_unwanted(self, url: str) -> bool:
        """Un-claim a cancelled link unless another page wanted it after the claim (then it
        must be fetched after all: that page's process filtered it as seen). True if released."""
        fp = self._forget(url)
        return self.store.release_unwanted(fp)

    def _forget(self, url: str) -> bytes:
        fp = url_fingerprint(url)
        self._preclaimed.discard(fp)
        self._known.discard(fp)
        return fp


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
        try:
            seen.flush()
        finally:
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
    store = RedisSeenStore.from_url(config.redis_url, crawl_id, config.redis_security)
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
