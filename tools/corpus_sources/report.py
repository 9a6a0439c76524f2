"""The corpus report: pages and pairs per family, Jaccard bands, Hamming bands.

A pair's *relation* is read off its two ids: ``mirror`` (one path of one site release, two
generators), ``release`` (one path and generator, two releases), ``mirror+release`` (both
differ), ``template`` (two paths of one site: shared chrome), ``short-variant`` (a short page
and its edited variant), ``short-other`` (two different short pages), ``<source>`` for two
pages of one of the original sources (rust, man...), ``cross`` otherwise.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from corpus_sources.common import Doc
from dedup_worker.core.simhash import Document, FeatureConfig, Fingerprinter
from neardup.evaluation import quality

JACCARD_BANDS = ((0.5, 0.8), (0.8, 0.85), (0.85, 0.9), (0.9, 0.95), (0.95, 1.0))
HAMMING_BANDS = ((0, 3), (4, 6), (7, 9), (10, 12), (13, 64))
FINGERPRINTS = {
    "default (word pairs)": FeatureConfig(shingle=2, title_weight=0),
    "single words": FeatureConfig(shingle=1, title_weight=0),
}
_SITE_ID = re.compile(r"^(?P<source>[\w.-]+)@(?P<release>[^/]+)/(?P<generator>[^:]+):(?P<path>.+)$")
_SHORT_ID = re.compile(r"^short:(?P<source>[\w-]+)/(?P<window>.+)#(?P<variant>[\w-]+)$")


def relation(a: Doc, b: Doc) -> str:
    """How two pages relate, from their ids (see the module docstring)."""
    site_a, site_b = _SITE_ID.match(a.id), _SITE_ID.match(b.id)
    if a.source.startswith("site:") and site_a and site_b and a.source == b.source:
        same_release = site_a["release"] == site_b["release"]
        same_generator = site_a["generator"] == site_b["generator"]
        if site_a["path"] != site_b["path"]:
            return "template" if same_release and same_generator else "site-other"
        if same_release:
            return "mirror"
        return "release" if same_generator else "mirror+release"
    short_a, short_b = _SHORT_ID.match(a.id), _SHORT_ID.match(b.id)
    if short_a and short_b:
        same = (short_a["source"], short_a["window"]) == (short_b["source"], short_b["window"])
        return "short-variant" if same else "short-other"
    if a.source == b.source:
        return a.source
    return "cross"


def jaccard_bands(values: np.ndarray) -> dict[str, int]:
    out = {f"[{lo},{hi})": int(((values >= lo) & (values < hi)).sum()) for lo, hi in JACCARD_BANDS}
    out["1.0"] = int((values >= 1.0).sum())
    return out


def hamming_bands(distances: np.ndarray) -> dict[str, int]:
    return {
        (f"{lo}-{hi}" if hi < 64 else f"{lo}+"): int(((distances >= lo) & (distances <= hi)).sum())
        for lo, hi in HAMMING_BANDS
    }


def _distances(docs: Sequence[Doc], pairs: quality.Pairs, config: FeatureConfig) -> np.ndarray:
    fps = Fingerprinter(config).fingerprint_many([Document(d.text, d.title) for d in docs])
    xor = fps[pairs.left] ^ fps[pairs.right]
    return np.bitwise_count(xor).astype(np.int64)


def family(source: str) -> str:
    return source.split(":", maxsplit=1)[0] if ":" in source else "original"


def build_report(docs: Sequence[Doc], pairs: quality.Pairs) -> dict[str, object]:
    """The report of point 2 of issue 11 (all pairs given have resemblance >= 0.5)."""
    relations = np.array(
        [
            relation(docs[a], docs[b])
            for a, b in zip(pairs.left.tolist(), pairs.right.tolist(), strict=True)
        ],
        dtype=object,
    )
    positive = pairs.value >= quality.THRESHOLD
    near_miss = (pairs.value >= 0.8) & ~positive
    distances = {name: _distances(docs, pairs, cfg) for name, cfg in FINGERPRINTS.items()}
    groups = ["all", *sorted(set(relations.tolist()))]
    by_relation: dict[str, object] = {}
    for group in groups:
        member = np.ones(len(pairs), dtype=bool) if group == "all" else relations == group
        entry: dict[str, object] = {
            "pairs": int(member.sum()),
            "positive_pairs": int((member & positive).sum()),
            "jaccard_bands": jaccard_bands(pairs.value[member]),
        }
        for name, dist in distances.items():
            entry[f"hamming_positives {name}"] = hamming_bands(dist[member & positive])
            entry[f"hamming_near_misses {name}"] = hamming_bands(dist[member & near_miss])
        by_relation[group] = entry
    return {
        "pages_by_family": dict(sorted(Counter(family(d.source) for d in docs).items())),
        "pages_by_source": dict(sorted(Counter(d.source for d in docs).items())),
        "positive_pairs_by_source": _positives_by_source(docs, pairs.where(positive)),
        "by_relation": by_relation,
    }


def _positives_by_source(docs: Sequence[Doc], positives: quality.Pairs) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for a, b in zip(positives.left.tolist(), positives.right.tolist(), strict=True):
        sa, sb = docs[a].source, docs[b].source
        counts[sa if sa == sb else "cross"] += 1
    return dict(sorted(counts.items()))


def format_report(report: dict[str, object]) -> str:
    """The report as text tables (printed by the tool)."""
    lines = ["pages by source:"]
    pages = report["pages_by_source"]
    positives = report["positive_pairs_by_source"]
    assert isinstance(pages, dict) and isinstance(positives, dict)
    for source in sorted(set(pages) | set(positives)):
        lines.append(
            f"  {source:<16} pages {pages.get(source, 0):>6}  positive pairs "
            f"{positives.get(source, 0):>7}"
        )
    by_relation = report["by_relation"]
    assert isinstance(by_relation, dict)
    for group, entry in by_relation.items():
        lines.append(f"{group}: {entry['pairs']} pairs >= 0.5, {entry['positive_pairs']} positive")
        lines.append("  jaccard " + _row(entry["jaccard_bands"]))
        for key in sorted(k for k in entry if k.startswith("hamming")):
            lines.append(f"  {key:<42} " + _row(entry[key]))
    return "\n".join(lines)


def _row(counts: dict[str, int]) -> str:
    return "  ".join(f"{band} {count}" for band, count in counts.items())
