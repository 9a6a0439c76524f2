"""Numba kernels for permuted tables: permute, bucket, probe, merge, all-pairs.

A table's permutation is given as rows (source shift, width, destination shift). A sorted run
of permuted keys has a bucket directory over its top ``dir_bits`` bits, so a probe is one
directory lookup and a short contiguous scan. Pairs found through several tables are reported
only by the first table (in design order) whose key bits the pair agrees on, so no result needs
de-duplication across tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

U64 = np.uint64
_GROW = 2
#: Probes are issued in groups of this many so that their cache misses overlap.
_GROUP = 16


@intrinsic
def _popcount(typingctx, x):  # type: ignore[no-untyped-def]  # numba intrinsic signature
    """The hardware population count of a uint64 (LLVM's ctpop)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.ctpop(args[0])

    return sig, codegen


popcount = cast(Callable[[np.uint64], np.uint64], _popcount)


@njit(cache=True, inline="always")
def _mask(width: int) -> np.uint64:
    return U64(0xFFFFFFFFFFFFFFFF) if width >= 64 else (U64(1) << U64(width)) - U64(1)


@njit(cache=True, inline="always")
def permute_one(x: np.uint64, segments: np.ndarray, first: int, last: int) -> np.uint64:
    out = U64(0)
    for row in range(first, last):
        src = U64(segments[row, 0])
        dst = U64(segments[row, 2])
        out |= ((x >> src) & _mask(segments[row, 1])) << dst
    return out


@njit(cache=True)
def permute(values: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Apply one table's permutation to every value."""
    out = np.empty(values.size, dtype=np.uint64)
    rows = segments.shape[0]
    for i in range(values.size):
        out[i] = permute_one(values[i], segments, 0, rows)
    return out


@njit(cache=True)
def directory(keys: np.ndarray, bits: int) -> np.ndarray:
    """offsets[b] = first index whose top ``bits`` bits are >= b (length 2**bits + 1)."""
    size = 1 << bits
    out = np.empty(size + 1, dtype=np.int64)
    shift = U64(64 - bits)
    j = 0
    for bucket in range(size):
        while j < keys.size and (bits > 0 and np.int64(keys[j] >> shift) < bucket):
            j += 1
        out[bucket] = j
    out[size] = keys.size
    return out


@njit(cache=True, inline="always")
def first_agreeing(diff: np.uint64, key_masks: np.ndarray) -> int:
    """Index of the first table whose key bits the pair agrees on (diff = a ^ b)."""
    for t in range(key_masks.size):
        if diff & key_masks[t] == U64(0):
            return t
    return key_masks.size


@njit(cache=True)
def _grow(q: np.ndarray, f: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = q.size * _GROW
    q2 = np.empty(n, dtype=q.dtype)
    f2 = np.empty(n, dtype=f.dtype)
    d2 = np.empty(n, dtype=d.dtype)
    q2[: q.size] = q
    f2[: f.size] = f
    d2[: d.size] = d
    return q2, f2, d2


@njit(cache=True)
def probe_run(
    queries: np.ndarray,
    permuted: np.ndarray,
    positions: np.ndarray,
    lookups: np.ndarray,
    keys: np.ndarray,
    ids: np.ndarray,
    offsets: np.ndarray,
    dir_bits: int,
    k: int,
    table: int,
    key_masks: np.ndarray,
    inverse: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Matches (query index, stored id, original fingerprint, distance) in one table run.

    Probe ``g`` reads the bucket of the permuted key ``lookups[g]`` for query ``positions[g]``
    (its own key, or its key with slack bits flipped); ``permuted`` holds the queries' own
    permuted keys. An entry is kept when this table is the first whose ``key_masks`` row of the
    query (``index_api.rule_masks``) it agrees on, so no other table reports it again.
    Probes go in groups of 16: first all directory reads, then a touch of every bucket, then
    the scans, so the cache misses of a group overlap instead of queueing one after another.
    Tombstoned entries (id == 2**64 - 1) are skipped.
    """
    out_q = np.empty(64, dtype=np.int64)
    out_i = np.empty(64, dtype=np.uint64)
    out_f = np.empty(64, dtype=np.uint64)
    out_d = np.empty(64, dtype=np.int8)
    n = 0
    shift = U64(64 - dir_bits)
    rows = inverse.shape[0]
    lo = np.empty(_GROUP, dtype=np.int64)
    hi = np.empty(_GROUP, dtype=np.int64)
    sink = np.zeros(1, dtype=np.uint64)  # keeps the bucket-touching loads from being elided
    limit = U64(k)
    dead = U64(0xFFFFFFFFFFFFFFFF)
    for first in range(0, lookups.size, _GROUP):
        last = min(lookups.size, first + _GROUP)
        for g in range(last - first):
            bucket = np.int64(lookups[first + g] >> shift) if dir_bits > 0 else 0
            lo[g] = offsets[bucket]
            hi[g] = offsets[bucket + 1]
        touch = U64(0)
        for g in range(last - first):
            if lo[g] < hi[g]:
                touch ^= keys[lo[g]]
        sink[0] ^= touch
        for g in range(last - first):
            i = positions[first + g]
            key = permuted[i]
            for j in range(lo[g], hi[g]):
                dist = popcount(keys[j] ^ key)
                if dist > limit or ids[j] == dead:
                    continue
                original = permute_one(keys[j], inverse, 0, rows)
                if first_agreeing(original ^ queries[i], key_masks[i]) != table:
                    continue
                if n == out_q.size:
                    out_q, out_f, out_d = _grow(out_q, out_f, out_d)
                    out_i = _grow_one(out_i)
                out_q[n] = i
                out_i[n] = ids[j]
                out_f[n] = original
                out_d[n] = np.int8(dist)
                n += 1
    return out_q[:n], out_i[:n], out_f[:n], out_d[:n]


@njit(cache=True)
def weakest_bits(
    margins: np.ndarray, positions: np.ndarray, widths: np.ndarray, flips: int
) -> np.ndarray:
    """Per row of ``margins`` (n x 64) and table t, the mask of its ``flips`` key bits of
    smallest margin among ``positions[t, :widths[t]]`` (equal margins: the one listed first)."""
    n, tables = margins.shape[0], positions.shape[0]
    out = np.zeros((n, tables), dtype=np.uint64)
    for i in range(n):
        for t in range(tables):
            chosen = U64(0)
            for _ in range(min(flips, widths[t])):
                best, best_margin = -1, np.int64(0)
                for at in range(widths[t]):
                    bit = positions[t, at]
                    if chosen >> U64(bit) & U64(1):
                        continue
                    margin = np.int64(margins[i, bit])
                    if best < 0 or margin < best_margin:
                        best, best_margin = bit, margin
                chosen |= U64(1) << U64(best)
            out[i, t] = chosen
    return out


@njit(cache=True)
def _grow_one(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.size * _GROW, dtype=values.dtype)
    out[: values.size] = values
    return out


@njit(cache=True)
def scan_all(
    queries: np.ndarray, values: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Brute-force matches of queries against a small unsorted set (the index's tail)."""
    out_q = np.empty(64, dtype=np.int64)
    out_j = np.empty(64, dtype=np.int64)
    out_d = np.empty(64, dtype=np.int8)
    n = 0
    for i in range(queries.size):
        for j in range(values.size):
            dist = popcount(values[j] ^ queries[i])
            if dist <= U64(k):
                if n == out_q.size:
                    out_q, out_j, out_d = _grow(out_q, out_j, out_d)
                out_q[n] = i
                out_j[n] = j
                out_d[n] = np.int8(dist)
                n += 1
    return out_q[:n], out_j[:n], out_d[:n]


@njit(cache=True)
def scan_runs(
    queries: np.ndarray,
    positions: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    words: np.ndarray,
    k: int,
    key_masks: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matches of queries against runs of stored entries (the buckets a probe read back).

    Query ``positions[j]`` is compared with entries ``starts[j] .. starts[j] + lens[j]``, entry
    ``r``'s fingerprint being ``words[2 * r]`` (16-byte records: fingerprint, id). Kept: distance
    <= k and, when ``key_masks`` has rows (one per query: ``index_api.rule_masks``), agreement
    on some mask of the query's row. Returns (query position, entry, distance) per match, in
    scan order.

    Any byte order works as long as queries, words and masks share it: a popcount and an AND
    with zero do not depend on the order of bytes, so big-endian records need no conversion.
    """
    out_q = np.empty(64, dtype=np.int64)
    out_r = np.empty(64, dtype=np.int64)
    out_d = np.empty(64, dtype=np.int8)
    n = 0
    check_keys = key_masks.shape[0] > 0
    tables = key_masks.shape[1]
    for j in range(positions.size):
        p = positions[j]
        query = queries[p]
        first = starts[j]
        for r in range(first, first + lens[j]):
            diff = query ^ words[2 * r]
            dist = popcount(diff)
            if dist > U64(k):
                continue
            if check_keys and first_agreeing(diff, key_masks[p]) == tables:
                continue
            if n == out_q.size:
                out_q, out_r, out_d = _grow(out_q, out_r, out_d)
            out_q[n] = p
            out_r[n] = r
            out_d[n] = np.int8(dist)
            n += 1
    return out_q[:n], out_r[:n], out_d[:n]


@njit(cache=True)
def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge two sorted uint64 arrays (branch-free inner loop: random keys defeat prediction)."""
    out = np.empty(a.size + b.size, dtype=np.uint64)
    i = j = n = 0
    while i < a.size and j < b.size:
        x = a[i]
        y = b[j]
        take_b = 1 if y < x else 0
        out[n] = y if take_b else x
        j += take_b
        i += 1 - take_b
        n += 1
    out[n : n + a.size - i] = a[i:]
    n += a.size - i
    out[n:] = b[j:]
    return out


@njit(cache=True)
def merge_with_ids(
    a: np.ndarray, ai: np.ndarray, b: np.ndarray, bi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two sorted uint64 arrays carrying a parallel id array each (stable: a first)."""
    out = np.empty(a.size + b.size, dtype=np.uint64)
    ids = np.empty(a.size + b.size, dtype=np.uint64)
    i = j = n = 0
    while i < a.size and j < b.size:
        x = a[i]
        y = b[j]
        take_b = 1 if y < x else 0
        out[n] = y if take_b else x
        ids[n] = bi[j] if take_b else ai[i]
        j += take_b
        i += 1 - take_b
        n += 1
    rest = a.size - i
    out[n : n + rest] = a[i:]
    ids[n : n + rest] = ai[i:]
    n += rest
    out[n:] = b[j:]
    ids[n:] = bi[j:]
    return out, ids


@njit(cache=True)
def sort_with_ids(keys: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort keys (carrying ids) by a counting sort on the top bits, then tiny insertion sorts.

    Fingerprints are close to uniform, so buckets hold one or two keys; a large bucket (many
    equal or clustered keys) falls back to a stable argsort of that bucket alone.
    """
    n = keys.size
    bits = 1
    while (1 << bits) < n and bits < 24:
        bits += 1
    order, starts = bucket_order(keys, bits)
    out = keys[order]
    out_ids = ids[order]
    for b in range(starts.size - 1):
        lo, hi = starts[b], starts[b + 1]
        if hi - lo > 32:
            local = np.argsort(out[lo:hi], kind="mergesort")
            out[lo:hi] = out[lo:hi][local]
            out_ids[lo:hi] = out_ids[lo:hi][local]
            continue
        for x in range(lo + 1, hi):
            key = out[x]
            ident = out_ids[x]
            y = x - 1
            while y >= lo and out[y] > key:
                out[y + 1] = out[y]
                out_ids[y + 1] = out_ids[y]
                y -= 1
            out[y + 1] = key
            out_ids[y + 1] = ident
    return out, out_ids


@njit(cache=True)
def bucket_order(keys: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Counting sort of indices by the top ``bits`` bits: (order, bucket offsets)."""
    size = 1 << bits
    shift = U64(64 - bits)
    starts = np.zeros(size + 1, dtype=np.int64)
    for i in range(keys.size):
        starts[np.int64(keys[i] >> shift) + 1 if bits > 0 else 1] += 1
    for b in range(size):
        starts[b + 1] += starts[b]
    fill = starts[:-1].copy()
    order = np.empty(keys.size, dtype=np.int64)
    for i in range(keys.size):
        slot = np.int64(keys[i] >> shift) if bits > 0 else 0
        order[fill[slot]] = i
        fill[slot] += 1
    return order, starts


@njit(cache=True)
def pairs_in_table(
    values: np.ndarray,
    permuted: np.ndarray,
    bits: int,
    k: int,
    table: int,
    key_masks: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs (i < j, distance) within k that ``table`` is the first to agree on."""
    order, starts = bucket_order(permuted, bits)
    out_i = np.empty(64, dtype=np.int64)
    out_j = np.empty(64, dtype=np.int64)
    out_d = np.empty(64, dtype=np.int8)
    n = 0
    for b in range(starts.size - 1):
        for x in range(starts[b], starts[b + 1]):
            a = order[x]
            for y in range(x + 1, starts[b + 1]):
                c = order[y]
                dist = popcount(permuted[a] ^ permuted[c])
                if dist > U64(k):
                    continue
                if first_agreeing(values[a] ^ values[c], key_masks) != table:
                    continue
                if n == out_i.size:
                    out_i, out_j, out_d = _grow(out_i, out_j, out_d)
                out_i[n] = min(a, c)
                out_j[n] = max(a, c)
                out_d[n] = np.int8(dist)
                n += 1
    return out_i[:n], out_j[:n], out_d[:n]


@njit(cache=True)
def tombstone_ids(
    keys: np.ndarray, ids: np.ndarray, want_keys: np.ndarray, want_ids: np.ndarray, mark: np.uint64
) -> int:
    """Replace the ids of the given (key, id) entries by ``mark``; returns how many."""
    done = 0
    for w in range(want_keys.size):
        j = np.searchsorted(keys, want_keys[w])
        while j < keys.size and keys[j] == want_keys[w]:
            if ids[j] == want_ids[w]:
                ids[j] = mark
                done += 1
                break
            j += 1
    return done
