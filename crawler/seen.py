"""The crawl's URL-seen set: one claim per URL across every crawler process of a crawl.

A URL is claimed the first time any crawler process schedules it; every later attempt, in this
process or another one sharing the crawl id, sees it as seen. Members are 16-byte BLAKE2b digests
of the canonical URL (stable across processes and releases, unlike ``hash()``; 2**-64 collision
odds at a billion URLs), kept in one Redis set per crawl, ``neardup:crawl:{<id>}:seen``. Stopping
a crawl leaves the set in place, so a resumed crawl (same ``NEARDUP_CRAWL_ID``) skips what it
already fetched. Without Redis the set lives in process memory.

A decision's outlinks are claimed *in flight* (also in ``neardup:crawl:{<id>}:seen:inflight``)
until the request goes out. A failed claim of a URL in flight marks it *wanted elsewhere*
(``neardup:crawl:{<id>}:seen:wanted``) in the same atomic step. A process that cancels a link
because its source page was corrected to a duplicate un-claims it only when nobody else wanted it
(:meth:`CrawlSeen.release_unwanted`); otherwise it fetches it after all. Without the mark, a
page of another process that linked to the URL after the claim would lose its link: that
process had already filtered it as seen. Whichever comes first, the mark or the release, the
link is fetched once. Requests that went out leave both sets with the next claim (batched), so
they hold the crawl frontier, not the crawl.

The three keys share the hash tag ``{<crawl id>}``: one Redis Cluster slot per crawl, so each
claim (a Lua script over the three sets) is one atomic call on a cluster too. Errors come out as
the project's (:func:`~dedup_worker.adapters.redis_client.translated`). No Scrapy here: the
dupefilter (:mod:`crawler.dupefilter`) and the link scheduler (:mod:`crawler.links`) use
:class:`CrawlSeen` through the crawler's :class:`~crawler.session.NeardupSession`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import TYPE_CHECKING, Any, Protocol, Self

from crawler.urls import canonicalize_url
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    RedisSecurity,
    check_binary,
    connect,
    describe,
    translated,
)
from dedup_worker.errors import ConfigError

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
    """The crawl's seen set; its in-flight and wanted sets add ``:inflight`` / ``:wanted``."""
    check_crawl_id(crawl_id)
    return f"neardup:crawl:{{{crawl_id}}}:seen"


def legacy_seen_key(crawl_id: str) -> str:
    """The key of releases before the hash tag (single Redis only; moved on first open)."""
    return f"neardup:crawl:{crawl_id}:seen"


def check_crawl_id(crawl_id: str) -> None:
    """A crawl id names Redis keys: braces would move its hash tag (and its cluster slot)."""
    if not crawl_id or "{" in crawl_id or "}" in crawl_id:
        raise ConfigError(
            f"NEARDUP_CRAWL_ID {crawl_id!r} cannot name a crawl's Redis keys: "
            "use a non-empty id without '{' or '}'"
        )


class SeenStore(Protocol):
    """The crawl's claimed URLs (fingerprints), and the decision outlinks still in flight.

    ``add_many``: claim; per item, whether it was new. ``claim_many``: the same for outlinks,
    which stay in flight until ``done`` reports them sent; an item already claimed and still
    in flight is marked wanted elsewhere. ``release_unwanted``: un-claim a cancelled outlink
    unless it is so marked (True if un-claimed). ``remove``: un-claim, whatever the marks.
    Every method is atomic with respect to the others, across every process sharing the store."""

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]: ...
    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]: ...
    def remove(self, fingerprint: bytes) -> None: ...
    def release_unwanted(self, fingerprint: bytes) -> bool: ...
    def size(self) -> int: ...
    def in_flight(self) -> tuple[int, int]: ...
    def close(self) -> None: ...


