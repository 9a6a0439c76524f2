"""Coverage and waste of a crawl, against a site's known near-duplicate relation (pure).

The relation is the reference of :mod:`neardup.evaluation.quality`: two pages are partners iff
the Jaccard resemblance of their word 4-shingle sets is >= 0.9. Given a crawl's fetch log in
fetch order:

- **coverage** = pages reachable from the seeds that were fetched, or that have a partner that
  was fetched, over all pages reachable from the seeds (1.0 for no reachable page): the share
  of the site's content the crawl holds;
- **waste** = fetches of a page that already had an earlier-fetched partner, or that was
  itself fetched before, over all fetches (0.0 for no fetch): the share of fetches that
  brought nothing new.

A crawl without suppression has coverage 1.0 and waste W0; issue 13 asks for coverage >= 0.99
and waste <= W0 / 2.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

Partners = Mapping[str, Collection[str]]


@dataclass(frozen=True)
class CrawlMeasures:
    """Coverage and waste with their counts; ``lost`` lists the uncovered reachable pages."""

    reachable: int
    covered: int
    fetches: int
    wasted: int
    lost: tuple[str, ...]

    @property
    def coverage(self) -> float:
        return self.covered / self.reachable if self.reachable else 1.0

    @property
    def waste(self) -> float:
        return self.wasted / self.fetches if self.fetches else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "coverage": round(self.coverage, 4),
            "waste": round(self.waste, 4),
            "reachable": self.reachable,
            "covered": self.covered,
            "fetches": self.fetches,
            "wasted": self.wasted,
            "lost": len(self.lost),
        }


def check_partners(partners: Partners) -> None:
    """``ValueError`` unless the relation is symmetric and irreflexive (a resemblance is)."""
    for page, others in partners.items():
        for other in others:
            if other == page:
                raise ValueError(f"{page} is listed as its own partner")
            if page not in partners.get(other, ()):
                raise ValueError(f"partners are not symmetric: {page} -> {other} only")


def measure(
    fetch_log: Sequence[str], reachable: Iterable[str], partners: Partners
) -> CrawlMeasures:
    """Coverage and waste of a crawl that fetched ``fetch_log`` in that order."""
    check_partners(partners)
    fetched: set[str] = set()
    wasted = 0
    for url in fetch_log:
        if url in fetched or any(p in fetched for p in partners.get(url, ())):
            wasted += 1
        fetched.add(url)
    pages = set(reachable)
    lost = sorted(
        page
        for page in pages
        if page not in fetched and not any(p in fetched for p in partners.get(page, ()))
    )
    return CrawlMeasures(len(pages), len(pages) - len(lost), len(fetch_log), wasted, tuple(lost))


def coverage(fetch_log: Sequence[str], reachable: Iterable[str], partners: Partners) -> float:
    return measure(fetch_log, reachable, partners).coverage


def waste(fetch_log: Sequence[str], partners: Partners) -> float:
    return measure(fetch_log, (), partners).waste
