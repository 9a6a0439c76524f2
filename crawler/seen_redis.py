"""The crawl's URL-seen set in Redis (:class:`RedisSeenStore`): one set per crawl with its
in-flight and wanted sets, on one server or a Redis Cluster. What the sets mean, and the
:class:`~crawler.seen.SeenStore` interface it implements, are in :mod:`crawler.seen`; this
module is only the adapter: its round trips (its Lua scripts are in
:mod:`crawler.seen_redis_lua`). The contract suite ``tests/contract/test_seen_store_contract.py``
runs on it and on the memory store alike. A claim or release sent twice (its reply lost) runs
once: see :mod:`crawler.redis_replies`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawler.redis_replies import MAY_HAVE_RUN, SCRIPT_CHUNK, Replies
from crawler.seen import legacy_seen_key, seen_key
from crawler.seen_redis_lua import (
    ADD_SCRIPT,
    CLAIM_SCRIPT,
    MOVE_LEGACY_SCRIPT,
    RELEASE_UNWANTED_SCRIPT,
    REMOVE_SCRIPT,
)
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    RedisSecurity,
    check_binary,
    connect,
    describe,
    translated,
)
from dedup_worker.errors import NeardupError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

logger = logging.getLogger(__name__)

#: Fingerprints per SMISMEMBER: bounded replies, bounded stalls of the server.
_CONTAINS_CHUNK = 10_000
#: Claiming calls that raised kept for a resend at most (past it the oldest is given up).
_UNANSWERED_LIMIT = 64


@dataclass(frozen=True)
class _Unanswered:
    """A claiming call whose connection failed: the server may have run it. Sent again,
    exactly (same reply key), when one of its fingerprints is asked again."""

    script: Any
    key: str
    keys: list[str]
    args: list[Any]
    fingerprints: list[bytes]


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
        self._add = client.register_script(ADD_SCRIPT)
        self._release_unwanted = client.register_script(RELEASE_UNWANTED_SCRIPT)
        self._remove = client.register_script(REMOVE_SCRIPT)
        self._crawl_id = crawl_id
        self._replies = Replies(crawl_id)
        self._unanswered: list[_Unanswered] = []
        self._journal: str | None = None
        self._ended_journal: str | None = None

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

    def add_many(
        self, fingerprints: Sequence[bytes], requests: Mapping[bytes, bytes] | None = None
    ) -> list[bool]:
        if not fingerprints:
            return []
        if self._journal is None:
            return self._claiming(self._add, [self.key], [], [], fingerprints, False)
        journaled = requests or {}
        return self._claiming(
            self._add, [self.key, self._journal], [], [], fingerprints, False,
            lambda fresh: [journaled.get(fp, b"") for fp in fresh],
        )  # fmt: skip

    def journal(self, key: str) -> None:
        """Journal from now on, in the hash ``key``, each request this process claims with
        :meth:`claim_many` until it goes out (a crawl takes a killed process's journal over)."""
        self._journal = key

    def end_journal(self, kept: bool = False) -> None:
        """This process left the crawl with nothing owed: no more journal, and the one a
        claim sent again as the store closes may write is deleted then; or the journal is
        ``kept`` for a ``JOBDIR`` resume, and stays."""
        ended, self._journal = self._journal, None
        self._ended_journal = None if kept else ended

    def claim_many(
        self,
        fingerprints: Sequence[bytes],
        done: Sequence[bytes],
        requests: Mapping[bytes, bytes] | None = None,
        settled: Sequence[bytes] = (),
    ) -> list[bool]:
        if self._journal is None:
            if not fingerprints and not done:
                return []
            head = [len(done), *done]
            return self._claiming(self._claim, self._keys, head, [0], fingerprints, bool(done))
        if not fingerprints and not done and not settled:
            return []
        keys = [*self._keys, self._journal]
        journaled = requests or {}
        return self._claiming(
            self._claim, keys, [len(done), len(settled), *done, *settled], [0, 0], fingerprints,
            bool(done or settled), lambda fresh: [journaled.get(fp, b"") for fp in fresh],
        )  # fmt: skip

    def _claiming(
        self,
        script: Any,
        keys: list[str],
        head: list[Any],
        rest_head: list[Any],
        fingerprints: Sequence[bytes],
        reports: bool,
        tail: Callable[[list[bytes]], list[bytes]] | None = None,
    ) -> list[bool]:
        """Per fingerprint, whether this process claimed it. ``head``: the script's arguments
        before the fingerprints (``rest_head`` for the calls after the first: the fingerprints
        go ``SCRIPT_CHUNK`` a call), ``tail`` (of the fingerprints sent) those after them;
        ``reports``: the call has reports to make even with no fingerprint.

        A call whose connection failed may have run. When one of its fingerprints is asked
        again (the link scheduler claims a failed poll's links at the next poll; a later link
        to the URL), the call is sent again first, exactly: its reply (the first run's, or
        this run's) answers for them. Asked anew, a URL it had claimed answered "claimed
        elsewhere", and nobody fetched it. What it claimed that is not asked again is
        un-claimed, for whichever link comes next."""
        with translated(self.url):
            earlier, resent = self._resend(set(fingerprints))
            fresh = [fp for fp in fingerprints if fp not in earlier]
            sent = []
            for lo in range(0, len(fresh), SCRIPT_CHUNK) if fresh else [0] if reports else []:
                part = fresh[lo : lo + SCRIPT_CHUNK]
                after = tail(part) if tail is not None else []
                args = [*(head if lo == 0 else rest_head), *part, *after]
                sent.append((args, part))
            replies_sent = self._send(script, keys, sent)
            self._settle(resent, set(fingerprints))
        replies = iter(replies_sent)
        from_earlier = set(earlier)
        # A fingerprint listed twice is claimed the first time only (as SADD answers).
        return [
            earlier.pop(fp, False) if fp in from_earlier else bool(next(replies))
            for fp in fingerprints
        ]

    def _resend(
        self, asked: set[bytes], every: bool = False
    ) -> tuple[dict[bytes, bool], list[tuple[_Unanswered, list[Any]]]]:
        """Send again the failed calls that claimed one of ``asked`` (a filter claim and an
        outlink claim both answer whether this process claimed the URL), or ``every`` one:
        their answers for ``asked``, and the calls with their replies. They stay kept (and
        their replies in Redis) until the ask is answered (``_settle``): if it fails, the
        next ask sends them again and gets the same replies."""
        answers: dict[bytes, bool] = {}
        resent = []
        for call in self._unanswered:
            if not every and asked.isdisjoint(call.fingerprints):
                continue
            replies = list(self._replies.call(call.script, call.key, call.keys, call.args))
            resent.append((call, replies))
            for fp, claimed in zip(call.fingerprints, replies, strict=True):
                if fp in asked:
                    answers[fp] = answers.get(fp, False) or bool(claimed)
        return answers, resent

    def _settle(self, resent: list[tuple[_Unanswered, list[Any]]], asked: set[bytes]) -> None:
        """The calls sent again are answered: forgotten, and what they claimed that nobody
        asked for again is un-claimed (for whichever link comes next)."""
        for call, replies in resent:
            self._unanswered.remove(call)
            self._replies.answered(call.key)
            unasked = [fp for fp, claimed in zip(call.fingerprints, replies, strict=True)
                       if claimed and fp not in asked]  # fmt: skip
            try:
                for fp in unasked:
                    self.remove(fp)
            except NeardupError as exc:  # the ask is answered; these only stay claimed
                logger.warning("could not un-claim %d URLs nobody asked for: %s", len(unasked), exc)

    def _send(
        self, script: Any, keys: list[str], calls: list[tuple[list[Any], list[bytes]]]
    ) -> list[Any]:
        """Run ``script`` once per (arguments, fingerprints) of ``calls``, in order; the
        replies, concatenated. If one raises, the calls that ran are kept with it, their
        replies in Redis: a fingerprint of theirs asked again gets their answer, as one of the
        failed call's does (:meth:`_resend`)."""
        done: list[_Unanswered] = []
        replies: list[Any] = []
        try:
            for args, fingerprints in calls:
                call = _Unanswered(script, self._replies.new_key(), keys, args, fingerprints)
                try:
                    replies += self._replies.call(script, call.key, keys, args)
                except MAY_HAVE_RUN:
                    done.append(call)
                    raise
                done.append(call)
        except Exception:
            # Give up older calls beyond the limit, never one of this claim's: given up, a call
            # that ran leaves its links claimed with nobody to fetch them.
            excess = min(len(self._unanswered) + len(done) - _UNANSWERED_LIMIT,
                          len(self._unanswered))  # fmt: skip
            for call in self._unanswered[: max(excess, 0)]:
                self._replies.answered(call.key)
            self._unanswered = self._unanswered[max(excess, 0) :] + done
            raise
        self._replies.answered(*(call.key for call in done))
        return replies

    def contains_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        found: list[bool] = []
        with translated(self.url):
            for start in range(0, len(fingerprints), _CONTAINS_CHUNK):
                chunk = list(fingerprints[start : start + _CONTAINS_CHUNK])
                found.extend(bool(m) for m in self._client.smismember(self.key, chunk))
        return found

    def remove(self, fingerprint: bytes) -> None:
        key = self._replies.new_key()
        with translated(self.url):
            self._replies.call(self._remove, key, self._journaled_keys(), [fingerprint])
        self._replies.answered(key)

    def _journaled_keys(self) -> list[str]:
        return [*self._keys, self._journal] if self._journal is not None else self._keys

    def release_unwanted(self, fingerprint: bytes) -> bool:
        key = self._replies.new_key()  # a resend by the client library runs it once
        with translated(self.url):
            script = self._release_unwanted
            released = self._replies.call(script, key, self._journaled_keys(), [fingerprint])
        self._replies.answered(key)
        return bool(released)

    def size(self) -> int:
        with translated(self.url):
            return int(self._client.scard(self.key))

    def in_flight(self) -> tuple[int, int]:
        """(outlinks claimed and not yet sent, those of them wanted elsewhere)."""
        with translated(self.url):
            return int(self._client.scard(self._keys[1])), int(self._client.scard(self._keys[2]))

    def close(self) -> None:
        """Calls whose connection failed and that nobody asked for again are sent again, and
        what they claimed is un-claimed: nobody here will fetch it."""
        try:
            with translated(self.url):
                self._settle(self._resend(set(), every=True)[1], set())
                if self._ended_journal is not None:
                    self._client.delete(self._ended_journal)
        except NeardupError as exc:
            logger.warning("claims of %d failed calls may stay: %s", len(self._unanswered), exc)
        finally:
            self._client.close()
