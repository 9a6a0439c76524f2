"""Key layout and binary record encoding of the Redis doc store (pure: no Redis here).

Key layout (``ns`` = namespace, ``s`` = shard in hex, ``b`` = the bucket's bits above the
shard's, in hex)::

    nd:{ns}:docmeta        JSON: format, bucket_bits, shard_bits (fixed when ns is created)
    nd:{ns:d<s>}:<b>       a bucket: records concatenated (string; see below)
    nd:{ns:d<s>}:s         hash, url key -> 8-byte id: the latest "stray" record of a URL

A record lives in the bucket named by the low ``bucket_bits`` of its id. Page ids carry 22
bits of their URL's hash there (``records.page_id``), so every fetch of a URL shares one
bucket, and ``latest`` scans that bucket instead of keeping a URL map: no second copy of the
URL, and claim updates "latest" atomically by construction. A record whose id does not carry
its URL's hash (a *stray*: an id not made by ``page_id``) gets an explicit pointer in the
``:s`` hash of its URL's shard. Everything between the braces is the Redis Cluster hash tag:
one Lua call works on one shard, hence one slot.

Buckets are plain strings rather than hashes: a record is ~120 bytes with a 70-byte URL, over
Redis 6.2's default ``hash-max-ziplist-value`` (64), so a hash would fall back to its
hashtable encoding (~190 B/record measured by its parts) while a string costs only its bytes.

Record (all integers big-endian)::

    id 8 | n_mut 2 | n_imm 2 | mutable (n_mut) | immutable (n_imm)
    mutable:   code 1 | [dup id 8] | [verdict: len 1, utf-8] | [dup url: prefix 2, suffix]
    immutable: url len 2 | url | fingerprint 8 | fetched_at f64 | checksum | sketch len 2 |
               sketch | host

``code`` = verdict code (low nibble; 0 = spelled out) | 0x10 has dup id | 0x20 has dup url
| 0x40 set by a correction (``DocRecord.corrected``).
The duplicate's URL is stored as its common prefix length with the page's own URL plus the
rest (near-duplicates are mostly born on the same host). The checksum is one byte ``c``,
then ``c & 0x7f`` bytes: raw bytes of a lowercase hex string when ``c & 0x80``, else UTF-8.
The host is (position, length) of its bytes inside the URL, or 255 and then its UTF-8 bytes.
Lua reads only id, the lengths, the code, the dup id and the URL key; it never does 64-bit
arithmetic (ids compare as 8-byte strings).
"""

from __future__ import annotations

import json
import logging
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, NoReturn

from dedup_worker.core.records import (
    PENDING,
    SUPPRESSED,
    URL_HASH_BITS,
    DocRecord,
    Original,
    url_hash,
)
from dedup_worker.errors import ConfigError, NeardupError

logger = logging.getLogger(__name__)

#: Known verdicts travel as one code; anything else is spelled out (code 0).
VERDICT_CODES = {
    PENDING: 1,
    "unique": 2,
    "changed": 3,
    "unchanged": 4,
    "near_duplicate": 5,
    "exact_duplicate": 6,
}
VERDICTS = {code: verdict for verdict, code in VERDICT_CODES.items()}
PENDING_CODE = VERDICT_CODES[PENDING]
SUPPRESSED_CODES = tuple(sorted(VERDICT_CODES[v] for v in SUPPRESSED))
HAS_DUP_ID, HAS_DUP_URL, CORRECTED = 0x10, 0x20, 0x40
#: The mutable part of a record with a known verdict and no duplicate: its code byte alone.
_CODE_ONLY = {verdict: bytes((code,)) for verdict, code in VERDICT_CODES.items()}
HEADER = struct.Struct(">QHH")
_FIXED = struct.Struct(">Qd")
_U16 = struct.Struct(">H")
_MAX_FIELD = 0xFFFF
_MAX_SHORT = 0x7F
_HOST_EXPLICIT = 255
LAYOUT_FORMAT = 1
#: A bucket is sized to hold about this many records at the expected number of pages.
BUCKET_TARGET = 12
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class RecordTooLarge(NeardupError, ValueError):
    """A record does not fit the binary encoding (a URL over 64 KiB, an id over 64 bits)."""


class RecordMissing(NeardupError, KeyError):
    """``finalize`` named an id that has no record (never claimed, or expired by TTL)."""


