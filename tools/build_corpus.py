"""Build the development corpus for ``neardup eval`` from real documents on this machine.

    python tools/build_corpus.py OUT_DIR [--scale 1.0] [--fixture tests/fixtures/quality]

Sources (each document keeps an id naming its source and path):

* ``rust``: the HTML documentation of two Rust toolchains (stable 1.95 and nightly 1.97):
  rustdoc API pages (std/core/alloc...: one template, navigation sidebars, x86 and x86_64
  re-exports, std re-exports of core) and mdbook books (the book, reference, rust-by-example...).
  The same path in both releases is a real "new version" pair, identical or changed.
* ``html``: other HTML manuals (Node.js API, npm, libxslt, valgrind, libffi).
* ``license``: license files of installed Python packages and Debian ``copyright`` files: many
  MIT/BSD/Apache variants differing in a holder name or one clause.
* ``man``: English man pages (troff macros stripped).
* ``pydoc``: docstrings of the Python standard library in nine Python releases (2.7 to 3.13)
  and of vendored copies of packages (pip's ``_vendor`` in several pip releases, gsutil's
  ``third_party``).

Labels are the exact reference (Jaccard of word 4-shingles >= 0.9, ``quality.similar_pairs``).
Writes ``corpus.jsonl`` ({"id", "title", "text", "source"}, in a fixed pseudo-random order),
``pairs.jsonl`` (every pair with resemblance >= 0.5: {"a", "b", "jaccard", "label"}, ids) and
``stats.json``. With ``--fixture DIR``, also a small labelled subset for the tests (< 2 MB).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import logging
import re
import sys
import time
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dedup_worker.core import quality

logger = logging.getLogger("build_corpus")

RUST = Path("/root/.rustup/toolchains")
TOOLCHAINS = ("stable-x86_64-unknown-linux-gnu", "nightly-x86_64-unknown-linux-gnu")
BOOKS = (
    "book",
    "cargo",
    "clippy",
    "edition-guide",
    "embedded-book",
    "nomicon",
    "reference",
    "rust-by-example",
    "rustc",
    "rustdoc",
    "style-guide",
    "unstable-book",
    "error_codes",
)
API = ("std", "core", "alloc", "proc_macro", "test", "std_detect")
OTHER_HTML = (
    "/usr/share/doc/nodejs/api",
    "/usr/lib/node_modules/npm/docs/output",
    "/usr/share/doc/libxslt1-dev",
    "/usr/share/doc/valgrind/html",
    "/usr/share/doc/libffi8/html",
)
PYENV = Path("/root/.pyenv/versions")
MAX_HTML_BYTES = 400_000
MIN_WORDS = 1
FIXTURE_PAGE_BYTES = 8000


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str
    source: str


def stable_fraction(key: str) -> float:
    """A deterministic pseudo-random number in [0, 1) for ``key`` (sampling, ordering)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def sampled(key: str, rate: float) -> bool:
    return stable_fraction("sample:" + key) < rate


# ---- HTML ----------------------------------------------------------------------------------


def html_doc(path: Path, doc_id: str, source: str) -> Doc | None:
    from crawler.extract import extract

    body = path.read_bytes()
    if len(body) > MAX_HTML_BYTES:
        return None
    page = extract(body, path.as_uri())
    if page.text.startswith("Redirecting to"):
        return None  # a meta-refresh stub: a crawler follows it rather than indexing it
    return Doc(doc_id, page.title, page.text, source)


def rust_docs(scale: float) -> Iterator[Doc]:
    """Rust HTML docs; a path is sampled once and taken from every toolchain that has it."""
    rates = {"books": 0.5 * scale, "api": 0.2 * scale, "core": 0.04 * scale}
    for toolchain in TOOLCHAINS:
        root = RUST / toolchain / "share/doc/rust/html"
        release = toolchain.split("-")[0]
        for section in BOOKS + API:
            rate = rates["books"] if section in BOOKS else rates["api"]
            rate = rates["core"] if section == "core" else rate
            for path in sorted((root / section).rglob("*.html")):
                rel = path.relative_to(root).as_posix()
                if sampled(rel, rate):
                    doc = html_doc(path, f"rust-{release}:{rel}", "rust")
                    if doc is not None:
                        yield doc


def other_html_docs() -> Iterator[Doc]:
    for base in map(Path, OTHER_HTML):
        for path in sorted(base.rglob("*.htm*")):
            doc = html_doc(path, f"html:{path}", "html")
            if doc is not None:
                yield doc


# ---- licenses -----------------------------------------------------------------------------


def license_docs() -> Iterator[Doc]:
    patterns = ("LICENSE*", "LICENCE*", "COPYING*")
    roots = (PYENV, Path("/usr/lib/google-cloud-sdk"), Path("/usr/lib/node_modules"))
    seen: set[Path] = set()
    for root in roots:
        for pattern in patterns:
            for path in sorted(root.rglob(pattern)):
                if path.is_file() and path not in seen and path.stat().st_size < 200_000:
                    seen.add(path)
                    yield Doc(f"license:{path}", "", read_text(path), "license")
    for path in sorted(Path("/usr/share/doc").glob("*/copyright")):
        yield Doc(f"license:{path}", "", read_text(path), "license")


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


