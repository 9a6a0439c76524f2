"""``DocStore`` in Redis (single server or Redis Cluster), with ``MemoryDocStore``'s semantics.

Records live in bucket strings (layout and encoding: :mod:`redis_docs_codec`); every
check-then-write is one Lua call (:mod:`redis_docs_lua`) over the records of one shard, so it
is atomic per record. All calls of a batch go out in one pipeline: one round trip on a single
Redis, one per node on a cluster (redis-py 8's cluster pipeline refuses ``pipe.evalsha`` but
routes a raw EVALSHA by the slot of its one key and writes to every node before reading).

``latest`` needs no URL map: a page id carries 22 bits of its URL's hash, so every fetch of a
URL is in the URL's bucket and the latest is the highest id there. Only records whose id was
not made by ``page_id`` ("strays") need a pointer; it is written by a second call after the
claim, so for them alone claim and "latest" are two atomic steps (both idempotent).

TTL: with ``ttl_seconds`` a bucket expires that long after its last write, taking all its
records with it (records live at least ``ttl_seconds``, longer in busy buckets).

Retries are safe: claim returns what a failed attempt stored, finalize and correct are
idempotent. A failed batch may be partly applied, like any pipeline.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis.exceptions as rex
from redis.commands.core import Script

from dedup_worker.adapters import redis_docs_codec as rc
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    check_binary,
    describe,
    translated,
)
from dedup_worker.adapters.redis_docs_lua import SCRIPTS
from dedup_worker.core.records import DocRecord, Original
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: One script call: script name, its one key (the shard's strays key), its arguments.
Call = tuple[str, str, list[bytes | str]]


class RedisDocStore:
    """Page records by id and the latest record per URL, shared through Redis (``DocStore``).

    ``namespace`` separates independent stores on one Redis. ``expected_n`` sizes buckets
    (~12 records each) and ``shard_bits`` sets 2**shard_bits shards (spread over a cluster,
    one script call per shard and batch); both are fixed when the namespace is created, later
    instances adopt the stored layout. Thread-safe (redis-py clients are).
    """

    def __init__(
        self,
        client: Client,
        namespace: str,
        ttl_seconds: int | None = None,
        *,
        expected_n: int = 1_000_000,
        shard_bits: int = 6,
    ) -> None:
        check_binary(client)
        if ttl_seconds is not None and ttl_seconds < 0:
            raise ConfigError(f"ttl_seconds must be >= 0 (0 or None: no expiry), got {ttl_seconds}")
        self._client = client
        self.url = describe(client)
        self._ttl = str(ttl_seconds or 0)
        self._scripts: dict[str, Script] = {
            name: client.register_script(source) for name, source in SCRIPTS.items()
        }
        wanted = rc.plan_layout(namespace, expected_n, shard_bits)
        with translated(self.url):
            self.layout = self._open(wanted)
            self._load_scripts()
        logger.info("redis doc store %s on %s: %s", namespace, self.url, self.layout.meta())

    # ---- DocStore ------------------------------------------------------------------------

    def claim(self, records: Sequence[DocRecord]) -> dict[int, DocRecord]:
        def entry(i: int) -> bytes:
            return rc.encode(records[i])

        replies = self._batch("claim", [self.layout.bucket(r.id) for r in records], entry)
        existing: dict[int, DocRecord] = {}
        for at, reply in replies:
            for i, raw in zip(at, reply, strict=True):
                if raw is not None:
                    existing[records[i].id] = _decode(raw, self.url)
        self._point_strays(records, existing)
        return existing

    def claim_latest(
        self, records: Sequence[DocRecord]
    ) -> tuple[dict[int, DocRecord], dict[str, DocRecord]]:
        """``DocStore.claim_latest``: one script call per shard when every id is a page id;
        a batch with a stray (an id away from its URL's bucket) takes the two steps."""
        buckets = [self.layout.bucket(r.id) for r in records]
        if any(b != self.layout.url_bucket(r.url) for b, r in zip(buckets, records, strict=True)):
            latest = self.latest(r.url for r in records)
            return self.claim(records), latest

        def entry(i: int) -> bytes:
            return rc.encode(records[i])

        existing: dict[int, DocRecord] = {}
        found: dict[str, DocRecord] = {}
        strays: dict[str, int] = {}
        for at, reply in self._batch("claim_latest", buckets, entry):
            for i, raw, best, stray in zip(at, reply[0::3], reply[1::3], reply[2::3], strict=True):
                url = records[i].url
                if raw is not None:
                    existing[records[i].id] = _decode(raw, self.url)
                if best is not None and url not in found:
                    found[url] = _decode(best, self.url)
                if stray is not None:
                    strays[url] = int.from_bytes(stray, "big")
        return existing, found | self._resolve_strays(strays)  # no stray to point at

    def get(self, ids: Iterable[int]) -> dict[int, DocRecord]:
        wanted = [i for i in dict.fromkeys(ids) if rc.storable(i)]

        def entry(i: int) -> bytes:
            return rc.id_bytes(wanted[i])

        found: dict[int, DocRecord] = {}
        for at, reply in self._batch("get", [self.layout.bucket(i) for i in wanted], entry):
            for i, raw in zip(at, reply, strict=True):
                if raw is not None:
                    found[wanted[i]] = _decode(raw, self.url)
        return found

    def latest(self, urls: Iterable[str]) -> dict[str, DocRecord]:
        wanted = list(dict.fromkeys(urls))
        buckets = [self.layout.url_bucket(u) for u in wanted]

        def entry(i: int) -> bytes:
            return rc.url_key(wanted[i])

        found: dict[str, DocRecord] = {}
        strays: dict[str, int] = {}
        for at, reply in self._batch("latest", buckets, entry):
            for i, raw, stray in zip(at, reply[0::2], reply[1::2], strict=True):
                if raw is not None:
                    found[wanted[i]] = _decode(raw, self.url)
                if stray is not None:
                    strays[wanted[i]] = int.from_bytes(stray, "big")
        return found | self._resolve_strays(strays)

    def finalize(self, verdicts: Mapping[int, tuple[str, Original]]) -> dict[int, DocRecord]:
        """``DocStore.finalize``; ids without a record raise ``RecordMissing`` (a KeyError,
        like ``MemoryDocStore``'s) after the other ids were applied."""
        ids = [i for i in verdicts if rc.storable(i)]

        def entry(i: int) -> bytes:
            return rc.id_bytes(ids[i]) + rc.verdict_entry(*verdicts[ids[i]])

        settled: dict[int, DocRecord] = {}
        missing = [i for i in verdicts if not rc.storable(i)]
        for at, reply in self._batch("finalize", [self.layout.bucket(i) for i in ids], entry):
            for i, raw in zip(at, reply, strict=True):
                if raw is None:
                    missing.append(ids[i])
                elif raw:
                    settled[ids[i]] = _decode(raw, self.url)
        if missing:
            raise rc.RecordMissing(f"finalize of ids without a record: {sorted(missing)[:10]}")
        return settled

    def correct(self, corrections: Mapping[int, tuple[str, tuple[str, int]]]) -> set[int]:
        ids = [i for i in corrections if rc.storable(i)]

        def entry(i: int) -> bytes:
            verdict, original = corrections[ids[i]]
            head = rc.id_bytes(ids[i]) + rc.id_bytes(original[1])
            return head + rc.verdict_entry(verdict, original, corrected=True)

        published: set[int] = set()
        for at, reply in self._batch("correct", [self.layout.bucket(i) for i in ids], entry):
            published.update(ids[i] for i, flag in zip(at, reply, strict=True) if flag == ord("1"))
        return published

    # ---- script calls --------------------------------------------------------------------

    def _batch(
        self, name: str, buckets: list[int], entry: Callable[[int], bytes]
    ) -> list[tuple[list[int], Any]]:
        """Run script ``name`` once per shard over the batch entries in it, in one pipeline.

        ``buckets`` has each entry's bucket and ``entry(position)`` its bytes for the script.
        Returns (positions, reply) per call.
        """
        groups = self._group(buckets)
        calls = [self._call(name, shard, at, buckets, entry) for shard, at in groups]
        replies = self._run(calls)
        return [(at, reply) for (_, at), reply in zip(groups, replies, strict=True)]

    def _call(
        self,
        name: str,
        shard: int,
        at: list[int],
        buckets: list[int],
        entry: Callable[[int], bytes],
    ) -> Call:
        suffixes = self.layout.suffixes([buckets[i] for i in at])
        blob = b"".join([entry(i) for i in at])
        return (
            name,
            self.layout.strays_key(shard),
            [self._ttl, self.layout.prefix(shard), suffixes, blob],
        )

    # ---- strays --------------------------------------------------------------------------

    def _point_strays(self, records: Sequence[DocRecord], existing: dict[int, DocRecord]) -> None:
        """Point URLs at stored records whose id does not lead to the URL's bucket.

        Also for records a failed earlier attempt stored (``existing`` with the same URL):
        the pointer write is a max, so repeating it is harmless, and a retry heals it.
        """
        points: dict[int, list[bytes | str]] = {}
        for record in records:
            home = self.layout.url_bucket(record.url)
            if self.layout.bucket(record.id) == home:
                continue
            if existing.get(record.id, record).url == record.url:
                shard = self.layout.shard(home)
                points.setdefault(shard, [self._ttl])
                points[shard] += [rc.url_key(record.url), rc.id_bytes(record.id)]
        if points:
            calls = [("point", self.layout.strays_key(s), args) for s, args in points.items()]
            self._run(calls)

    def _resolve_strays(self, strays: dict[str, int]) -> dict[str, DocRecord]:
        """The records the URL pointers name (a pointer outliving its record is ignored)."""
        if not strays:
            return {}
        records = self.get(strays.values())
        return {url: records[i] for url, i in strays.items() if i in records}

    # ---- plumbing ------------------------------------------------------------------------

    def _group(self, buckets: list[int]) -> list[tuple[int, list[int]]]:
        """(shard, positions in batch order) per shard the buckets fall in."""
        if self.layout.shard_bits == 0:  # one Redis: one call (~0.4 us an entry less)
            return [(0, list(range(len(buckets))))] if buckets else []
        groups: dict[int, list[int]] = {}
        for position, bucket in enumerate(buckets):
            groups.setdefault(self.layout.shard(bucket), []).append(position)
        return list(groups.items())

    def _open(self, wanted: rc.DocLayout) -> rc.DocLayout:
        """Create the namespace's metadata, or adopt the existing one."""
        key = wanted.meta_key
        self._client.set(key, rc.encode_meta(wanted), nx=True)
        raw = self._client.get(key)
        if raw is None:
            raise BackendError(f"metadata {key} vanished while opening the store on {self.url}")
        return rc.adopt_meta(wanted, raw)

    def _load_scripts(self) -> None:
        # SCRIPT LOAD goes to every primary of a cluster; a restarted server forgets scripts,
        # which _run notices (NOSCRIPT) and repairs.
        for script in self._scripts.values():
            self._client.script_load(script.script)

    def _run(self, calls: list[Call]) -> list[Any]:
        """Run the calls in one pipeline; reload the scripts once if the server forgot them."""
        if not calls:
            return []
        with translated(self.url):
            results = self._pipeline(calls)
            missing = [n for n, r in enumerate(results) if isinstance(r, rex.NoScriptError)]
            if missing:
                logger.info("redis at %s lost the doc store scripts; loading them again", self.url)
                self._load_scripts()
                again = self._pipeline([calls[n] for n in missing])
                for n, result in zip(missing, again, strict=True):
                    results[n] = result
            for result in results:
                if isinstance(result, Exception):
                    raise result
        return results

    def _pipeline(self, calls: list[Call]) -> list[Any]:
        # execute_command, not pipe.evalsha: redis-py's cluster pipeline blocks evalsha but
        # routes a raw EVALSHA by the slot of its key.
        pipe = self._client.pipeline(transaction=False)
        for name, key, args in calls:
            pipe.execute_command("EVALSHA", self._scripts[name].sha, 1, key, *args)
        return list(pipe.execute(raise_on_error=False))


def _decode(raw: bytes, url: str) -> DocRecord:
    try:
        return rc.decode(raw)
    except (struct.error, ValueError, IndexError) as exc:  # UnicodeDecodeError is a ValueError
        raise BackendError(f"unreadable page record at {url}: {exc}: {raw[:40]!r}") from exc
