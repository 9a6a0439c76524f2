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
claim (a Lua script over the three sets) is one atomic call on a cluster too. The Redis store is
:class:`crawler.seen_redis.RedisSeenStore`; its errors come out as the project's
(:func:`~dedup_worker.adapters.redis_client.translated`). No Scrapy or Redis here: the
dupefilter (:mod:`crawler.dupefilter`) and the link scheduler (:mod:`crawler.links`) use
:class:`CrawlSeen` through the crawler's :class:`~crawler.session.NeardupSession`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from crawler.urls import DEFAULT_DROP_PARAMS, canonicalize_url
from dedup_worker.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

FINGERPRINT_BYTES = 16

#: ``Request.meta`` flag of a request this crawl claimed already: the seen filter lets it by
#: once and pops the flag (:func:`past_the_filter`).
CLAIMED_META = "neardup_claimed"


def past_the_filter(request: Any, **changes: Any) -> Any:
    """A copy of ``request`` (claimed by this crawl already) that the seen filter lets by once.
    The filter pops the flag as the scheduler asks, so a redirect of it (Scrapy's redirect
    copies the meta) is filtered as any request is: with ``dont_filter=True`` instead, every
    redirect of a re-sent request went by unclaimed, and its target could be fetched twice."""
    meta = {**changes.pop("meta", request.meta), CLAIMED_META: True}
    return request.replace(meta=meta, **changes)


