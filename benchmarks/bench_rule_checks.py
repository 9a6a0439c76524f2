"""How often a URL rule's check passes, by the pair's true resemblance, for sketch shapes the
crawler could keep (``crawler.rules.sketches``: a check compares the two pages' sketches
against a bar two standard errors above 0.9).

Run from the repository root over a folder of real sites (``python tools/build_corpus.py
--sites DIR`` writes the 19 documentation hosts)::

    python benchmarks/bench_rule_checks.py --site DIR [--shapes 10x2,11x2,12x1,12x2]

The pairs are those a path-prefix rewrite or a host alias maps: every page and the page at the
same path under another first segment of its host (releases, ``/latest/``), or at the same path
on another host (renderings). Exact resemblance: Jaccard of word 4-shingles of the text the
spider extracts (``neardup.demo.static.site_truth``). Per shape: bytes a page, the standard
error at J 0.9, the bar, and the share of pairs in each band of J that pass. A pair under 0.9
that passes vouches for a unique page; a pair above it that fails counts against a rule that
may hold.
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from dedup_worker.core.sketch import DEFAULT_SKETCH, SketchConfig, Sketcher, estimate_rows
from neardup.demo.static import StaticSite, site_truth
from neardup.evaluation.quality import jaccard, shingle_sets

BANDS = (0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.95, 1.01)


def mapped_pairs(pages: list[str]) -> list[tuple[int, int]]:
    """Index pairs: same host and rest of the path under another first segment, or same path
    on another host."""
    at = {url: i for i, url in enumerate(pages)}
    groups: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for url in pages:
        parts = urlsplit(url)
        segments = parts.path.split("/")
        if len(segments) > 2:
            groups[(parts.netloc, segments[1])]["/".join(segments[2:])] = url
    pairs = []
    for a, b in itertools.combinations(sorted(groups), 2):
        if (a[0] == b[0]) == (a[1] == b[1]):  # one of host and segment must differ, not both
            continue
        for rest, url in groups[a].items():
            other = groups[b].get(rest)
            if other is not None:
                pairs.append((at[url], at[other]))
    return pairs


def shape(text: str) -> SketchConfig:
    log2_bins, bits = (int(part) for part in text.split("x"))
    return replace(DEFAULT_SKETCH, log2_bins=log2_bins, bits=bits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="folder of host folders")
    parser.add_argument("--shapes", default="10x2,11x2,12x1,12x2", help="log2(bins)xbits, ...")
    args = parser.parse_args()
    site = StaticSite(args.site)
    base = {host: f"http://{address}:8000" for host, address in site.addresses().items()}
    truth = site_truth(site, base)
    pages = list(truth.pages)
    texts = [truth.rendered[url].text for url in pages]
    pairs = np.array(mapped_pairs(pages), dtype=np.int64)
    left, right = pairs[:, 0], pairs[:, 1]
    exact = jaccard(shingle_sets(texts), left, right)
    bands = list(itertools.pairwise(BANDS))
    counts = [int(((exact >= lo) & (exact < hi)).sum()) for lo, hi in bands]
    print(f"{len(pages)} pages, {len(pairs)} pairs a rule maps; pairs by J:")
    print("  " + "  ".join(f"{lo:.2f}+ {n}" for (lo, _), n in zip(bands, counts, strict=True)))
    for text in args.shapes.split(","):
        config = shape(text)
        error = config.standard_error(config.threshold)
        bar = round(config.threshold + 2 * error, 3)
        rows = Sketcher(config).sketch_texts(texts)
        passed = estimate_rows(rows, left, right) >= bar
        shares = [passed[(exact >= lo) & (exact < hi)].mean() for lo, hi in bands]
        print(
            f"{config.bins} x {config.bits} bit ({config.nbytes} B a page), error at 0.9 "
            f"{error:.4f}, bar {bar}: share passing "
            + "  ".join(f"{lo:.2f}+ {s:.3f}" for (lo, _), s in zip(bands, shares, strict=True))
        )


if __name__ == "__main__":
    main()
