"""``neardup eval``: precision and recall of near-duplicate detectors on a labelled corpus.

The corpus is a directory of HTML pages (visible text extracted as the crawler does) or a JSONL
file of {"id", "text"[, "title", "source"]}. Labels come from the exact reference (Jaccard of
word 4-shingles >= 0.9), overridden by an optional JSONL of labelled pairs {"a", "b", "label"}
(page ids). Pages are grouped by their "source" (a directory's: its first folder, e.g. the
host of a ``--site`` folder), and each detector's page precision and recall are also given per
group. Writes ``summary.json`` and PNG plots into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_DETECTORS = (
    "hybrid:title_weight=0,shingle=1,tf_cap=4,k=8,tables=3,replicas=2,flips=1,bins=1024,bits=2",
    "hybrid:title_weight=0,shingle=1,tf_cap=4,k=6,tables=3,replicas=2,bins=1024,bits=2",
    "hybrid:title_weight=0,shingle=2,k=3,bins=256,bits=1,threshold=0.9",
    "simhash:shingle=4,k=3",
    "minhash:groups=6,size=14,match=2",
)


def register(commands: Any) -> None:
    """Add ``eval`` to the umbrella parser."""
    parser = commands.add_parser(
        "eval",
        help="score near-duplicate detectors on a labelled corpus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("corpus", type=Path, help="directory of HTML pages, or a JSONL file")
    parser.add_argument("--pairs", type=Path, help="JSONL of labelled pairs {a, b, label}")
    parser.add_argument(
        "-d",
        "--detector",
        action="append",
        metavar="SPEC",
        help="name[:key=value,...], repeatable; e.g. hybrid:title_weight=0,k=3,bins=512,bits=2"
        f" (default: {' '.join(DEFAULT_DETECTORS)})",
    )
    parser.add_argument("--out", type=Path, help="write summary.json and PNG plots here")
    parser.add_argument("--no-plots", action="store_true", help="summary only")
    parser.set_defaults(handler=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from dedup_worker.errors import ConfigError
    from neardup.evaluation import detectors, quality
    from neardup.extras import require_extra

    if args.out and not args.no_plots:  # before the work, not after it
        require_extra("report", "neardup eval's plots (or pass --no-plots)")
    try:
        specs = [detectors.parse_spec(s) for s in args.detector or DEFAULT_DETECTORS]
        ids, documents, groups = load_corpus(args.corpus)
        overrides = load_pairs(args.pairs, ids) if args.pairs else []
    except (ConfigError, OSError, ValueError) as exc:
        print(f"neardup: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    sets = quality.shingle_sets([d.text for d in documents])
    reference = quality.similar_pairs(sets)
    labels = quality.make_labels(len(ids), reference, overrides)
    logger.info("reference: %d pairs in %.1f s", len(reference), time.perf_counter() - started)
    summary: dict[str, Any] = {"corpus": _corpus_summary(args.corpus, sets, labels)}
    runs = [detectors.run(spec, documents) for spec in specs]
    summary["detectors"] = [
        _detector_summary(spec_text(args, i), r, labels, groups) for i, r in enumerate(runs)
    ]
    print(format_table(summary))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if not args.no_plots:
            write_plots(args.out, summary, runs, reference, sets)
    return 0


def spec_text(args: argparse.Namespace, index: int) -> str:
    chosen: list[str] = args.detector or list(DEFAULT_DETECTORS)
    return chosen[index]


# ---- input ---------------------------------------------------------------------------------


def load_corpus(path: Path) -> tuple[list[str], list[Any], list[str]]:
    """(ids, documents, groups) in corpus order: JSONL line order, or HTML files sorted by
    path. A page's group is its ``source`` ("" if none), a file's its first folder."""
    from dedup_worker.core.simhash import Document

    if path.is_dir():
        return _load_html(path)
    ids: list[str] = []
    documents: list[Document] = []
    groups: list[str] = []
    with path.open(encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ids.append(str(row["id"]))
                documents.append(Document(str(row["text"]), str(row.get("title") or "")))
                groups.append(str(row.get("source") or ""))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(f"{path}:{number}: not a {{id, text}} object ({exc})") from None
    return ids, documents, groups


def _load_html(root: Path) -> tuple[list[str], list[Any], list[str]]:
    from neardup.extras import require_extra

    require_extra("crawler", "neardup eval on a directory of HTML pages (text extraction)")
    from crawler.extract import extract
    from dedup_worker.core.simhash import Document

    ids: list[str] = []
    documents: list[Document] = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".html", ".htm")):
        page = extract(path.read_bytes(), path.resolve().as_uri())
        ids.append(path.relative_to(root).as_posix())
        documents.append(Document(page.text, page.title, page.headings))
    groups = [ident.split("/")[0] if "/" in ident else "" for ident in ids]
    return ids, documents, groups


def load_pairs(path: Path, ids: list[str]) -> list[tuple[int, int, bool]]:
    """Labelled pairs by page id; pairs naming unknown pages are skipped with a warning."""
    index = {ident: i for i, ident in enumerate(ids)}
    out: list[tuple[int, int, bool]] = []
    skipped = 0
    with path.open(encoding="utf-8") as source:
        for line in filter(str.strip, source):
            row = json.loads(line)
            a, b = index.get(str(row["a"])), index.get(str(row["b"]))
            if a is None or b is None or a == b:
                skipped += 1
                continue
            out.append((a, b, bool(row["label"])))
    if skipped:
        logger.warning("%s: %d labelled pairs name unknown pages; skipped", path, skipped)
    return out


# ---- output --------------------------------------------------------------------------------


def _corpus_summary(path: Path, sets: Any, labels: Any) -> dict[str, Any]:
    return {
        "path": str(path),
        "pages": len(sets),
        "positive_pairs": labels.positive_pairs,
        "positive_pages": int(labels.positive_pages.sum()),
        "median_shingles": int(np.median(sets.sizes)) if len(sets) else 0,
    }


def _detector_summary(text: str, run: Any, labels: Any, groups: list[str]) -> dict[str, Any]:
    from neardup.evaluation import detectors, quality

    matched = run.matched()
    summary: dict[str, Any] = {
        "spec": text,
        "k": None if run.spec.kind == "minhash" else run.spec.k,
        "bytes_per_page": run.spec.bytes_per_page,
        "docs_per_second": round(labels.n / run.seconds) if run.seconds > 0 else None,
        "pair": quality.score_pairs(matched.left, matched.right, labels).as_dict(),
        "page": quality.score_pages(matched.left, matched.right, labels).as_dict(),
    }
    if len(set(groups)) > 1:
        by_group = quality.score_pages_by_group(matched.left, matched.right, labels, groups)
        summary["page_by_source"] = {name: s.as_dict() for name, s in by_group.items()}
    if run.spec.kind != "minhash":
        summary["by_distance"] = quality.curve(run.pairs, run.accepted, labels)
    if run.fingerprints is not None:
        n = max(labels.n, 1)
        keys = labels.positive_keys
        positives = quality.Pairs(keys // n, keys % n, np.ones(keys.size))
        summary["positives_by_distance"] = detectors.positives_by_distance(
            run.fingerprints, positives, matched
        )
        summary["missed"] = detectors.missed_causes(run, labels)
    return summary


def format_table(summary: dict[str, Any]) -> str:
    corpus = summary["corpus"]
    lines = [
        f"{corpus['pages']} pages, {corpus['positive_pairs']} positive pairs, "
        f"{corpus['positive_pages']} positive pages (J >= 0.9 of word 4-shingles)",
        f"{'detector':<52} {'k':>3} {'page P':>7} {'page R':>7} {'pair P':>7} {'pair R':>7}"
        f" {'docs/s':>8} {'B/page':>7}",
    ]
    for d in summary["detectors"]:
        k = "-" if d["k"] is None else str(d["k"])
        lines.append(
            f"{d['spec']:<52} {k:>3} {d['page']['precision']:>7.3f} {d['page']['recall']:>7.3f}"
            f" {d['pair']['precision']:>7.3f} {d['pair']['recall']:>7.3f}"
            f" {d['docs_per_second'] or 0:>8,} {d['bytes_per_page']:>7}"
        )
    for d in summary["detectors"]:
        if "positives_by_distance" in d:
            lines.append(_distance_line(d))
    for d in summary["detectors"]:
        if "page_by_source" in d:
            lines.append(_source_line(d))
    return "\n".join(lines)


def _source_line(detector: dict[str, Any]) -> str:
    """Page precision / recall in each group of pages (its positive pages in brackets)."""
    cells = " ".join(
        f"{name or '(none)'} {s['precision']:.3f}/{s['recall']:.3f} ({s['positives']})"
        for name, s in detector["page_by_source"].items()
    )
    return f"  {detector['spec']}: page P/R by source: {cells}"


def _distance_line(detector: dict[str, Any]) -> str:
    """Positive pages per distance to their nearest earlier partner, found/all: where recall
    is lost (e.g. pairs beyond the detector's k, or rejected by its verifier), and how many
    missed pages no candidate reached against how many the verifier turned down."""
    view = detector["positives_by_distance"]
    found = view["found_pages"]
    cells = " ".join(f"{d}:{found.get(d, 0)}/{count}" for d, count in view["pages"].items())
    missed = detector.get("missed")
    causes = (
        f"; missed: {missed['beyond_reach']} beyond reach, {missed['rejected']} rejected"
        if missed
        else ""
    )
    return f"  {detector['spec']}: positive pages by distance, found/all: {cells}{causes}"


# ---- plots ---------------------------------------------------------------------------------


def write_plots(
    out: Path, summary: dict[str, Any], runs: list[Any], reference: Any, sets: Any
) -> None:
    """precision_recall.png (per k, like Manku et al.'s Figure 1), resemblance.png and, for
    verified detectors, estimate.png (estimated against true resemblance of candidates)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    _plot_curves(plt, out / "precision_recall.png", summary["detectors"])
    _plot_resemblance(plt, out / "resemblance.png", reference.value)
    verified = [
        (d["spec"], r)
        for d, r in zip(summary["detectors"], runs, strict=True)
        if r.similarity is not None and r.spec.kind == "hybrid"
    ]
    if verified:
        _plot_estimates(plt, out / "estimate.png", verified, sets)


def _plot_curves(plt: Any, path: Path, detectors: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, level in zip(axes, ("page", "pair"), strict=True):
        for i, d in enumerate(d for d in detectors if "by_distance" in d):
            ks = [row["k"] for row in d["by_distance"]]
            color = f"C{i}"
            ax.plot(
                ks,
                [r[level]["precision"] for r in d["by_distance"]],
                "-o",
                color=color,
                ms=3,
                label=f"{d['spec']} precision",
            )
            ax.plot(
                ks,
                [r[level]["recall"] for r in d["by_distance"]],
                "--s",
                color=color,
                ms=3,
                label=f"{d['spec']} recall",
            )
        ax.set_title(f"{level} level")
        ax.set_xlabel("Hamming distance k")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("precision / recall (J >= 0.9 of word 4-shingles)")
    axes[1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_resemblance(plt: Any, path: Path, values: Any) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(values, bins=np.linspace(0.9, 1.0, 21), color="C0")
    ax.set_xlabel("Jaccard of word 4-shingles (positive pairs)")
    ax.set_ylabel("pairs")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_estimates(plt: Any, path: Path, verified: list[tuple[str, Any]], sets: Any) -> None:
    from neardup.evaluation import quality

    fig, axes = plt.subplots(1, len(verified), figsize=(5.5 * len(verified), 4.5), squeeze=False)
    for ax, (name, run) in zip(axes[0], verified, strict=True):
        pairs = run.pairs.where(run.pairs.value <= run.spec.k)
        truth = quality.jaccard(sets, pairs.left, pairs.right)
        estimate = run.similarity[run.pairs.value <= run.spec.k]
        ax.scatter(truth, estimate, s=2, alpha=0.3)
        ax.axvline(0.9, color="k", lw=0.8)
        ax.axhline(run.spec.sketch.threshold, color="r", lw=0.8)
        ax.set_xlabel("true resemblance")
        ax.set_ylabel("sketch estimate")
        ax.set_title(name, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
