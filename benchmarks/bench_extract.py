"""Benchmark the built-in extractors of ``NEARDUP_EXTRACTOR`` (``fast``:
:func:`crawler.extract.extract`, lxml events; ``bs4``: :mod:`crawler.extract_bs4`, BeautifulSoup)
on a realistic ~50 KB page.

Run from the repository root (with the package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_extract.py [--runs 300] [--size-kb 50]

The page has what real article pages have: a head full of meta tags, inline and JSON-LD
scripts, a style block, a header nav, a hidden mobile menu, inline SVG icons, breadcrumbs, an
article with linked paragraphs, a data table, a sidebar, comments and a link-heavy footer.

"cold" clears the URL canonicalisation cache before every page (every link is new: the worst
case); "warm" keeps it (nav/footer links repeat across a site's pages, so a crawl sits between
the two). The stage breakdown shows where the time goes; "lxml.html parse" is the raw lxml
tree parse of the same markup, for reference only (extract() builds no tree).
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import statistics
import time
from collections.abc import Callable

import lxml.html
from bs4 import BeautifulSoup

from crawler import extract_bs4
from crawler.extract import DEFAULT_OPTIONS, decode_html, extract, walk_html
from crawler.extractors import BUILT_IN, Extractor, load_extractor
from crawler.urls import clear_url_caches

_WORD_TEXT = """the of and to in is was for on that with as by at from this his her are were be have
    which has not but an they their or one had we all been would its who said more there government
    market report season players company city police school research water energy climate history
    network results council weekend agreement development officials"""
WORDS = _WORD_TEXT.split()


def _sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random, i: int) -> str:
    sentences = [_sentence(rng, rng.randint(8, 20)) for _ in range(rng.randint(3, 6))]
    link = f'<a href="/news/2024/story-{i}?utm_source=inline&amp;ref=art">{sentences[0]}</a>'
    return f"<p>{link} {' '.join(sentences[1:])} <em>{_sentence(rng, 3)}</em></p>\n"


def _nav(rng: random.Random, prefix: str, n: int) -> str:
    items = "".join(
        f'<li class="nav-item"><a class="nav-link" href="/{prefix}/{i}">'
        f"{rng.choice(WORDS).title()} {i}</a></li>"
        for i in range(n)
    )
    return f'<ul class="{prefix}">{items}</ul>'


def _table(rng: random.Random, rows: int) -> str:
    head = "<thead><tr><th>Team</th><th>Played</th><th>Won</th><th>Points</th></tr></thead>"
    body = "".join(
        f"<tr><td>{rng.choice(WORDS).title()} FC</td><td>{rng.randint(1, 38)}</td>"
        f"<td>{rng.randint(0, 30)}</td><td>{rng.randint(0, 99)}</td></tr>"
        for _ in range(rows)
    )
    return f'<table class="standings">{head}<tbody>{body}</tbody></table>\n'


SVG_ICON = (
    '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M12 2L2 7l10 5 10-5-10-5z"/>'
    '<path d="M2 17l10 5 10-5"/></svg>'
)
HEAD = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>City council approves new energy plan | Example News</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="description" content="The council voted on the plan on Tuesday.">
<meta property="og:title" content="City council approves new energy plan">
<link rel="stylesheet" href="/static/site.css"><link rel="canonical" href="/news/energy-plan">
<script type="application/ld+json">{"@context":"https://schema.org","@type":"NewsArticle",
"headline":"City council approves new energy plan","datePublished":"2024-05-01"}</script>
<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}
gtag('js',new Date());gtag('config','G-XXXX');</script>
<style>.nav{display:flex}.hidden{display:none}body{font-family:sans-serif;margin:0}</style>
</head>
"""


def build_page(size_kb: int = 50, seed: int = 7) -> bytes:
    """Build a realistic article page of roughly ``size_kb`` kilobytes."""
    rng = random.Random(seed)
    top = (
        f"<body><header><a href='/'>{SVG_ICON}Example News</a><nav>{_nav(rng, 'section', 40)}"
        f"</nav><div class='mobile-menu' style='display:none'>{_nav(rng, 'm', 15)}</div></header>"
        "<!-- breadcrumbs --><ol class='crumbs'><li><a href='/'>Home</a></li>"
        "<li><a href='/news'>News</a></li></ol>\n<main><article><h1>City council approves new "
        "energy plan</h1><p class='byline'>By <a href='/authors/jane'>Jane Doe</a> &middot; "
        "1 May 2024</p>\n"
    )
    tail = (
        f"</article><aside><h2>Related</h2>{_nav(rng, 'related', 10)}</aside></main>"
        f"<footer>{_nav(rng, 'footer', 50)}<p>&copy; 2024 Example News. "
        "<a href='mailto:desk@example.com'>Contact</a></p></footer>"
        "<script src='/static/app.js'></script></body></html>"
    )
    parts = [HEAD, top, _table(rng, 20)]
    i = 0
    while sum(map(len, parts)) + len(tail) < size_kb * 1024:
        if i % 6 == 5:
            parts.append(f"<h2>{_sentence(rng, 5)}</h2>{SVG_ICON}\n")
        parts.append(_paragraph(rng, i))
        i += 1
    parts.append(tail)
    return "".join(parts).encode("utf-8")


#: The built-in values of NEARDUP_EXTRACTOR, loaded as the crawler loads them.
IMPLEMENTATIONS: dict[str, Extractor] = {
    f"NEARDUP_EXTRACTOR={name}": load_extractor(name) for name in BUILT_IN
}


def _time(
    fn: Callable[[], object], runs: int, before: Callable[[], None] | None = None
) -> list[float]:
    samples = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _report(label: str, samples: list[float]) -> None:
    median = statistics.median(samples)
    p95 = statistics.quantiles(samples, n=20)[-1]
    print(f"{label:<40} median {median:7.3f} ms   p95 {p95:7.3f} ms   {1000 / median:7.0f} pages/s")


def _bench_extract(page: bytes, url: str, runs: int) -> None:
    for name, implementation in IMPLEMENTATIONS.items():
        run = functools.partial(implementation, page, url, None, DEFAULT_OPTIONS)
        _time(run, 20)  # warm up imports and caches
        gc.collect()
        _report(f"{name}, cold URL cache", _time(run, runs, clear_url_caches))
        _report(f"{name}, warm URL cache", _time(run, runs))


def _bench_stages(page: bytes, runs: int) -> None:
    print("stages (medians):")
    _, html = decode_html(page)
    stages: dict[str, Callable[[], object]] = {
        "  decode": lambda: decode_html(page),
        "  lxml parse + event walk": lambda: walk_html(html, False, True),
        # The tree the bs4 extractor builds (its walk is the rest of its time above).
        "  bs4 + lxml tree build": lambda: BeautifulSoup(
            html, "lxml", multi_valued_attributes=None
        ),
        "  lxml.html tree parse (ref.)": lambda: lxml.html.fromstring(html),
    }
    for label, fn in stages.items():
        _report(label, _time(fn, runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--size-kb", type=int, default=50)
    args = parser.parse_args()

    page = build_page(args.size_kb)
    url = "https://www.example.com/news/2024/energy-plan"
    result = extract(page, url)
    if extract_bs4.extract(page, url) != result:
        raise SystemExit("the lxml and bs4 implementations disagree on the benchmark page")
    print(
        f"page: {len(page) / 1024:.1f} KB, {len(result.text)} chars of text, "
        f"{len(result.headings)} headings, {len(result.outlinks)} outlinks; {args.runs} runs"
    )
    _bench_extract(page, url, args.runs)
    _bench_stages(page, args.runs)


if __name__ == "__main__":
    main()
