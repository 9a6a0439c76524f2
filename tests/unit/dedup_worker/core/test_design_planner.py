"""Table designs are pigeonhole-complete; the planner reproduces the paper's examples."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.design import build_design, table_count
from dedup_worker.core.planner import enumerate_designs, evaluate, paper_tables, plan
from dedup_worker.errors import ConfigError

PAPER_DESIGNS = [  # Manku et al. 3.1.1, 2**34 fingerprints, k = 3
    ((6,), 20, (31, 33)),
    ((4, 4), 16, (28, 28)),
    ((5,), 10, (25, 26)),
    ((4,), 4, (16, 16)),
]


@pytest.mark.parametrize(("splits", "tables", "bits"), PAPER_DESIGNS)
def test_paper_designs(splits: tuple[int, ...], tables: int, bits: tuple[int, int]) -> None:
    design = build_design(3, splits)
    assert len(design.tables) == tables == table_count(3, splits)
    assert design.key_bits == bits
    option = evaluate(2**34, 3, splits)
    assert option.candidates_per_probe == pytest.approx(
        sum(2 ** (34 - t.key_bits) for t in design.tables)
    )


def test_planner_options_for_paper_scale_include_its_designs() -> None:
    result = plan(2**34, 3)
    offered = {(o.splits, o.tables, o.key_bits) for o in result.options}
    for splits, tables, bits in PAPER_DESIGNS:
        assert (splits, tables, bits) in offered
    assert "tables" in result.explain()


def test_planner_respects_bounds_and_explains() -> None:
    lean = plan(10_000_000, 3, max_bytes=100)
    assert lean.chosen.bytes_per_fingerprint <= 100
    sharp = plan(10_000_000, 3, max_candidates=0.1)
    assert sharp.chosen.candidates_per_probe <= 0.1
    assert sharp.chosen.tables > lean.chosen.tables
    with pytest.raises(ConfigError, match="relax"):
        plan(10_000_000, 3, max_bytes=20, max_candidates=0.01)


def test_paper_recursion() -> None:
    assert paper_tables(64, 3, 10, 12) == 1
    assert paper_tables(64, 3, 34, 4) >= paper_tables(64, 3, 30, 4) >= 4


@pytest.mark.parametrize("k", range(9))
def test_every_enumerated_design_is_pigeonhole_complete(k: int) -> None:
    rng = random.Random(k)
    for splits in enumerate_designs(k)[:6]:
        design = build_design(k, splits)
        for _ in range(300):
            a = rng.getrandbits(64)
            b = a
            for bit in rng.sample(range(64), rng.randint(0, k)):
                b ^= 1 << bit
            assert any((a ^ b) & t.key_mask == 0 for t in design.tables), (splits, a, b)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 8).flatmap(
        lambda k: st.tuples(st.just(k), st.sampled_from(enumerate_designs(k)[:8]))
    ),
    st.integers(0, 2**64 - 1),
)
def test_kernel_permutation_matches_reference(kd: tuple[int, tuple[int, ...]], value: int) -> None:
    import numpy as np

    design = build_design(*kd)
    for table in design.tables[:5]:
        permuted = hk.permute(np.array([value], dtype=np.uint64), table.segments)
        assert int(permuted[0]) == table.permute(value)
        back = hk.permute(permuted, table.inverse_segments)
        assert int(back[0]) == value
        assert bin(table.permute(value)).count("1") == bin(value).count("1")


@pytest.mark.parametrize("splits", [(3,), (65,), (4, 49)])
def test_impossible_designs_are_rejected(splits: tuple[int, ...]) -> None:
    with pytest.raises(ConfigError):
        build_design(3, splits)
