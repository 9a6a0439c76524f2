"""The crawl report: one self-contained HTML page (plots inlined as PNG) from decisions.jsonl.

Pure functions from decisions to figures and HTML, so the report is testable without a crawl.
The bandwidth estimate is explicit about its assumption: every suppressed outlink would have
cost the mean page size of the crawl (``--page-bytes``, default 50 KB), and a suppressed page's
outlinks are counted from the decision that suppressed it or from the page it duplicates.
"""

from __future__ import annotations

import base64
import html
import io
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from neardup.extras import missing_extra

try:
    import matplotlib
except ModuleNotFoundError as exc:
    raise missing_extra("report", "the crawl report (neardup report)") from exc

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from neardup.rules_table import RuleRow, rules_html
from neardup.summary import (
    SUPPRESSED_VERDICTS,
    CrawlSummary,
    links_of,
    summarise,
    suppressed_links,
)

__all__ = [
    "CrawlSummary",
    "figures",
    "render_html",
    "summarise",
    "suppressed_links",
    "write_report",
]

logger = logging.getLogger(__name__)

VERDICT_COLOURS = {
    "unique": "#2b8a3e",
    "changed": "#74b816",
    "unchanged": "#adb5bd",
    "near_duplicate": "#e8590c",
    "exact_duplicate": "#c92a2a",
}


def figures(summary: CrawlSummary, page_bytes: int) -> dict[str, str]:
    """Base64 PNGs keyed by title."""
    return {
        "Verdicts over time": _png(_verdicts_over_time, summary),
        "Hamming distance of matches": _png(_distance_histogram, summary),
        "Duplicates per host (top 15)": _png(_duplicates_per_host, summary),
        "Bandwidth saved (estimate)": _png(lambda ax, s: _bandwidth(ax, s, page_bytes), summary),
    }


def render_html(
    summary: CrawlSummary,
    page_bytes: int,
    title: str = "neardup crawl report",
    rules: Sequence[RuleRow] = (),
) -> str:
    """The report; ``rules`` (a crawl's URL rules, :mod:`neardup.rules_table`) adds their table."""
    counts = summary.verdicts
    saved = suppressed_links(summary) * page_bytes
    rows = "".join(
        f"<tr><td>{html.escape(v)}</td><td>{counts.get(v, 0):,}</td></tr>" for v in VERDICT_COLOURS
    )
    images = "".join(
        f"<figure><img alt='{html.escape(t)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{html.escape(t)}</figcaption></figure>"
        for t, data in figures(summary, page_bytes).items()
    )
    return _PAGE.format(
        title=html.escape(title),
        pages=len(summary.final),
        dups=len(summary.suppressed),
        share=100 * len(summary.suppressed) / max(len(summary.final), 1),
        corrections=summary.corrections,
        undecodable=summary.undecodable,
        saved=saved / 1e6,
        page_kb=page_bytes / 1000,
        rows=rows,
        images=images,
        rules=rules_html(rules),
    )


def write_report(
    decisions: Path, out: Path, page_bytes: int = 50_000, rules: Sequence[RuleRow] = ()
) -> CrawlSummary:
    with decisions.open("rb") as source:
        summary = summarise(source)
    out.write_text(render_html(summary, page_bytes, rules=rules), encoding="utf-8")
    logger.info("report for %d pages written to %s", len(summary.final), out)
    return summary


def _png(draw: Any, summary: CrawlSummary) -> str:
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    try:
        draw(ax, summary)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _verdicts_over_time(ax: Any, summary: CrawlSummary) -> None:
    decisions = sorted(summary.final.values(), key=lambda d: d.fetched_at)
    if not decisions:
        ax.text(0.5, 0.5, "no decisions", ha="center")
        return
    start = decisions[0].fetched_at
    for verdict, colour in VERDICT_COLOURS.items():
        times = [d.fetched_at - start for d in decisions if d.verdict.value == verdict]
        if times:
            ax.plot(times, range(1, len(times) + 1), label=verdict, color=colour)
    ax.set_xlabel("seconds since first fetch")
    ax.set_ylabel("pages (cumulative)")
    ax.legend(loc="upper left", fontsize=8)


def _distance_histogram(ax: Any, summary: CrawlSummary) -> None:
    distances = [  # a recrawl's unchanged duplicate's distance is to its previous fetch
        d.distance
        for d in summary.suppressed
        if d.distance is not None and d.verdict.value in SUPPRESSED_VERDICTS
    ]
    top = max(distances, default=3)
    ax.hist(distances, bins=range(0, top + 2), color="#e8590c", align="left", rwidth=0.8)
    ax.set_xlabel("Hamming distance to the original")
    ax.set_ylabel("duplicates")


def _duplicates_per_host(ax: Any, summary: CrawlSummary) -> None:
    hosts = Counter(d.host for d in summary.suppressed).most_common(15)
    ax.barh([h for h, _ in reversed(hosts)], [n for _, n in reversed(hosts)], color="#c92a2a")
    ax.set_xlabel("duplicate pages")


def _bandwidth(ax: Any, summary: CrawlSummary, page_bytes: int) -> None:
    by_url = {d.url: d for d in summary.final.values()}
    saved, times, total = [], [], 0
    decisions = sorted(summary.suppressed, key=lambda d: d.fetched_at)
    start = decisions[0].fetched_at if decisions else 0.0
    for decision in decisions:
        total += links_of(decision, by_url) * page_bytes
        times.append(decision.fetched_at - start)
        saved.append(total / 1e6)
    ax.step(times, saved, where="post", color="#1971c2")
    ax.set_xlabel("seconds since first duplicate")
    ax.set_ylabel("MB not fetched (est.)")


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #212529; }}
.cards {{ display: flex; gap: 1rem; flex-wrap: wrap; }}
.card {{ background: #f1f3f5; border-radius: 8px; padding: .8rem 1.2rem; min-width: 9rem; }}
.card b {{ display: block; font-size: 1.6rem; }}
figure {{ display: inline-block; margin: 1rem 1rem 0 0; }}
table {{ border-collapse: collapse; margin-top: 1rem; }}
td {{ padding: .2rem .8rem; border-bottom: 1px solid #dee2e6; }}
</style></head><body>
<h1>{title}</h1>
<div class="cards">
<div class="card"><b>{pages:,}</b>pages decided</div>
<div class="card"><b>{dups:,}</b>duplicates ({share:.1f}%)</div>
<div class="card"><b>{saved:.1f} MB</b>not fetched (est., {page_kb:.0f} KB/page)</div>
<div class="card"><b>{corrections:,}</b>corrections</div>
<div class="card"><b>{undecodable:,}</b>undecodable lines</div>
</div>
<table>{rows}</table>
{rules}
{images}
</body></html>
"""
