"""Pure helpers of the Redis index: key layout, batch planning, metadata, error translation."""

from __future__ import annotations

import numpy as np
import pytest
import redis.exceptions as rex
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from dedup_worker.adapters import redis_layout as rl
from dedup_worker.adapters.redis_client import BackendError, translate
from dedup_worker.core.design import build_design
from dedup_worker.errors import BackendUnavailable, ConfigError

U64 = np.uint64
DESIGN = build_design(3, (4,))


def _layout(expected_n: int = 1_000_000, shard_bits: int = 4) -> rl.Layout:
    return rl.plan_layout(DESIGN, "ns", "f1w1t2h1k", expected_n, shard_bits)


def test_buckets_hold_about_eight_entries_and_never_exceed_key_bits() -> None:
    assert _layout(1_000_000).bucket_bits == (16, 16, 16, 16)  # 4c1 has 16 key bits
    assert _layout(100_000).bucket_bits == (13, 13, 13, 13)
    assert _layout(1).bucket_bits == (0, 0, 0, 0)
    assert _layout(1).shard_bits == (0, 0, 0, 0)
    capped = rl.plan_layout(build_design(1, (2,)), "ns", "v", 2**40, 6)
    assert capped.bucket_bits == (32, 32) and capped.shard_bits == (6, 6)
    wide = rl.plan_layout(build_design(0, (1,)), "ns", "v", 2**40, 6)
    assert wide.bucket_bits == (37,)


def test_keys_of_a_shard_share_one_hash_tag_and_slot() -> None:
    layout = _layout()
    keys = layout.bucket_keys(2, 0xA, np.array([0xA123, 0xAFFF], dtype=U64))
    assert keys == ["nd:{ns:f1w1t2h1k:t2:pa}:b123", "nd:{ns:f1w1t2h1k:t2:pa}:bfff"]
    counter = layout.counter_key(2, 0xA)
    assert {key_slot(k.encode()) for k in [*keys, counter]} == {key_slot(counter.encode())}
    assert layout.meta_key == "nd:{ns}:meta"
    assert layout.counter_keys()[0] == "nd:{ns:f1w1t2h1k:t0:p0}:n"


@pytest.mark.parametrize("name", ["", "a b", "x{y}", "a" * 65])
def test_bad_names_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError):
        rl.plan_layout(DESIGN, name, "v", 10, 2)
    with pytest.raises(ConfigError):
        rl.plan_layout(DESIGN, "ns", name, 10, 2)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=300),
    st.sampled_from([1, 64, 5000, 10**6]),
    st.integers(0, 6),
)
def test_plan_covers_every_entry_once_per_table_in_batch_order(
    values: list[int], expected_n: int, shard_bits: int
) -> None:
    fps = np.array(values, dtype=U64)
    layout = rl.plan_layout(DESIGN, "ns", "v", expected_n, shard_bits)
    for plan in rl.plan_batch(layout, fps):
        buckets = rl.buckets_of(layout, plan.table, fps)
        low = layout.bucket_bits[plan.table] - layout.shard_bits[plan.table]
        seen = np.concatenate([c.positions for c in plan.calls]) if plan.calls else []
        assert sorted(seen) == list(range(fps.size))
        assert [c.shard for c in plan.calls] == sorted({c.shard for c in plan.calls})
        for call in plan.calls:
            assert list(call.positions) == sorted(call.positions)  # batch order inside a call
            assert np.all(buckets[call.positions] >> U64(low) == call.shard)
            suffixes = call.bucket_suffixes.split()
            expected = layout.bucket_suffixes(plan.table, buckets[call.positions])
            assert [suffixes[s] for s in call.slots] == expected
        distinct = np.unique(buckets)
        assert np.array_equal(distinct[plan.slots], buckets[plan.positions])


def test_bucket_is_the_leading_bits_of_the_permuted_fingerprint() -> None:
    layout = _layout(10**6)
    fp = 0x0123456789ABCDEF
    for t, table in enumerate(DESIGN.tables):
        got = rl.buckets_of(layout, t, np.array([fp], dtype=U64))
        assert int(got[0]) == table.permute(fp) >> (64 - layout.bucket_bits[t])


def test_records_round_trip_big_endian() -> None:
    fps, ids = np.array([1, 2**64 - 2], dtype=U64), np.array([3, 2**63], dtype=U64)
    raw = rl.pack_records(fps, ids)
    assert raw[:16] == (1).to_bytes(8, "big") + (3).to_bytes(8, "big")
    got_fps, got_ids = rl.unpack_records(raw)
    assert np.array_equal(got_fps, fps) and np.array_equal(got_ids, ids)


def test_expand_ranges() -> None:
    got = rl.expand_ranges(np.array([5, 0, 9]), np.array([2, 0, 3]))
    assert got.tolist() == [5, 6, 9, 10, 11]


def test_meta_mismatch_names_the_field_and_layout_is_adopted() -> None:
    mine = _layout(10**6)
    stored = rl.decode_meta(rl.encode_meta(_layout(100)).encode(), "ns")
    adopted = rl.adopt_meta(mine, stored)
    assert adopted.bucket_bits == _layout(100).bucket_bits
    for field, value in (("version", "f2"), ("k", 4), ("splits", [5]), ("ttl", 60)):
        with pytest.raises(ConfigError, match=field):
            rl.adopt_meta(mine, {**stored, field: value})
    with pytest.raises(ConfigError, match="unreadable"):
        rl.decode_meta(b"{not json", "ns")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (rex.ConnectionError("refused"), BackendUnavailable),
        (rex.TimeoutError("timed out"), BackendUnavailable),
        (rex.BusyLoadingError("loading"), BackendUnavailable),
        (rex.ResponseError("BUSY Redis is busy running a script"), BackendUnavailable),
        (rex.ClusterDownError("CLUSTERDOWN"), BackendUnavailable),
        (rex.AuthenticationError("bad password"), ConfigError),  # names the settings
        (rex.NoPermissionError("NOPERM this user has no permissions"), BackendError),
        (rex.ResponseError("WRONGTYPE Operation against a key"), BackendError),
        (rex.OutOfMemoryError("OOM command not allowed"), BackendError),
        (rex.RedisClusterException("shard_hint is deprecated"), BackendError),
    ],
)
def test_translate(error: Exception, kind: type[Exception]) -> None:
    translated = translate(error, "redis://h:1/0")
    assert type(translated) is kind
    assert "redis://h:1/0" in str(translated)
