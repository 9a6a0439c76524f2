"""Key layout of the Redis index, and the pure (Redis-free) planning of a batch into shard calls.

Key layout (``ns`` = namespace, ``ver`` = fingerprint version tag)::

    nd:{ns}:meta                        JSON: design, splits, k, version, ttl, bucket/shard bits
    nd:{ns:ver:t<table>:p<shard>}:n     entries inserted into that shard (table 0 only): len()
    nd:{ns:ver:t<table>:p<shard>}:b<b>  a bucket: 16-byte records (fingerprint BE, id BE)

A table's permuted fingerprint has ``bucket_bits`` leading bits naming its bucket; the first
``shard_bits`` of those name the shard. Everything between the braces is the Redis Cluster hash
tag, so a shard's buckets and counter share one slot and one Lua call can work on all of them.
Bucket bits never exceed the table's key bits, so two fingerprints that agree on a table's key
bits meet in the same bucket: the one atomic shard call that stores the later one sees the
earlier one.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dedup_worker.core.design import Design
from dedup_worker.core.index_api import I64Array, U64Array, submasks
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: A bucket is sized to hold about this many entries at the expected number of fingerprints.
BUCKET_TARGET = 8
#: Records per shard call are at most this many (bucket indexes travel as 2 bytes).
MAX_CALL_ENTRIES = 8192
RECORD = np.dtype([("fp", ">u8"), ("id", ">u8")])
RECORD_BYTES = RECORD.itemsize
LAYOUT_FORMAT = 1
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Layout:
    """Where a namespace's entries live: keys, bucket and shard bits per table."""

    namespace: str
    version_tag: str
    design: Design
    bucket_bits: tuple[int, ...]
    shard_bits: tuple[int, ...]
    ttl: int = 0

    def __post_init__(self) -> None:
        for what, name in (("namespace", self.namespace), ("version tag", self.version_tag)):
            if not _NAME.match(name):
                raise ConfigError(f"{what} {name!r} must match {_NAME.pattern}")
        if len(self.bucket_bits) != len(self.design.tables) or len(self.shard_bits) != len(
            self.design.tables
        ):
            raise ConfigError("bucket_bits and shard_bits need one value per table")
        for table, bb, sb in zip(
            self.design.tables, self.bucket_bits, self.shard_bits, strict=True
        ):
            if not 0 <= sb <= bb <= table.key_bits:
                raise ConfigError(f"need 0 <= shard bits {sb} <= bucket bits {bb} <= key bits")

    @property
    def meta_key(self) -> str:
        return f"nd:{{{self.namespace}}}:meta"

    def tag(self, table: int, shard: int) -> str:
        width = max(1, math.ceil(self.shard_bits[table] / 4))
        return f"{self.namespace}:{self.version_tag}:t{table}:p{shard:0{width}x}"

    def counter_key(self, table: int, shard: int) -> str:
        """A shard's counter; only table 0's are kept, and ``len()`` sums them."""
        return f"nd:{{{self.tag(table, shard)}}}:n"

    def counter_keys(self) -> list[str]:
        return [self.counter_key(0, shard) for shard in range(1 << self.shard_bits[0])]

    def bucket_prefix(self, table: int, shard: int) -> str:
        return f"nd:{{{self.tag(table, shard)}}}:b"

    def bucket_suffixes(self, table: int, buckets: U64Array) -> list[str]:
        """Key suffixes of buckets (their bits below the shard prefix, in hex)."""
        low_bits = self.bucket_bits[table] - self.shard_bits[table]
        low = buckets & np.uint64((1 << low_bits) - 1)
        return [f"{b:x}" for b in low.tolist()]

    def bucket_keys(self, table: int, shard: int, buckets: U64Array) -> list[str]:
        prefix = self.bucket_prefix(table, shard)
        return [prefix + suffix for suffix in self.bucket_suffixes(table, buckets)]

    def bucket_pattern(self, table: int) -> str:
        """A SCAN pattern for all bucket keys of one table (maintenance and tests)."""
        return f"nd:{{{self.namespace}:{self.version_tag}:t{table}:p*}}:b*"

    def meta(self) -> dict[str, Any]:
        return {
            "format": LAYOUT_FORMAT,
            "design": self.design.name,
            "splits": list(self.design.splits),
            "k": self.design.k,
            "version": self.version_tag,
            "ttl": self.ttl,
            "bucket_bits": list(self.bucket_bits),
            "shard_bits": list(self.shard_bits),
        }