# ---- layout --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocLayout:
    """Where a namespace's records live: 2**bucket_bits buckets in 2**shard_bits shards."""

    namespace: str
    bucket_bits: int
    shard_bits: int

    def __post_init__(self) -> None:
        if not _NAME.match(self.namespace):
            raise ConfigError(f"namespace {self.namespace!r} must match {_NAME.pattern}")
        if not 0 <= self.shard_bits <= self.bucket_bits <= URL_HASH_BITS:
            raise ConfigError(
                f"need 0 <= shard bits {self.shard_bits} <= bucket bits {self.bucket_bits} "
                f"<= {URL_HASH_BITS}"
            )

    @property
    def meta_key(self) -> str:
        return f"nd:{{{self.namespace}}}:docmeta"

    def bucket(self, ident: int) -> int:
        return ident & ((1 << self.bucket_bits) - 1)

    def url_bucket(self, url: str) -> int:
        return self.bucket(url_hash(url))

    def shard(self, bucket: int) -> int:
        return bucket & ((1 << self.shard_bits) - 1)

    def suffix(self, bucket: int) -> str:
        """The bucket's key suffix within its shard (its bits above the shard bits, hex)."""
        return f"{bucket >> self.shard_bits:x}"

    def suffixes(self, buckets: list[int]) -> str:
        """``suffix`` of each bucket, space-separated, as the scripts take them."""
        shift = self.shard_bits
        return " ".join([f"{bucket >> shift:x}" for bucket in buckets])

    def prefix(self, shard: int) -> str:
        """Key prefix of a shard's buckets; Lua appends the suffix."""
        return f"nd:{{{self.namespace}:d{shard:x}}}:"

    def strays_key(self, shard: int) -> str:
        return self.prefix(shard) + "s"

    def meta(self) -> dict[str, Any]:
        return {
            "format": LAYOUT_FORMAT,
            "bucket_bits": self.bucket_bits,
            "shard_bits": self.shard_bits,
        }


def plan_layout(namespace: str, expected_n: int, shard_bits: int) -> DocLayout:
    """Bucket bits so that a bucket holds ~BUCKET_TARGET records at ``expected_n``."""
    if expected_n < 1 or shard_bits < 0:
        raise ConfigError("expected_n must be >= 1 and shard_bits >= 0")
    wanted = round(math.log2(max(expected_n / BUCKET_TARGET, 1.0)))
    shard_bits = min(shard_bits, URL_HASH_BITS)
    return DocLayout(namespace, min(max(wanted, shard_bits), URL_HASH_BITS), shard_bits)


def encode_meta(layout: DocLayout) -> str:
    return json.dumps(layout.meta(), sort_keys=True)


def adopt_meta(wanted: DocLayout, raw: bytes | str) -> DocLayout:
    """The layout stored for the namespace (it wins: records already live there)."""
    try:
        stored = json.loads(raw)
        layout = DocLayout(wanted.namespace, int(stored["bucket_bits"]), int(stored["shard_bits"]))
        fmt = stored["format"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"doc store namespace {wanted.namespace!r}: bad metadata {raw!r}"
        ) from exc
    if fmt != LAYOUT_FORMAT:
        raise ConfigError(
            f"doc store namespace {wanted.namespace!r} has record format {fmt}, this code "
            f"reads {LAYOUT_FORMAT}; use another namespace"
        )
    if layout != wanted:
        logger.info("doc namespace %s keeps its layout %s", wanted.namespace, layout.meta())
    return layout


# ---- encoding ------------------------------------------------------------------------------


def id_bytes(ident: int) -> bytes:
    return ident.to_bytes(8, "big")


def storable(ident: int) -> bool:
    """Whether a record can have this id (others are simply not found)."""
    return 0 <= ident < 1 << 64


def url_key(url: str) -> bytes:
    """The URL as it starts a record's immutable part: Lua compares these bytes."""
    raw = url.encode("utf-8")
    _check(len(raw) <= _MAX_FIELD, "url", len(raw))
    return _U16.pack(len(raw)) + raw


def encode(record: DocRecord) -> bytes:
    try:
        return _encode(record)
    except (struct.error, OverflowError) as exc:  # an id or fingerprint outside uint64
        raise RecordTooLarge(f"record {record.id} does not fit the encoding: {exc}") from exc


def _encode(record: DocRecord) -> bytes:
    url = record.url.encode("utf-8")
    if record.duplicate_of is None and record.duplicate_of_id is None and not record.corrected:
        # Most records: a pending one, as claim stores it (one cached byte, ~1 us less).
        mutable = _CODE_ONLY.get(record.verdict) or template(record.verdict, None, False)
    else:
        mutable = template(
            record.verdict, record.duplicate_of_id, record.duplicate_of is not None,
            record.corrected,
        )  # fmt: skip
        if record.duplicate_of is not None:
            mutable += dup_url_tail(url, record.duplicate_of.encode("utf-8"))
    sketch = record.sketch
    immutable = b"".join(
        (
            _U16.pack(len(url)) if len(url) <= _MAX_FIELD else _too_large("url", len(url)),
            url,
            _FIXED.pack(record.fingerprint, record.fetched_at),
            _checksum(record.checksum),
            _U16.pack(len(sketch)),
            sketch,
            _host(url, record.host),
        )
    )
    _check(len(mutable) <= _MAX_FIELD and len(immutable) <= _MAX_FIELD, "record", record.id)
    return HEADER.pack(record.id, len(mutable), len(immutable)) + mutable + immutable


def template(verdict: str, dup_id: int | None, has_url: bool, corrected: bool = False) -> bytes:
    """The mutable part up to the duplicate's URL, which Lua appends prefix-compressed."""
    code = VERDICT_CODES.get(verdict, 0)
    flags = (HAS_DUP_ID if dup_id is not None else 0) | (HAS_DUP_URL if has_url else 0)
    flags |= CORRECTED if corrected else 0
    out = bytes((code | flags,))
    if dup_id is not None:
        out += id_bytes(dup_id)
    if code == 0:
        out += _short(verdict.encode("utf-8"), "verdict", 0xFF)
    return out