def url_fingerprint(
    url: str,
    method: str = "GET",
    body: bytes = b"",
    drop_params: Iterable[str] = DEFAULT_DROP_PARAMS,
) -> bytes:
    """Stable fingerprint of a request: its canonical URL (and method and body unless GET),
    canonical under the crawl's ``NEARDUP_DROP_PARAMS`` as its outlinks are: two links the
    crawl tells apart (a parameter it keeps) must not share a claim."""
    digest = hashlib.blake2b(digest_size=FINGERPRINT_BYTES)
    digest.update(canonicalize_url(url, drop_params).encode("utf-8"))
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
    Every method is atomic with respect to the others, across every process sharing the store.

    ``claim_many``'s ``requests`` (fingerprint -> encoded request): what a store that journals
    (Redis, once told where: ``RedisSeenStore.journal``) keeps for each outlink this call
    claims, until ``settled`` reports it (its page decided: ``CrawlSeen.settle``); a crawl
    takes a killed process's journal over (:mod:`crawler.sharing`). A store of one process
    ignores both."""

    def add_many(
        self, fingerprints: Sequence[bytes], requests: Mapping[bytes, bytes] | None = None
    ) -> list[bool]: ...
    def claim_many(
        self,
        fingerprints: Sequence[bytes],
        done: Sequence[bytes],
        requests: Mapping[bytes, bytes] | None = None,
        settled: Sequence[bytes] = (),
    ) -> list[bool]: ...
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

    def add_many(
        self, fingerprints: Sequence[bytes], requests: Mapping[bytes, bytes] | None = None
    ) -> list[bool]:
        with self._lock:
            fresh = []
            for fp in fingerprints:
                fresh.append(fp not in self._members)
                self._members.add(fp)
            return fresh

    def claim_many(
        self,
        fingerprints: Sequence[bytes],
        done: Sequence[bytes],
        requests: Mapping[bytes, bytes] | None = None,
        settled: Sequence[bytes] = (),
    ) -> list[bool]:
        with self._lock:  # one process: nobody to take a journal over
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


class CrawlSeen:
    """The crawl's seen set as this process uses it (shared by the dupefilter and the link
    scheduler through the crawler's session).

    ``_known`` caches fingerprints known to be claimed: a site's navigation links repeat on
    every page, and asking Redis about them again and again would cost most of the round trips.
    Claims are never undone except by :meth:`release`, which also drops the cache entry, so a
    cached "seen" stays true (a release by another process is the one thing it misses).
    """

    def __init__(
        self,
        store: SeenStore,
        known_limit: int = 1_000_000,
        drop_params: Iterable[str] = DEFAULT_DROP_PARAMS,
    ) -> None:
        self.store = store
        self.drop_params = frozenset(drop_params)
        self._preclaimed: set[bytes] = set()
        self._known: set[bytes] = set()
        self._known_limit = known_limit
        self._sent: list[bytes] = []  # outlinks that went out, reported with the next claim
        self._settled: list[bytes] = []  # requests out of the journal, reported likewise

    def fingerprint(self, url: str, method: str = "GET", body: bytes = b"") -> bytes:
        """:func:`url_fingerprint` under this crawl's ``NEARDUP_DROP_PARAMS``."""
        return url_fingerprint(url, method, body, self.drop_params)

    def claim_many(self, urls: Sequence[str]) -> list[bool]:
        """Claim GET URLs for this process; True where nobody had claimed the URL before."""
        return self.claim([self.fingerprint(url) for url in urls])

    def claim(
        self, fps: Sequence[bytes], requests: Mapping[bytes, bytes] | None = None
    ) -> list[bool]:
        """Claim request fingerprints (:func:`url_fingerprint`); as :meth:`claim_many`.
        ``requests``: the encoded request of a fingerprint, for a store that journals them."""
        unknown = list(dict.fromkeys(fp for fp in fps if fp not in self._known))
        sent, self._sent = self._sent, []
        settled, self._settled = self._settled, []
        try:
            claimed = self.store.claim_many(unknown, sent, requests, settled)
            answers = dict(zip(unknown, claimed, strict=True))
        except Exception:
            self._sent = sent + self._sent  # reported with the next claim (removing is idempotent)
            self._settled = settled + self._settled
            raise
        self._preclaimed.update(fp for fp, new in answers.items() if new)
        self._remember(answers)
        # A URL listed twice is fresh only the first time.
        return [answers.pop(fp, False) for fp in fps]

    def _remember(self, fps: Iterable[bytes]) -> None:
        if len(self._known) > self._known_limit:
            self._known.clear()  # a cache: forgetting only costs round trips
        self._known.update(fps)

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        return self.store.contains_many([self.fingerprint(url) for url in urls])

    def knows(self, fp: bytes) -> bool:
        """Whether a claim of ``fp`` is answered here, without asking the store."""
        return fp in self._known

    def known_claimed(self, url: str) -> bool:
        """True if this process learnt from a claim that the URL is claimed (no round trip;
        False says nothing)."""
        return self.fingerprint(url) in self._known

    def request_seen(
        self, url: str, method: str = "GET", body: bytes = b"", journaled: bytes | None = None
    ) -> bool:
        """Whether another request claimed the URL first; ``journaled``: the request, for a
        store that journals what this process claims (a seed, a redirect's target)."""
        fp = self.fingerprint(url, method, body)
        if fp in self._preclaimed:
            self._preclaimed.discard(fp)
            return False
        return not self.store.add_many([fp], {fp: journaled} if journaled else None)[0]

    def used(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """The claim of a request that leaves by another way than this process's filter (past
        it, or handed to a peer): its one pass through the filter is spent, or a later request
        for the URL would pass as well."""
        self._preclaimed.discard(self.fingerprint(url, method, body))

    def sent(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """A claimed outlink went out: it stops being in flight (with the next claim)."""
        self._sent.append(self.fingerprint(url, method, body))

    def settle(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """A request sent is settled: its page's decision came (its outlinks are claimed with
        the same call that reports this), or it will never be a page. It leaves the journal
        (with the next claim), where it stayed after it went out: a process killed before the
        decision had those outlinks in memory only, and the page is fetched again."""
        self._settled.append(self.fingerprint(url, method, body))

    def unsettle(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """A request settled and not reported yet goes out after all (fetched back): its
        settling must not take out the journal entry written for it again."""
        fp = self.fingerprint(url, method, body)
        self._settled = [settled for settled in self._settled if settled != fp]

    def flush(self) -> None:
        """Report the outlinks sent and requests settled since the last claim (as the spider
        goes idle, and at the end of the crawl)."""
        if self._sent or self._settled:
            self.claim([])

    def release(self, url: str, method: str = "GET", body: bytes = b"") -> None:
        """Un-claim a URL that was claimed but will not be fetched, so others may schedule it."""
        self.store.remove(self._forget(self.fingerprint(url, method, body)))

    def release_unwanted(self, url: str, method: str = "GET", body: bytes = b"") -> bool:
        """Un-claim a cancelled link unless another page wanted it after the claim (then it
        must be fetched after all: that page's process filtered it as seen). True if released."""
        return self.store.release_unwanted(self._forget(self.fingerprint(url, method, body)))

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
