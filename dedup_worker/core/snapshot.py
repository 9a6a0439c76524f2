"""Index snapshots: sorted fingerprints in Elias-Fano coding, ids beside them.

Manku et al. (§3.2) compress a sorted table by storing, per fingerprint, the position of the
leading bit that differs from its predecessor and the bits after it, about 64 - log2(n) + 3 bits
each. Elias-Fano stores a non-decreasing sequence of n values below 2**64 in
64 - floor(log2 n) + 2 bits each at most, which is at least as compact, and needs only a bit
packer: the low bits of every value verbatim, the high bits as a unary bit vector.

File layout: one JSON header line, then the low-bit words, the upper bit vector and the ids
(zlib-compressed uint64, little-endian). The tables are rebuilt from the entries on load.
"""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from numba import njit

from dedup_worker.core.design import build_design
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.errors import IndexError_

logger = logging.getLogger(__name__)

MAGIC = "neardup-index"
FORMAT = 1
U64Array = npt.NDArray[np.uint64]


@njit(cache=True)
def _pack(values: np.ndarray, width: int) -> np.ndarray:
    """The low ``width`` bits of every value, concatenated into uint64 words."""
    out = np.zeros((values.size * width + 63) // 64 + 1, dtype=np.uint64)
    if width == 0:
        return out
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - width)
    for i in range(values.size):
        bit = i * width
        word, offset = bit >> 6, np.uint64(bit & 63)
        low = values[i] & mask
        out[word] |= low << offset
        if offset != np.uint64(0) and offset + np.uint64(width) > np.uint64(64):
            out[word + 1] |= low >> (np.uint64(64) - offset)
    return out


@njit(cache=True)
def _unpack(words: np.ndarray, n: int, width: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.uint64)
    if width == 0:
        return out
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - width)
    for i in range(n):
        bit = i * width
        word, offset = bit >> 6, np.uint64(bit & 63)
        value = words[word] >> offset
        if offset != np.uint64(0) and offset + np.uint64(width) > np.uint64(64):
            value |= words[word + 1] << (np.uint64(64) - offset)
        out[i] = value & mask
    return out


def encode(sorted_values: U64Array) -> tuple[int, U64Array, npt.NDArray[np.uint8]]:
    """Elias-Fano: (low bit width, packed low bits, upper bit vector as bytes)."""
    n = int(sorted_values.size)
    width = max(0, 64 - int(np.floor(np.log2(max(n, 1)))))
    low = _pack(sorted_values, width)
    high = (sorted_values >> np.uint64(width)) if width < 64 else np.zeros(n, np.uint64)
    positions = high.astype(np.int64) + np.arange(n, dtype=np.int64)
    bits = np.zeros(int(positions[-1]) + 1 if n else 0, dtype=np.uint8)
    bits[positions] = 1
    return width, low, np.packbits(bits)


def decode(n: int, width: int, low: U64Array, upper: npt.NDArray[np.uint8]) -> U64Array:
    positions = np.flatnonzero(np.unpackbits(upper))[:n]
    high = (positions - np.arange(n)).astype(np.uint64)
    shifted = (high << np.uint64(width)) if width < 64 else np.zeros(n, np.uint64)
    values: U64Array = shifted | _unpack(low, n, width)
    return values


def save(index: InMemoryIndex, path: str | Path, version_tag: str = "") -> int:
    """Write a snapshot of ``index``; returns the file size in bytes."""
    fps, ids = index.entries()
    width, low, upper = encode(fps)
    id_blob = zlib.compress(ids.astype("<u8").tobytes(), 1)
    header = {
        "magic": MAGIC,
        "format": FORMAT,
        "k": index.k,
        "splits": list(index.design.splits),
        "replicas": index.design.replicas,
        "version_tag": version_tag,
        "count": int(fps.size),
        "low_width": width,
        "sections": [int(low.nbytes), int(upper.nbytes), len(id_blob)],
    }
    target = Path(path)
    tmp = target.with_suffix(target.suffix + ".tmp")
    with tmp.open("wb") as out:
        out.write(json.dumps(header).encode() + b"\n")
        out.write(low.astype("<u8").tobytes())
        out.write(upper.tobytes())
        out.write(id_blob)
    tmp.replace(target)  # readers never see a half-written snapshot
    return target.stat().st_size


def load(path: str | Path, expected_version_tag: str | None = None) -> InMemoryIndex:
    """Read a snapshot written by ``save``; the tables are rebuilt in memory."""
    data = Path(path).read_bytes()
    line_end = data.find(b"\n")
    header = _header(data[:line_end] if line_end >= 0 else b"")
    if expected_version_tag is not None and header["version_tag"] != expected_version_tag:
        raise IndexError_(
            f"snapshot {path} holds fingerprints {header['version_tag']!r}, "
            f"expected {expected_version_tag!r}: refusing to mix fingerprint versions"
        )
    low_size, upper_size, ids_size = header["sections"]
    start = line_end + 1
    low = np.frombuffer(data, dtype="<u8", count=low_size // 8, offset=start).astype(np.uint64)
    upper = np.frombuffer(data, dtype=np.uint8, count=upper_size, offset=start + low_size)
    ids_raw = zlib.decompress(
        data[start + low_size + upper_size : start + low_size + upper_size + ids_size]
    )
    n = header["count"]
    fps = decode(n, header["low_width"], low, upper)
    index = InMemoryIndex(build_design(header["k"], header["splits"], header.get("replicas", 1)))
    if n:
        index.insert(fps, np.frombuffer(ids_raw, dtype="<u8").astype(np.uint64))
    return index


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except ValueError:
        raise IndexError_("not a neardup index snapshot (bad header)") from None
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        raise IndexError_("not a neardup index snapshot (no magic)")
    if header.get("format") != FORMAT:
        raise IndexError_(f"snapshot format {header.get('format')} unsupported (want {FORMAT})")
    return cast(dict[str, Any], header)