class MemorySeenStore:
    """The in-process fallback: one crawler process, forgotten when it exits. Thread-safe, so
    it keeps the same contract as the Redis store (tests share one between two "processes")."""

    def __init__(self) -> None:
        self._members: set[bytes] = set()
        self._in_flight: set[bytes] = set()
        self._wanted: set[bytes] = set()
        self._lock = threading.RLock()

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        with self._lock:
            fresh = []
            for fp in fingerprints:
                fresh.append(fp not in self._members)
                self._members.add(fp)
            return fresh

    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]:
        with self._lock:
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
        with self._lock:
            return [fp in self._members for fp in fingerprints]

    def remove(self, fingerprint: bytes) -> None:
        with self._lock:
            for members in (self._members, self._in_flight, self._wanted):
                members.discard(fingerprint)

    def release_unwanted(self, fingerprint: bytes) -> bool:
        with self._lock:
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


#: KEYS[1] seen set, KEYS[2] in-flight set, KEYS[3] wanted set (one hash tag: one slot);
#: ARGV[1] = n, ARGV[2..n+1] = fingerprints of outlinks that went out (they leave KEYS[2] and
#: KEYS[3]), the rest = fingerprints to claim. Per claim: 1 if this call claimed it (now in
#: flight), else 0, and the fingerprint is marked wanted if it is still in flight.
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

#: KEYS[1..3] the seen, in-flight and wanted sets of a crawl under the untagged names of earlier
#: releases, KEYS[4..6] the same sets under their tagged names; no ARGV. Renames each legacy
#: set whose tagged name is free, so a crawl started before the upgrade resumes with its set.
#: Single Redis only (the names span slots; the cluster never had the untagged layout working).
#: Returns how many sets were moved.
MOVE_LEGACY_SCRIPT = """
local moved = 0
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 and redis.call('EXISTS', KEYS[i + 3]) == 0 then
    redis.call('RENAME', KEYS[i], KEYS[i + 3])
    moved = moved + 1
  end
end
return moved
"""

#: Fingerprints per SMISMEMBER: bounded replies, bounded stalls of the server.
_CONTAINS_CHUNK = 10_000


class RedisSeenStore:
    """One Redis set per crawl (and its in-flight and wanted sets), on one server or a Redis
    Cluster; SADD's reply says atomically who claimed a URL first."""

    def __init__(self, client: Client, crawl_id: str) -> None:
        check_binary(client)
        self._client = client
        self.key = seen_key(crawl_id)
        self.url = describe(client)
        self._keys = [self.key, f"{self.key}:inflight", f"{self.key}:wanted"]
        self._claim = client.register_script(CLAIM_SCRIPT)
        self._release_unwanted = client.register_script(RELEASE_UNWANTED_SCRIPT)
        self._crawl_id = crawl_id

    @classmethod
    def from_url(
        cls,
        url: str,
        crawl_id: str,
        secured: RedisSecurity | None = None,
        *,
        cluster: bool = False,
    ) -> Self:
        """A store on ``url`` (a cluster node with ``cluster``) with the credentials and TLS of
        ``secured``, checked now: wrong credentials or TLS settings stop the crawl at start-up,
        naming the settings. A single server's legacy (untagged) sets of the crawl are moved."""
        client = connect(url, cluster=cluster, secured=secured, fail_fast=False)
        with translated(describe(client)):
            client.ping()
        store = cls(client, crawl_id)
        if not cluster:
            try:
                store.move_legacy_keys()
            except BackendError as exc:  # e.g. an ACL user without RENAME: not worth stopping
                logger.warning(
                    "could not look for seen sets of crawl %r written by earlier releases (%s); "
                    "if there are any, this crawl does not resume from them",
                    crawl_id,
                    exc,
                )
        return store

    def move_legacy_keys(self) -> int:
        legacy = legacy_seen_key(self._crawl_id)
        keys = [legacy, f"{legacy}:inflight", f"{legacy}:wanted", *self._keys]
        with translated(self.url):
            moved = int(self._client.eval(MOVE_LEGACY_SCRIPT, len(keys), *keys))
        if moved:
            logger.info("moved %d seen sets of crawl %r to %s", moved, self._crawl_id, self.key)
        return moved

    def add_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        if not fingerprints:
            return []
        # One pipelined round trip; a multi-member SADD would only report how many were new.
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            for fp in fingerprints:
                pipe.sadd(self.key, fp)
            return [bool(added) for added in pipe.execute()]

    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]:
        if not fingerprints and not done:
            return []
        args: list[bytes | int] = [len(done), *done, *fingerprints]
        with translated(self.url):
            return [bool(new) for new in self._claim(keys=self._keys, args=args)]

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        found: list[bool] = []
        with translated(self.url):
            for start in range(0, len(fingerprints), _CONTAINS_CHUNK):
                chunk = list(fingerprints[start : start + _CONTAINS_CHUNK])
                found.extend(bool(m) for m in self._client.smismember(self.key, chunk))
        return found

    def remove(self, fingerprint: bytes) -> None:
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            for key in self._keys:
                pipe.srem(key, fingerprint)
            pipe.execute()

    def release_unwanted(self, fingerprint: bytes) -> bool:
        with translated(self.url):
            return bool(self._release_unwanted(keys=self._keys, args=[fingerprint]))

    def size(self) -> int:
        with translated(self.url):
            return int(self._client.scard(self.key))

    def in_flight(self) -> tuple[int, int]:
        """(outlinks claimed and not yet sent, those of them wanted elsewhere)."""
        with translated(self.url):
            return int(self._client.scard(self._keys[1])), int(self._client.scard(self._keys[2]))

    def close(self) -> None:
        self._client.close()