def plan_layout(
    design: Design,
    namespace: str,
    version_tag: str,
    expected_n: int,
    shard_bits: int,
    ttl: int = 0,
) -> Layout:
    """Bucket bits so that a bucket holds ~BUCKET_TARGET entries at ``expected_n``."""
    if expected_n < 1 or shard_bits < 0 or ttl < 0:
        raise ConfigError("expected_n must be >= 1, shard_bits and ttl >= 0")
    wanted = max(0, int(math.log2(max(expected_n / BUCKET_TARGET, 1.0))))
    buckets = tuple(min(wanted, table.key_bits) for table in design.tables)
    shards = tuple(min(shard_bits, bits) for bits in buckets)
    return Layout(namespace, version_tag, design, buckets, shards, ttl)


def adopt_meta(layout: Layout, stored: dict[str, Any]) -> Layout:
    """The layout of an existing namespace; ConfigError if it was made for other data."""
    mine = layout.meta()
    for field in ("format", "design", "splits", "k", "version", "ttl"):
        if stored.get(field) != mine[field]:
            raise ConfigError(
                f"redis namespace {layout.namespace!r} was created with {field}="
                f"{stored.get(field)!r}, this index has {field}={mine[field]!r}; use another "
                f"namespace (or delete this one) instead of mixing incompatible entries"
            )
    buckets, shards = tuple(stored["bucket_bits"]), tuple(stored["shard_bits"])
    if (buckets, shards) != (layout.bucket_bits, layout.shard_bits):
        logger.info(
            "namespace %s keeps its layout: bucket bits %s, shard bits %s",
            layout.namespace,
            buckets,
            shards,
        )
    return Layout(layout.namespace, layout.version_tag, layout.design, buckets, shards, layout.ttl)


def encode_meta(layout: Layout) -> str:
    return json.dumps(layout.meta(), sort_keys=True)


