"""Broder's detector (the textbook baseline ``neardup eval`` scores the worker's against).

``MinHasher`` takes k-permutation MinHash signatures of pages' word 4-shingles;
``super_shingles`` groups them into super-shingles of ``size`` minima each, and a pair matches
on ``match`` of ``groups`` super-shingles (the P_{k,s,r} filter of ``match_probability``).
Deterministic (fmix64 of the version-1 shingle hashes; never Python's ``hash()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

import numpy as np
import numpy.typing as npt

from dedup_worker.core.sketch import shingle_hashes
from dedup_worker.errors import ConfigError
from neardup.evaluation import _minhash_kernel as mk

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SuperShingleConfig:
    """``groups`` super-shingles of ``size`` minima each; a pair matches on ``match`` of them."""

    groups: int = 6
    size: int = 14
    match: int = 2

    def __post_init__(self) -> None:
        if not (1 <= self.match <= self.groups and self.size >= 1):
            raise ConfigError(f"need 1 <= match <= groups and size >= 1, got {self}")

    @property
    def permutations(self) -> int:
        return self.groups * self.size


def match_probability(resemblance: float, config: SuperShingleConfig) -> float:
    """P_{k,s,r}(J): chance that two pages of resemblance J share >= r of k super-shingles."""
    p = resemblance**config.size
    k = config.groups
    return sum(comb(k, i) * p**i * (1 - p) ** (k - i) for i in range(config.match, k + 1))


class MinHasher:
    """k-permutation MinHash of word 4-shingles (Broder), and super-shingles from it."""

    def __init__(self, permutations: int = 84) -> None:
        self.permutations = permutations

    def signatures(self, texts: Sequence[str]) -> U64Array:
        """(len(texts), permutations) minima; rows of empty texts are all 2**64 - 1."""
        hashes, offsets = shingle_hashes(texts)
        out: U64Array = mk.minhash(hashes, offsets, self.permutations)
        return out


def super_shingles(signatures: U64Array, config: SuperShingleConfig) -> U64Array:
    """(documents, groups) super-shingles of the MinHash signatures."""
    if signatures.shape[1] < config.permutations:
        raise ConfigError(f"{config} needs {config.permutations} minima per page")
    out: U64Array = mk.super_shingles(signatures, config.groups, config.size)
    return out


def minhash_estimates(signatures: U64Array, left: I64Array, right: I64Array) -> F64Array:
    """Share of equal minima: the unbiased MinHash estimate of resemblance, per pair."""
    if left.size == 0:
        return np.zeros(0, dtype=np.float64)
    same = (signatures[left] == signatures[right]).mean(axis=1)
    return np.asarray(same, dtype=np.float64)