class CrawlSeen:
    """The crawl's seen set as this process uses it (shared by the dupefilter and the link
    scheduler through the crawler's session).

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
        """Claim GET URLs for this process; True where nobody had claimed the URL before."""
        return self.claim([url_fingerprint(url) for url in urls])

    def claim(self, fps: Sequence[bytes]) -> list[bool]:
        """Claim request fingerprints (:func:`url_fingerprint`); as :meth:`claim_many`."""
        unknown = list(dict.fromkeys(fp for fp in fps if fp not in self._known))
        sent, self._sent = self._sent, []
        answers = dict(zip(unknown, self.store.claim_many(unknown, sent), strict=True))
        self._preclaimed.update(fp for fp, new in answers.items() if new)
        self._remember(answers)
        # A URL listed twice is fresh only the first time.
        return [answers.pop(fp, False) for fp in fps]

    def _remember(self, fps: Iterable[bytes]) -> None:
        if len(self._known) > self._known_limit:
            self._known.clear()  # a cache: forgetting only costs round trips
        self._known.update(fps)

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        return self.store.contains_many([url_fingerprint(url) for url in urls])

    def known_claimed(self, url: str) -> bool:
        """True if this process learnt from a claim that the URL is claimed (no round trip;
        False says nothing)."""
        return url_fingerprint(url) in self._known

    def request_seen(self, url: str, method: str = "GET", body: bytes = b"") -> bool:
        fp = url_fingerprint(url, method, body)
        if fp in self._preclaimed:
            self._preclaimed.discard(fp)
            return False
        return not self.store.add_many([fp])[0]

    def sent(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """A claimed outlink went out: it stops being in flight (with the next claim)."""
        self._sent.append(url_fingerprint(url, method, body))

    def flush(self) -> None:
        """Report the outlinks sent since the last claim (at the end of the crawl)."""
        if self._sent:
            self.claim([])

    def release(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """Un-claim a URL that was claimed but will not be fetched, so others may schedule it."""
        self.store.remove(self._forget(url_fingerprint(url, method, body)))

    def release_unwanted(self, url: str, method: str = "GET", body: bytes = b"") -> bool:
        """Un-claim a cancelled link unless another page wanted it after the claim (then it
        must be fetched after all: that page's process filtered it as seen). True if released."""
        return self.store.release_unwanted(self._forget(url_fingerprint(url, method, body)))

    def _forget(self, fp: bytes) -> bytes:
        self._preclaimed.discard(fp)
        self._known.discard(fp)
        return fp

    def close(self) -> None:
        """Report what went out, then close the store (at the end of the crawl)."""
        try:
            self.flush()
        finally:
            self.store.close()


def __getattr__(name: str) -> Any:
    """``crawler.seen.SeenFilter``, the dupefilter's path before it got a module of its own,
    keeps working for settings written against it."""
    if name == "SeenFilter":
        from crawler.dupefilter import SeenFilter

        return SeenFilter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