def decode_meta(raw: bytes | str, namespace: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"redis namespace {namespace!r} has unreadable metadata: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"redis namespace {namespace!r} has unreadable metadata: {raw!r}")
    return value


@dataclass(frozen=True)
class ShardCall:
    """One Lua call: a shard's records in batch order and the buckets they fall in."""

    table: int
    shard: int
    counter_key: str
    bucket_prefix: str
    bucket_suffixes: str
    positions: I64Array
    slots: npt.NDArray[np.uint16]
    #: Per record, whether it only reads its bucket (a probe of flipped slack bits); None
    #: when every record is its entry's own.
    probe_only: npt.NDArray[np.bool_] | None = None

    def args(self, fps: U64Array, ids: U64Array) -> list[bytes | str]:
        """Records, bucket indexes, bucket key prefix and suffixes, as the scripts take them;
        then the records' kinds ("p" own, "q" probe only) if some only probe."""
        records = pack_records(fps[self.positions], ids[self.positions])
        slots = self.slots.astype(">u2").tobytes()
        args: list[bytes | str] = [records, slots, self.bucket_prefix, self.bucket_suffixes]
        if self.probe_only is not None and self.probe_only.any():
            args.append(np.where(self.probe_only, ord("q"), ord("p")).astype(np.uint8).tobytes())
        return args


@dataclass(frozen=True)
class TablePlan:
    """A table's calls, plus per entry (in call order) its position and global bucket slot."""

    table: int
    calls: list[ShardCall]
    positions: I64Array
    slots: I64Array


def plan_batch(layout: Layout, fps: U64Array, slack: U64Array | None = None) -> list[TablePlan]:
    """Split a batch (at most MAX_CALL_ENTRIES) into shard calls, table by table.

    With ``slack`` (per entry and table, ``Design.slack``), each entry also probes the buckets
    of its key with slack bits flipped, right after its own record (so it sees the batch's
    earlier entries only); flips that leave the bucket unchanged add nothing (the scan's rule
    covers them) and are dropped.
    """
    if fps.size > MAX_CALL_ENTRIES:
        raise ValueError(f"plan at most {MAX_CALL_ENTRIES} entries at once, got {fps.size}")
    return [
        _plan_table(layout, t, fps, None if slack is None else slack[:, t])
        for t in range(len(layout.design.tables))
    ]


def buckets_of(layout: Layout, table: int, fps: U64Array) -> U64Array:
    """Bucket number (leading ``bucket_bits`` of the permuted fingerprint) of each fingerprint."""
    bits = layout.bucket_bits[table]
    if bits == 0:  # a shift by 64 is undefined: every entry is in the table's one bucket
        return np.zeros(fps.size, dtype=np.uint64)
    return layout.design.tables[table].permute_all(fps) >> np.uint64(64 - bits)


def _plan_table(layout: Layout, table: int, fps: U64Array, slack: U64Array | None) -> TablePlan:
    buckets = buckets_of(layout, table, fps)
    owners = np.arange(fps.size, dtype=np.int64)
    probe_only: npt.NDArray[np.bool_] | None = None
    if slack is not None:
        rows, flipped = submasks(slack)
        extra = buckets_of(layout, table, fps[rows] ^ flipped)
        moved = extra != buckets[rows]
        rows, extra = rows[moved], extra[moved]
        # Batch order, each entry's own record before its flipped probes (a stable sort).
        merged = np.argsort(np.concatenate([owners, rows]), kind="stable")
        owners = np.concatenate([owners, rows])[merged]
        buckets = np.concatenate([buckets, extra])[merged]
        probe_only = merged >= fps.size
    low_bits = np.uint64(layout.bucket_bits[table] - layout.shard_bits[table])
    distinct, inverse = np.unique(buckets, return_inverse=True)
    distinct_shard = distinct >> low_bits
    order = np.argsort(buckets >> low_bits, kind="stable")
    calls = [
        _call(layout, table, int(shard), order[lo:hi], owners, probe_only, distinct,
              distinct_shard, inverse)
        for shard, lo, hi in _groups(buckets[order] >> low_bits)
    ]  # fmt: skip
    return TablePlan(table, calls, owners[order], inverse[order].astype(np.int64))


def _call(
    layout: Layout,
    table: int,
    shard: int,
    records: I64Array,
    owners: I64Array,
    probe_only: npt.NDArray[np.bool_] | None,
    distinct: U64Array,
    distinct_shard: U64Array,
    inverse: I64Array,
) -> ShardCall:
    lo, hi = np.searchsorted(distinct_shard, [shard, shard + 1])
    suffixes = " ".join(layout.bucket_suffixes(table, distinct[lo:hi]))
    slots = (inverse[records] - lo).astype(np.uint16)
    return ShardCall(
        table,
        shard,
        layout.counter_key(table, shard),
        layout.bucket_prefix(table, shard),
        suffixes,
        owners[records],
        slots,
        None if probe_only is None else probe_only[records],
    )


def _groups(sorted_values: U64Array) -> Iterator[tuple[int, int, int]]:
    """(value, start, stop) of each run of equal values."""
    if sorted_values.size == 0:
        return
    starts = np.flatnonzero(np.diff(sorted_values)) + 1
    bounds = np.concatenate(([0], starts, [sorted_values.size]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        yield int(sorted_values[lo]), lo, hi


def pack_records(fps: U64Array, ids: U64Array) -> bytes:
    records = np.empty(fps.size, dtype=RECORD)
    records["fp"] = fps
    records["id"] = ids
    return records.tobytes()


def unpack_records(raw: bytes) -> tuple[U64Array, U64Array]:
    records = np.frombuffer(raw, dtype=RECORD)
    return records["fp"].astype(np.uint64), records["id"].astype(np.uint64)


def expand_ranges(starts: I64Array, counts: I64Array) -> I64Array:
    """Concatenation of range(starts[i], starts[i] + counts[i]), without a Python loop."""
    total = int(counts.sum())
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(total, dtype=np.int64)