def verdict_entry(verdict: str, original: Original, corrected: bool = False) -> bytes:
    """n_template 2 | n_url 2 | template | the duplicate's URL, as finalize and correct take it."""
    if original is None and not corrected and verdict in _PLAIN_ENTRIES:
        return _PLAIN_ENTRIES[verdict]  # most pages: a known verdict and no duplicate
    if original is None:
        head, dup_url = template(verdict, None, False, corrected), b""
    else:
        head = template(verdict, original[1], True, corrected)
        dup_url = original[0].encode("utf-8")
    _check(len(head) + 2 + len(dup_url) <= _MAX_FIELD, "duplicate url", len(dup_url))
    return _U16.pack(len(head)) + _U16.pack(len(dup_url)) + head + dup_url


#: ``verdict_entry`` of each known verdict without a duplicate (one per page in finalize).
_PLAIN_ENTRIES = {v: _U16.pack(1) + _U16.pack(0) + code for v, code in _CODE_ONLY.items()}


def dup_url_tail(url: bytes, dup: bytes) -> bytes:
    """The duplicate's URL as (common prefix length with the page's URL, rest)."""
    same = 0
    for a, b in zip(url, dup, strict=False):
        if a != b:
            break
        same += 1
    return _U16.pack(same) + dup[same:]


def _checksum(checksum: str) -> bytes:
    try:
        raw = bytes.fromhex(checksum)
    except ValueError:
        pass
    else:  # the round trip holds only for lowercase hex without spaces
        if len(raw) <= _MAX_SHORT and raw.hex() == checksum:
            return bytes((0x80 | len(raw),)) + raw
    return _short(checksum.encode("utf-8"), "checksum", _MAX_SHORT)


def _host(url: bytes, host: str) -> bytes:
    raw = host.encode("utf-8")
    pos = url.find(raw)
    if 0 <= pos < _HOST_EXPLICIT and len(raw) <= 0xFF:
        return bytes((pos, len(raw)))
    return bytes((_HOST_EXPLICIT,)) + raw


def _short(raw: bytes, what: str, limit: int) -> bytes:
    _check(len(raw) <= limit, what, len(raw))
    return bytes((len(raw),)) + raw


def _check(ok: bool, what: str, detail: object) -> None:
    if not ok:
        _too_large(what, detail)


def _too_large(what: str, detail: object) -> NoReturn:
    raise RecordTooLarge(f"{what} does not fit the redis record encoding ({detail})")


# ---- decoding ------------------------------------------------------------------------------


def decode(raw: bytes) -> DocRecord:
    ident, n_mut, n_imm = HEADER.unpack_from(raw)
    start = HEADER.size
    url, fingerprint, fetched_at, host, checksum, sketch = _immutable(raw, start + n_mut, n_imm)
    verdict, dup_id, dup_url = _mutable(raw, start, n_mut, url)
    return DocRecord(
        ident, url.decode(), host, fetched_at, fingerprint, checksum, verdict, dup_url, dup_id,
        sketch, corrected=bool(raw[start] & CORRECTED),
    )  # fmt: skip


def _mutable(raw: bytes, pos: int, size: int, url: bytes) -> tuple[str, int | None, str | None]:
    end, code = pos + size, raw[pos]
    pos += 1
    dup_id = None
    if code & HAS_DUP_ID:
        dup_id = int.from_bytes(raw[pos : pos + 8], "big")
        pos += 8
    verdict = VERDICTS.get(code & 0x0F)
    if verdict is None:
        verdict = raw[pos + 1 : pos + 1 + raw[pos]].decode()
        pos += 1 + raw[pos]
    dup_url = None
    if code & HAS_DUP_URL:
        (same,) = _U16.unpack_from(raw, pos)
        dup_url = (url[:same] + raw[pos + 2 : end]).decode()
    return verdict, dup_id, dup_url


def _immutable(raw: bytes, pos: int, size: int) -> tuple[bytes, int, float, str, str, bytes]:
    end = pos + size
    (n_url,) = _U16.unpack_from(raw, pos)
    url = raw[pos + 2 : pos + 2 + n_url]
    pos += 2 + n_url
    fingerprint, fetched_at = _FIXED.unpack_from(raw, pos)
    pos += _FIXED.size
    c = raw[pos]
    value = raw[pos + 1 : pos + 1 + (c & _MAX_SHORT)]
    checksum = value.hex() if c & 0x80 else value.decode()
    pos += 1 + (c & _MAX_SHORT)
    (n_sketch,) = _U16.unpack_from(raw, pos)
    sketch = raw[pos + 2 : pos + 2 + n_sketch]
    pos += 2 + n_sketch
    if raw[pos] == _HOST_EXPLICIT:
        host = raw[pos + 1 : end].decode()
    else:
        host = url[raw[pos] : raw[pos] + raw[pos + 1]].decode()
    return url, fingerprint, fetched_at, host, checksum, sketch
