"""The crawl's URL-seen set in Redis (:class:`RedisSeenStore`): one set per crawl with its
in-flight and wanted sets, on one server or a Redis Cluster. What the sets mean, and the
:class:`~crawler.seen.SeenStore` interface it implements, are in :mod:`crawler.seen`; this
module is only the adapter (its Lua scripts, its round trips). The contract suite
``tests/contract/test_seen_store_contract.py`` runs on it and on the memory store alike.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Self

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
