"""The crawl's URL-seen set in Redis (:class:`RedisSeenStore`): one set per crawl with its
in-flight and wanted sets, on one server or a Redis Cluster. What the sets mean, and the
:class:`~crawler.seen.SeenStore` interface it implements, are in :mod:`crawler.seen`; this
module is only the adapter (its Lua scripts, its round trips). The contract suite
``tests/contract/test_seen_store_contract.py`` runs on it and on the memory store alike. A
claim or release sent twice (its reply lost) runs once: see :mod:`crawler.redis_replies`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from crawler.redis_replies import REPLAY_PRELUDE, Replies
from crawler.seen import legacy_seen_key, seen_key
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    RedisSecurity,
    check_binary,
    connect,
    describe,
    translated,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = logging.getLogger(__name__)

#: Claim outlinks (after :data:`~crawler.redis_replies.REPLAY_PRELUDE`: KEYS[1], ARGV[1..2]).
#:
#: KEYS[2]   the seen set
#: KEYS[3]   the in-flight set
#: KEYS[4]   the wanted set (all three share one hash tag: one slot)
#: ARGV[3]   n
#: ARGV[4..n+3]  fingerprints of outlinks that went out (they leave KEYS[3] and KEYS[4])
#: ARGV[n+4..]   fingerprints to claim
#:
#: Returns per claim 1 if this call claimed it (now in flight), else 0; the fingerprint is
#: marked wanted if it is still in flight.
CLAIM_SCRIPT = (
    REPLAY_PRELUDE
    + """
local seen, inflight, wanted = KEYS[2], KEYS[3], KEYS[4]
local done = tonumber(ARGV[3])
for i = 4, done + 3 do
  redis.call('SREM', inflight, ARGV[i])
  redis.call('SREM', wanted, ARGV[i])
end
local out = {}
for i = done + 4, #ARGV do
  local fp = ARGV[i]
  if redis.call('SADD', seen, fp) == 1 then
    redis.call('SADD', inflight, fp)
    out[#out + 1] = 1
  else
    if redis.call('SISMEMBER', inflight, fp) == 1 then
      redis.call('SADD', wanted, fp)
    end
    out[#out + 1] = 0
  end
end
return answer(out)
"""
)

#: Claim fingerprints (after the prelude). KEYS[2] the seen set; ARGV[3..] the fingerprints.
#: Returns per fingerprint 1 if this call added it, else 0 (one listed twice: 1, then 0).
ADD_SCRIPT = (
    REPLAY_PRELUDE
    + """
local out = {}
for i = 3, #ARGV do
  out[#out + 1] = redis.call('SADD', KEYS[2], ARGV[i])
end
return answer(out)
"""
)

#: Un-claim a cancelled outlink unless wanted (after the prelude). KEYS[2..4] as
#: CLAIM_SCRIPT's; ARGV[3] its fingerprint. It leaves the in-flight set; if it was wanted
#: elsewhere it stays claimed (0: fetch it), else it is un-claimed (1).
RELEASE_UNWANTED_SCRIPT = (
    REPLAY_PRELUDE
    + """
redis.call('SREM', KEYS[3], ARGV[3])
if redis.call('SREM', KEYS[4], ARGV[3]) == 1 then
  return answer(0)
end
redis.call('SREM', KEYS[2], ARGV[3])
return answer(1)
"""
)

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
#: Answers of calls sent again that no caller asked for yet, kept at most (a cache: past it,
#: they are forgotten, as the links of a claim given up are).
_REPLAYED_LIMIT = 100_000


@dataclass(frozen=True)
class _Unanswered:
    """A claiming call that raised: sent again, exactly (same reply key), before the next."""

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
        self._crawl_id = crawl_id
        self._replies = Replies(crawl_id)
        self._unanswered: _Unanswered | None = None
        self._replayed: dict[bytes, bool] = {}  # answers of a call sent again, not yet asked for
        self._unreleased: tuple[bytes, str] | None = None  # (fingerprint, reply key)

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
        return self._claiming(self._add, [self.key], [], fingerprints)

    def claim_many(self, fingerprints: Sequence[bytes], done: Sequence[bytes]) -> list[bool]:
        if not fingerprints and not done:
            return []
        return self._claiming(self._claim, self._keys, [len(done), *done], fingerprints)

    def _claiming(
        self, script: Any, keys: list[str], head: list[Any], fingerprints: Sequence[bytes]
    ) -> list[bool]:
        """Per fingerprint, whether this process claimed it. A call that raised before is sent
        again first, exactly: if the server ran it, its reply comes back, and the
        fingerprints it claimed count as claimed here (asked again, they would answer
        "claimed elsewhere" and nobody would fetch them). ``head``: the script's arguments
        before the fingerprints."""
        with translated(self.url):
            self._send_unanswered()
            earlier = {fp: self._replayed.pop(fp) for fp in fingerprints if fp in self._replayed}
            fresh = [fp for fp in fingerprints if fp not in earlier]
            sent = self._send(script, keys, [*head, *fresh], fresh) if fresh or head[1:] else []
        replies = iter(sent)
        from_earlier = set(earlier)
        # A fingerprint listed twice is claimed the first time only (as SADD answers).
        return [
            earlier.pop(fp, False) if fp in from_earlier else bool(next(replies))
            for fp in fingerprints
        ]

    def _send(
        self, script: Any, keys: list[str], args: list[Any], fingerprints: list[bytes]
    ) -> list[Any]:
        key = self._replies.new_key()
        try:
            replies = list(self._replies.call(script, key, keys, args))
        except Exception:
            self._unanswered = _Unanswered(script, key, keys, args, fingerprints)
            raise
        self._replies.answered(key)
        return replies

    def _send_unanswered(self) -> None:
        call = self._unanswered
        if call is None:
            return
        replies = self._replies.call(call.script, call.key, call.keys, call.args)
        self._unanswered = None
        self._replies.answered(call.key)
        if len(self._replayed) > _REPLAYED_LIMIT:
            self._replayed.clear()
        for fp, claimed in zip(call.fingerprints, replies, strict=True):
            self._replayed[fp] = self._replayed.get(fp, False) or bool(claimed)

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
        # A release that raised is sent again as the same call when asked again for the same
        # fingerprint (the second run of a release that ran would un-claim a wanted link).
        pending, self._unreleased = self._unreleased, None
        if pending is not None and pending[0] == fingerprint:
            key = pending[1]
        else:
            if pending is not None:
                self._replies.answered(pending[1])  # given up by its caller
            key = self._replies.new_key()
        with translated(self.url):
            try:
                script = self._release_unwanted
                released = self._replies.call(script, key, self._keys, [fingerprint])
            except Exception:
                self._unreleased = (fingerprint, key)
                raise
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
        self._client.close()
