"""The detectors ``neardup eval`` scores, as pure functions of a corpus.

* ``simhash``: pairs within Hamming distance k (Manku et al.), any ``FeatureConfig``.
* ``hybrid``: simhash candidates within k, kept only when the OPH sketches of the two pages'
  word 4-shingles estimate a resemblance above the sketch threshold (``sketch.verify``).
* ``minhash``: Broder's super-shingles (pages sharing ``match`` of ``groups`` super-shingles),
  optionally verified by the full MinHash estimate.

A detector is named by a spec string, ``name[:key=value,...]``, e.g.
``hybrid:k=5,bins=256,bits=4,threshold=0.86`` or ``simhash:shingle=4,k=3``.
Every run returns all candidate pairs up to the largest distance of the curves, so one run
gives the whole precision/recall-per-k curve.

``tables=K`` (with optional ``blocks=R`` and ``replicas=N``) mirrors the worker's index:
candidates beyond K must also agree on the key bits of a table of the design for K (``R``
blocks, default the planner's choice for a million pages, repeated over N orders of the bits),
exactly the matching rule of ``index_api.HammingIndex``.
Without it every pair within k is a candidate, as if the tables were complete up to k.
``flips=F`` (hybrid only, with ``tables``) adds the index's flipped probes: the later page of a
pair may also differ on its F weakest key bits of a table (``Design.slack``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dedup_worker.core.design import Design, build_design
from dedup_worker.core.index_api import agrees_on_a_key, probe_slack, rule_masks
from dedup_worker.core.planner import plan
from dedup_worker.core.simhash import Document, FeatureConfig
from dedup_worker.core.sketch import (
    SketchConfig,
    Sketcher,
    accepts_many,
    estimate_rows,
    row_counts,
)
from dedup_worker.errors import ConfigError
from neardup.evaluation import _quality_kernel as qk
from neardup.evaluation import quality
from neardup.evaluation.minhash import (
    MinHasher,
    SuperShingleConfig,
    minhash_estimates,
    super_shingles,
)
from neardup.evaluation.quality import Pairs

logger = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]
F64Array = npt.NDArray[np.float64]

_FEATURE_KEYS = {"shingle", "title_weight", "heading_weight", "drop_stop_words", "tf_cap"}
_SKETCH_KEYS = {"log2_bins", "bits", "threshold", "short_shingles", "short_threshold"}
_SUPER_KEYS = {"groups", "size", "match"}
#: Index size the planner designs ``tables=K`` for when no ``blocks`` are given.
PLANNED_PAGES = 1_000_000


@dataclass(frozen=True)
class Spec:
    """A parsed detector spec."""

    kind: str
    k: int = 3
    features: FeatureConfig = field(default_factory=FeatureConfig)
    sketch: SketchConfig = field(default_factory=SketchConfig)
    supers: SuperShingleConfig = field(default_factory=SuperShingleConfig)
    #: minhash only: also require the full MinHash estimate to reach this (0 = no check).
    verify: float = 0.0
    #: The index tables' own k (-1: complete up to k), their block count (0: planner's) and
    #: how many orders of the bits they are repeated over.
    tables: int = -1
    blocks: int = 0
    replicas: int = 1
    #: Weakest key bits per table the later page's probe also tries flipped (hybrid only).
    flips: int = 0

    def design(self) -> Design | None:
        """The table design candidates must agree with beyond its k (None: no such rule)."""
        if self.kind == "minhash" or self.tables < 0 or self.tables >= self.k:
            return None
        if self.blocks:
            return build_design(self.tables, (self.blocks,), self.replicas)
        return plan(PLANNED_PAGES, self.tables, replicas=self.replicas).design()

    @property
    def bytes_per_page(self) -> int:
        """Bytes stored per page beside the index entries (fingerprint, sketch, shingles)."""
        if self.kind == "simhash":
            return 8
        if self.kind == "hybrid":
            return 8 + self.sketch.nbytes
        return 8 * self.supers.groups + (8 * self.supers.permutations if self.verify else 0)


def parse_spec(text: str) -> Spec:
    """``name[:key=value,...]`` into a Spec (``bins`` is accepted for 2**log2_bins)."""
    kind, _, rest = text.partition(":")
    if kind not in ("simhash", "hybrid", "minhash"):
        raise ConfigError(f"unknown detector {kind!r}: use simhash, hybrid or minhash")
    values: dict[str, dict[str, Any]] = {"features": {}, "sketch": {}, "supers": {}, "top": {}}
    for item in filter(None, rest.split(",")):
        key, _, raw = item.partition("=")
        key, value = _parse_item(key.strip(), raw.strip())
        values[_group(key)][key] = value
    return Spec(
        kind,
        features=FeatureConfig(**values["features"]),
        sketch=SketchConfig(**values["sketch"]),
        supers=SuperShingleConfig(**values["supers"]),
        **values["top"],
    )


def _parse_item(key: str, raw: str) -> tuple[str, object]:
    if key == "bins":
        return "log2_bins", int(raw).bit_length() - 1
    if key == "drop_stop_words":
        return key, raw.lower() in ("1", "true", "yes")
    if key in ("threshold", "short_threshold", "verify"):
        return key, float(raw)
    try:
        return key, int(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected a number") from None


def _group(key: str) -> str:
    for name, keys in (("features", _FEATURE_KEYS), ("sketch", _SKETCH_KEYS)):
        if key in keys:
            return name
    if key in _SUPER_KEYS:
        return "supers"
    if key in ("k", "verify", "tables", "blocks", "replicas", "flips"):
        return "top"
    raise ConfigError(f"unknown detector setting {key!r}")


@dataclass(frozen=True)
class Run:
    """Candidates of one detector run: ``pairs.value`` is the Hamming distance (NaN for
    minhash), ``accepted`` what the verifier keeps, ``similarity`` its estimate if any."""

    spec: Spec
    pairs: Pairs
    accepted: BoolArray
    similarity: F64Array | None
    seconds: float
    #: Each page's simhash (None for minhash).
    fingerprints: npt.NDArray[np.uint64] | None = None

    def matched(self, k: int | None = None) -> Pairs:
        """The pairs the detector reports at distance <= k (its own k by default)."""
        if self.spec.kind == "minhash":
            return self.pairs.where(self.accepted)
        limit = self.spec.k if k is None else k
        return self.pairs.where(self.accepted & (self.pairs.value <= limit))


def run(spec: Spec, documents: Sequence[Document], limit: int = 12) -> Run:
    """Run a detector over the corpus; simhash-based ones keep candidates up to ``limit``."""
    if spec.kind == "minhash":
        return _run_minhash(spec, documents)
    sketcher = Sketcher(spec.sketch, spec.features)
    sketcher.fingerprint_and_sketch(documents[:2])  # compile (or load) the kernels first
    started = time.perf_counter()
    if spec.kind == "hybrid":
        fps, rows, margins = sketcher.fingerprint_sketch_margins(documents)
    else:
        fps, margins = sketcher.fingerprinter.fingerprint_margins(documents)
    seconds = time.perf_counter() - started
    pairs = quality.hamming_pairs(fps, max(limit, spec.k))
    design = spec.design()
    if design is not None:
        diff = fps[pairs.left] ^ fps[pairs.right]
        flips = spec.flips if spec.kind == "hybrid" else 0
        slack = probe_slack(design, spec.k, flips, margins, fps.size)
        masks = rule_masks(design.key_masks, slack, fps.size)[pairs.right]
        pairs = pairs.where((pairs.value <= design.k) | agrees_on_a_key(diff, masks))
    if spec.kind == "simhash":
        return Run(spec, pairs, np.ones(len(pairs), dtype=bool), None, seconds, fps)
    similarity = estimate_rows(rows, pairs.left, pairs.right)
    counts = row_counts(rows)
    shorter = np.minimum(counts[pairs.left], counts[pairs.right])
    accepted = accepts_many(similarity, shorter, spec.sketch)
    return Run(spec, pairs, accepted, similarity, seconds, fps)


def positives_by_distance(
    fingerprints: npt.NDArray[np.uint64], positives: Pairs, found: Pairs
) -> dict[str, dict[int, int]]:
    """Where the true near-duplicates lie under a fingerprint, and which ones a run finds.

    ``pairs``: positive pairs per Hamming distance. ``pages``: positive pages (an earlier page
    is their near-duplicate) per distance to their nearest earlier positive partner, the one a
    detector has to reach. ``found_pages``: of those, the pages the run predicts.
    """
    left, right = positives.left, positives.right
    dist = np.bitwise_count(fingerprints[left] ^ fingerprints[right]).astype(np.int64)
    nearest = np.full(fingerprints.size, 65, dtype=np.int64)
    np.minimum.at(nearest, right, dist)
    positive = nearest <= 64
    predicted = np.zeros(fingerprints.size, dtype=bool)
    predicted[found.right] = True

    def histogram(values: npt.NDArray[np.int64]) -> dict[int, int]:
        counts = np.bincount(values, minlength=1)
        return {d: int(c) for d, c in enumerate(counts.tolist()) if c}

    return {
        "pairs": histogram(dist),
        "pages": histogram(nearest[positive]),
        "found_pages": histogram(nearest[positive & predicted]),
    }


def missed_causes(run: Run, labels: quality.Labels) -> dict[str, int]:
    """Why the positive pages a simhash-based run misses are missed: ``beyond_reach`` when no
    positive partner of the page is a candidate at all (farther than k, or agreeing on no
    table's key), ``rejected`` when one is and the verifier turned every such pair down. The
    first asks for a larger k or more tables, the second for a sharper verifier."""
    n = max(labels.n, 1)
    predicted = np.zeros(labels.n, dtype=bool)
    matched = run.matched()
    predicted[matched.right] = True
    missed = labels.positive_pages & ~predicted
    within = run.pairs.where(run.pairs.value <= run.spec.k)
    candidates = quality.pair_keys(within.left, within.right, n)
    keys = labels.positive_keys
    reached = np.isin(keys, candidates)
    pages_reached = np.zeros(labels.n, dtype=bool)
    pages_reached[keys[reached] % n] = True
    return {
        "beyond_reach": int((missed & ~pages_reached).sum()),
        "rejected": int((missed & pages_reached).sum()),
    }


def _run_minhash(spec: Spec, documents: Sequence[Document]) -> Run:
    hasher = MinHasher(spec.supers.permutations)
    hasher.signatures([d.text for d in documents[:2]])  # compile (or load) the kernel first
    started = time.perf_counter()
    signatures = hasher.signatures([d.text for d in documents])
    supers = super_shingles(signatures, spec.supers)
    seconds = time.perf_counter() - started
    left, right = _shared_super_shingles(supers, spec.supers.match)
    similarity = minhash_estimates(signatures, left, right)
    accepted = similarity >= spec.verify
    pairs = Pairs(left, right, np.full(left.size, np.nan))
    return Run(spec, pairs, accepted, similarity, seconds)


def _shared_super_shingles(
    supers: npt.NDArray[np.uint64], match: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Pairs of pages with >= ``match`` equal super-shingles (same group, same value)."""
    n, groups = supers.shape
    # One token per (group, value): the group index goes into the low bits of a re-hash.
    token = supers.astype(np.uint64) * np.uint64(groups) + np.arange(groups, dtype=np.uint64)
    token_flat = token.ravel()
    doc = np.repeat(np.arange(n, dtype=np.int64), groups)
    order = np.lexsort((doc, token_flat))
    left, right = qk.posting_pairs(
        token_flat[order].view(np.int64), doc[order], np.ones(n, dtype=np.int64), 0.0
    )
    keys, counts = np.unique(quality.pair_keys(left, right, n), return_counts=True)
    keys = keys[counts >= match]
    return keys // max(n, 1), keys % max(n, 1)