# ---- man pages ----------------------------------------------------------------------------

_ESCAPES = re.compile(
    r"\\(?:f[BIRPC]|f\(..|f\[[^]]*\]|\(..|\[[^]]*\]|\*\(..|\*.|s[-+]?\d|[&e|^0 ])"
)
_MACRO = re.compile(r"^[.'](\w+)\s*(.*)$")
_TEXT_MACROS = {
    "SH",
    "SS",
    "B",
    "I",
    "BR",
    "RB",
    "IR",
    "RI",
    "BI",
    "IB",
    "SM",
    "TP",
    "IP",
    "Nm",
    "Sh",
    "Ss",
    "Nd",
    "Ar",
    "Fl",
    "Pa",
    "It",
    "Xr",
    "Dt",
    "Op",
    "Cm",
    "Dv",
    "Em",
}


def troff_text(source: str) -> str:
    """Readable text of a man page: comments and layout requests dropped, escapes removed."""
    lines: list[str] = []
    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        macro = _MACRO.match(raw)
        if macro and macro.group(1) not in _TEXT_MACROS:
            continue
        text = macro.group(2).replace('"', "") if macro else raw
        lines.append(_ESCAPES.sub(" ", text.replace("\\-", "-")).replace("\\", ""))
    return "\n".join(lines)


def man_docs(scale: float) -> Iterator[Doc]:
    rates = {"man1": 0.08, "man2": 0.5, "man3": 0.25, "man5": 1.0, "man7": 1.0, "man8": 0.5}
    for section, rate in rates.items():
        for path in sorted(Path("/usr/share/man", section).glob("*.gz")):
            if path.is_symlink() or not sampled(path.name, rate * scale):
                continue
            source = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
            if source.lstrip().startswith(".so "):
                continue  # a redirect to another page
            yield Doc(f"man:{section}/{path.name}", path.name, troff_text(source), "man")


# ---- Python docstrings --------------------------------------------------------------------


def docstrings(source: str) -> str:
    """The string statements of a module (its docstrings), via the tokenizer: works on 2.7."""
    found: list[str] = []
    starts_statement = True
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and starts_statement:
                found.append(_unquote(token.string))
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                starts_statement = token.type in (
                    tokenize.NEWLINE,
                    tokenize.INDENT,
                    tokenize.DEDENT,
                )
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return "\n\n".join(found)


def _unquote(literal: str) -> str:
    body = literal.lstrip("rRuUbBfF")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    return body[len(quote) : len(body) - len(quote)]


def python_module_docs(scale: float) -> Iterator[Doc]:
    roots = [*sorted(PYENV.glob("*/lib/python*")), Path("/usr/lib/python3.11")]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(("test", "lib2to3/tests", "idlelib")) or "/test" in rel:
                continue
            if "site-packages" in rel:
                if "/pip/_vendor/" not in rel or not sampled(rel, 0.3 * scale):
                    continue
            elif not sampled(rel, 0.12 * scale):
                continue
            yield from _module_doc(path, f"pydoc:{root.name}/{rel}", rel)
    vendored = Path("/usr/lib/google-cloud-sdk/platform/gsutil/third_party")
    for path in sorted(vendored.rglob("*.py")):
        rel = path.relative_to(vendored).as_posix()
        if "test" not in rel and sampled(rel, 0.3 * scale):
            yield from _module_doc(path, f"pydoc:gsutil/{rel}", rel)


def _module_doc(path: Path, doc_id: str, title: str) -> Iterator[Doc]:
    text = docstrings(read_text(path))
    if text.strip():
        yield Doc(doc_id, title, text, "pydoc")


# ---- assembly ------------------------------------------------------------------------------


def collect(scale: float) -> list[Doc]:
    sources = (
        rust_docs(scale),
        other_html_docs(),
        license_docs(),
        man_docs(scale),
        python_module_docs(scale),
    )
    docs: dict[str, Doc] = {}
    for source in sources:
        started, before = time.perf_counter(), len(docs)
        for doc in source:
            if len(doc.text.split()) >= MIN_WORDS:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--scale", type=float, default=1.0, help="sampling rate multiplier")
    parser.add_argument("--fixture", type=Path, help="also write a small subset here")
    parser.add_argument("--fixture-bytes", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    docs = collect(args.scale)
    pairs = label(docs)
    stats = write_corpus(args.out, docs, pairs)
    print(json.dumps(stats, indent=2))
    if args.fixture:
        subset = fixture_subset(docs, pairs, args.fixture_bytes)
        # Only positives and near misses are listed: the tests recompute the rest exactly.
        fixture_stats = write_corpus(args.fixture, subset, label(subset), floor=0.85)
        print(json.dumps({"fixture": fixture_stats}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
