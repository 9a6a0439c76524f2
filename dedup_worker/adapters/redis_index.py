"""``HammingIndex`` in Redis, shared by many worker processes (single Redis or Redis Cluster).

A batch is planned into shard calls (see :mod:`redis_layout`): per table, the entries of one
shard go to one Lua call (:mod:`redis_lua`) that reads their buckets, and, in batch order,
appends each record unless its exact bytes are already there. The call is atomic, so of two
near-duplicates racing from two workers, the one stored second always sees the first (they
share a bucket in the table whose key bits they agree on). Atomicity is per shard call, not
per batch. All calls of a batch go out in one pipeline: one round trip on a single Redis; on
a cluster redis-py routes each EVALSHA by the slot of its key, groups the calls by node and
writes to every node before reading any, so one round trip per node, overlapped. Exact
distances are computed here in numpy; Lua only moves bytes.

TTL semantics: with ``ttl`` set, a bucket expires ``ttl`` seconds after the last insert into
it (each table's bucket separately), so an entry lives at least ``ttl`` seconds and longer when
its buckets keep receiving entries. ``len()`` counts inserts minus deletes and does not see
expiry; without a ttl it is exact.

A batch that fails midway (BackendUnavailable) may be partly stored; retrying it is safe and
stores nothing twice, and entries stored by the failed attempt are then reported as distance-0
matches with their own id, like any replay.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import redis.exceptions as rex
from redis.commands.core import Script

from dedup_worker.adapters import redis_layout as rl
from dedup_worker.adapters.redis_client import (
    BackendError,
    Client,
    check_binary,
    describe,
    translated,
)
from dedup_worker.adapters.redis_lua import DELETE, PROBE_INSERT
from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.design import Design, check_flips
from dedup_worker.core.index_api import (
    TOMBSTONE,
    I32Array,
    Matches,
    U64Array,
    check_radius,
    mutual_match,
    probe_slack,
    rule_masks,
)
from dedup_worker.errors import IndexError_

logger = logging.getLogger(__name__)

Call = tuple[list[str], list[bytes | str]]


class RedisIndex:
    """Exact Hamming search over fingerprints stored in Redis (``HammingIndex``).

    ``namespace`` separates independent indexes on one Redis; its metadata pins the design, k,
    ``version_tag`` and ``ttl``, and a later start with other values fails with ConfigError.
    ``radius`` is the search radius (``HammingIndex.k``; default the design's k): a query-time
    setting, not part of the stored layout; so is ``flips``, the slack bits a probe tries
    flipped per table (``HammingIndex``): their buckets are read in the same Lua call.
    ``expected_n`` sizes buckets (~8 entries each); ``shard_bits`` sets 2**shard_bits shards per
    table (more spread on a cluster, more Lua calls per batch). Both are fixed when the
    namespace is created; later instances adopt the stored layout. Thread-safe.
    """

    def __init__(
        self,
        client: Client,
        design: Design,
        version_tag: str,
        *,
        namespace: str = "neardup",
        expected_n: int = 1_000_000,
        shard_bits: int = 4,
        ttl: int | None = None,
        radius: int | None = None,
        flips: int = 0,
    ) -> None:
        check_binary(client)
        self.design = design
        self._radius = check_radius(radius, design.k)
        self.flips = check_flips(flips)
        #: Index entries the probes have read back from Redis so far (every table's bucket
        #: entries, before the distance rule): what a probe costs grows with it.
        self.entries_read = 0
        self._client = client
        self.url = describe(client)
        wanted = rl.plan_layout(design, namespace, version_tag, expected_n, shard_bits, ttl or 0)
        self._probe: Script = client.register_script(PROBE_INSERT)
        self._delete: Script = client.register_script(DELETE)
        with translated(self.url):
            self.layout = self._open(wanted)
            self._load_scripts()
        logger.info("redis index %s on %s: %s", namespace, self.url, design.describe())

    @property
    def k(self) -> int:
        return self._radius

    def __len__(self) -> int:
        with translated(self.url):
            pipe = self._client.pipeline(transaction=False)
            for key in self.layout.counter_keys():
                pipe.get(key)
            counts = pipe.execute()
        return sum(int(count) for count in counts if count is not None)

    # ---- HammingIndex --------------------------------------------------------------------

    def query(self, fingerprints: U64Array, margins: I32Array | None = None) -> Matches:
        fps = np.ascontiguousarray(fingerprints, dtype=np.uint64)
        if fps.ndim != 1:
            raise IndexError_(f"fingerprints must be 1-d, got shape {fps.shape}")
        return self._chunked(fps, np.zeros(fps.size, dtype=np.uint64), "q", margins)

    def probe_insert(
        self, fingerprints: U64Array, ids: U64Array, margins: I32Array | None = None
    ) -> Matches:
        fps, idents = _check_entries(fingerprints, ids)
        return self._chunked(fps, idents, "p", margins)

    def mutual(self, diff: int) -> bool:
        return mutual_match(self.design, self.k, diff)

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None:
        fps, idents = _check_entries(fingerprints, ids)
        self._chunked(fps, idents, "i", None)

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        fps, idents = _check_entries(fingerprints, ids)
        removed = 0
        for lo in range(0, fps.size, rl.MAX_CALL_ENTRIES):
            hi = lo + rl.MAX_CALL_ENTRIES
            removed += self._delete_chunk(fps[lo:hi], idents[lo:hi])
        return removed

    # ---- maintenance ---------------------------------------------------------------------

    def entries(self, table: int = 0) -> tuple[U64Array, U64Array]:
        """All (fingerprint, id) records of one table, sorted; a full SCAN, for checks only."""
        with translated(self.url):
            keys = list(self._client.scan_iter(match=self.layout.bucket_pattern(table), count=1000))
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.get(key)
            raw = b"".join(value for value in pipe.execute() if value is not None)
        fps, ids = rl.unpack_records(raw)
        order = np.lexsort((ids, fps))
        return fps[order], ids[order]

    # ---- internals -----------------------------------------------------------------------

    def _open(self, wanted: rl.Layout) -> rl.Layout:
        """Create the namespace's metadata, or check ours against the existing one."""
        key = wanted.meta_key
        self._client.set(key, rl.encode_meta(wanted), nx=True)
        raw = self._client.get(key)
        if raw is None:
            raise BackendError(f"metadata {key} vanished while opening the index on {self.url}")
        return rl.adopt_meta(wanted, rl.decode_meta(raw, wanted.namespace))

    def _load_scripts(self) -> None:
        # SCRIPT LOAD goes to every primary of a cluster; a restarted server forgets scripts,
        # which _run notices (NOSCRIPT) and repairs.
        for script in (self._probe, self._delete):
            self._client.script_load(script.script)

    def _chunked(
        self, fps: U64Array, ids: U64Array, mode: str, margins: I32Array | None
    ) -> Matches:
        # Chunks run one after another, so a later chunk sees the earlier ones like one batch.
        slack = probe_slack(self.design, self.k, self.flips, margins, fps.size)
        result = Matches.empty()
        for lo in range(0, fps.size, rl.MAX_CALL_ENTRIES):
            hi = lo + rl.MAX_CALL_ENTRIES
            chunk_slack = None if slack is None else slack[lo:hi]
            found = self._probe_chunk(fps[lo:hi], ids[lo:hi], mode, chunk_slack)
            if len(found):
                shifted = Matches(found.query + lo, found.id, found.fingerprint, found.distance)
                result = shifted if not len(result) else result.concat(shifted)
        return result

    def _probe_chunk(
        self, fps: U64Array, ids: U64Array, mode: str, slack: U64Array | None
    ) -> Matches:
        plans = rl.plan_batch(self.layout, fps, slack)
        calls = [self._probe_call(c, fps, ids, mode) for p in plans for c in p.calls]
        replies = self._run(self._probe, calls)
        if mode == "i":
            return Matches.empty()
        # Within the design's k every near entry agrees on a key; beyond it, only those that do
        # (less the query's slack) are this index's matches, as in memory: the scan checks.
        if self._radius > self.design.k:
            masks = _as_words(rule_masks(self.design.key_masks, slack, fps.size))
        else:
            masks = np.zeros((0, len(self.design.tables)), dtype=np.uint64)
        return self._decode(plans, replies, fps, masks)

    def _probe_call(self, call: rl.ShardCall, fps: U64Array, ids: U64Array, mode: str) -> Call:
        count = "1" if call.table == 0 and mode != "q" else "0"
        return [call.counter_key], [mode, str(self.layout.ttl), count, *call.args(fps, ids)]

    def _decode(
        self, plans: list[rl.TablePlan], replies: list[Any], fps: U64Array, masks: U64Array
    ) -> Matches:
        """Matches of every table (distance <= k, agreeing on a key), one row per (query, entry).

        A bucket holds every entry that agrees with the query on its table's key bits, and
        maybe others (bucket bits may be fewer than key bits): the key rule drops those, so
        the matches do not depend on the layout.
        """
        parts: list[Matches] = []
        start = 0
        for plan in plans:
            mine = replies[start : start + len(plan.calls)]
            start += len(plan.calls)
            if mine:
                parts.append(self._table_matches(plan, mine, fps, masks))
        rows = [part for part in parts if len(part)]
        if not rows:
            return Matches.empty()
        return Matches(
            np.concatenate([m.query for m in rows]),
            np.concatenate([m.id for m in rows]),
            np.concatenate([m.fingerprint for m in rows]),
            np.concatenate([m.distance for m in rows]),
        ).unique()

    def _table_matches(
        self, plan: rl.TablePlan, replies: list[Any], fps: U64Array, masks: U64Array
    ) -> Matches:
        lens = _u32(b"".join(reply[1] for reply in replies)) // rl.RECORD_BYTES
        sizes = _u32(b"".join(reply[2] for reply in replies)) // rl.RECORD_BYTES
        raw = b"".join(reply[3] for reply in replies)
        self.entries_read += int(lens.sum())
        starts = (np.cumsum(sizes) - sizes)[plan.slots]
        # One compiled pass over the buckets, on the records' big-endian bytes as they came:
        # numpy's gather / XOR / popcount passes cost more than Redis's scripts on real text,
        # whose buckets hold hundreds of entries (see the README's bit-bias notes).
        query, rows, dist = hk.scan_runs(
            _as_words(fps), plan.positions, starts, lens,
            np.frombuffer(raw, dtype=_WORD), self.k, masks,
        )  # fmt: skip
        records = np.frombuffer(raw, dtype=rl.RECORD)[rows]
        return Matches(
            query, records["id"].astype(np.uint64), records["fp"].astype(np.uint64), dist
        )

    def _delete_chunk(self, fps: U64Array, ids: U64Array) -> int:
        calls: list[Call] = []
        tables: list[int] = []
        for plan in rl.plan_batch(self.layout, fps):
            for call in plan.calls:
                count = "1" if call.table == 0 else "0"
                calls.append(([call.counter_key], [count, *call.args(fps, ids)]))
                tables.append(call.table)
        removed = self._run(self._delete, calls)
        # Every entry lives once in each table; table 0 counts it.
        return sum(int(n) for n, table in zip(removed, tables, strict=True) if table == 0)

    def _run(self, script: Script, calls: list[Call]) -> list[Any]:
        """Run the calls in one pipeline; reload the script once if the server forgot it."""
        with translated(self.url):
            results = self._pipeline(script.sha, calls)
            missing = [n for n, r in enumerate(results) if isinstance(r, rex.NoScriptError)]
            if missing:
                logger.info("redis at %s lost the index scripts; loading them again", self.url)
                self._load_scripts()
                again = self._pipeline(script.sha, [calls[n] for n in missing])
                for n, result in zip(missing, again, strict=True):
                    results[n] = result
            for result in results:
                if isinstance(result, Exception):
                    raise result
        return results

    def _pipeline(self, sha: str, calls: list[Call]) -> list[Any]:
        # execute_command, not pipe.evalsha: redis-py's cluster pipeline blocks the evalsha
        # method, yet routes a raw EVALSHA by the slot of its keys (all one slot here).
        pipe = self._client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        return list(pipe.execute(raise_on_error=False))


#: Eight bytes of a record read as one number without conversion; fingerprints given to the
#: scan kernel are the same bytes (big-endian) read the same way.
_WORD = np.dtype("<u8")


def _as_words(values: U64Array) -> U64Array:
    """Big-endian bytes of each value, read as :data:`_WORD` (native on little-endian hosts)."""
    return np.ascontiguousarray(values, dtype=">u8").view(_WORD).astype(np.uint64)


def _u32(raw: bytes) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.frombuffer(raw, dtype=">u4").astype(np.int64)


def _check_entries(fingerprints: U64Array, ids: U64Array) -> tuple[U64Array, U64Array]:
    fps = np.ascontiguousarray(fingerprints, dtype=np.uint64)
    idents = np.ascontiguousarray(ids, dtype=np.uint64)
    if fps.shape != idents.shape or fps.ndim != 1:
        raise IndexError_(f"fingerprints {fps.shape} and ids {idents.shape} must be equal 1-d")
    if np.any(idents == TOMBSTONE):
        raise IndexError_("id 2**64-1 is reserved for tombstones")
    return fps, idents
