"""A crawl of a folder of real pages scored against its ground truth (pure: no crawl, no servers).

Inputs: the truth (:class:`~neardup.demo.static.SiteTruth`), the fetch log as the hosts served
it and each page's standing decision. What a user of a real crawl counts, against a crawl
that follows every link: the duplicates fetched (pages with a partner fetched before them)
and the unique pages never fetched (no copy of their content fetched), with how close each of
those came to a page fetched and how much of its text a fetched page holds; the site's text
that no fetched page holds; suppressions whose match is not a partner; a line per host; and
the crawl's URL rules against the truth (:func:`score_rules`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from crawler.coverage import measure
from crawler.rules.rewrite import parse_rule
from dedup_worker.contract.messages import Decision
from neardup.demo.static import SiteTruth
from neardup.demo.static_waste import DuplicatesByRule, duplicates_by_rule_lines
from neardup.evaluation.quality import intersections, jaccard, shingle_sets
from neardup.rules_table import RuleRow

SUPPRESSED = ("near_duplicate", "exact_duplicate")
EXAMPLES = 3


@dataclass(frozen=True)
class HostScore:
    host: str
    pages: int  # reachable pages of this host
    fetched: int
    duplicates_fetched: int
    unique_missed: int


@dataclass(frozen=True)
class SiteScore:
    """A crawl of the folder against one that follows every link."""

    full_fetches: int
    full_duplicates: int
    fetched: int
    duplicates_fetched: int
    found: int
    lost: tuple[str, ...]
    #: Each lost page's highest resemblance to a page the crawl fetched (below 0.9).
    lost_nearest: tuple[float, ...]
    coverage: float
    wrong: tuple[str, ...]
    hosts: tuple[HostScore, ...]
    #: Each lost page's highest containment in a page the crawl fetched: the share of its
    #: word 4-shingles that one fetched page holds (a page of an older release whose text the
    #: newer one holds whole, but for version numbers and dates, is lost at J < 0.9).
    lost_contained: tuple[float, ...] = ()
    #: Distinct word 4-shingles of the site's pages in no page the crawl fetched, of all its
    #: pages, and of those missed, how many are on the unique pages never fetched (the rest
    #: are the words by which skipped duplicates differ from their partners).
    text_missed: int = 0
    text_total: int = 0
    text_missed_on_lost: int = 0
    #: Each wrongly suppressed page's containment in its match (where both are pages of the
    #: site): how much of its text the page it was taken for holds.
    wrong_contained: tuple[float, ...] = ()
    #: Unique pages never fetched by a crawl that follows every link breadth-first (no
    #: dedup) and stops after as many fetches as this one made: what the same budget buys
    #: without neardup.
    breadth_first_lost: int = 0
    #: The crawl's budget (``--max-pages``), None without one: what it did not fetch was cut
    #: by the budget, not saved.
    budget: int | None = None

    @property
    def text_missed_share(self) -> float:
        return self.text_missed / max(self.text_total, 1)

    @property
    def saved(self) -> int:
        return self.full_fetches - self.fetched

    def as_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "saved": self.saved,
            "unique_missed": len(self.lost),
            "text_missed_share": self.text_missed_share,
        }


def score_site(
    truth: SiteTruth,
    fetch_log: Sequence[str],
    decisions: Mapping[str, Decision],
    budget: int | None = None,
) -> SiteScore:
    """``fetch_log``: HTML pages served, in order; ``decisions``: each page's standing one;
    ``budget``: the crawl's ``--max-pages``, if it had one."""
    measures = measure(fetch_log, truth.pages, truth.partners)
    full = measure(truth.pages, truth.pages, truth.partners)
    suppressed = {url for url, d in decisions.items() if d.verdict.value in SUPPRESSED}
    wrong = sorted(
        url for url in suppressed if decisions[url].duplicate_of not in truth.partners.get(url, ())
    )
    return SiteScore(
        full_fetches=full.fetches,
        full_duplicates=full.wasted,
        fetched=measures.fetches,
        duplicates_fetched=measures.wasted,
        found=len(suppressed),
        lost=measures.lost,
        lost_nearest=nearest_fetched(truth, measures.lost, fetch_log),
        coverage=measures.coverage,
        wrong=tuple(wrong),
        hosts=_host_scores(truth, fetch_log, set(measures.lost)),
        lost_contained=contained_in_fetched(truth, measures.lost, fetch_log),
        **asdict(text_never_fetched(truth, fetch_log, measures.lost)),
        wrong_contained=contained_in_match(truth, wrong, decisions),
        breadth_first_lost=len(
            measure(truth.pages[: measures.fetches], truth.pages, truth.partners).lost
        ),
        budget=budget,
    )


def nearest_fetched(
    truth: SiteTruth, pages: Sequence[str], fetch_log: Sequence[str]
) -> tuple[float, ...]:
    """Each page's highest resemblance to a fetched page: how far from the crawl's content a
    page it never fetched is (exact, over word 4-shingles)."""
    fetched = [url for url in dict.fromkeys(fetch_log) if url in truth.rendered]
    if not pages or not fetched:
        return tuple(0.0 for _ in pages)
    sets = shingle_sets([truth.rendered[url].text for url in [*fetched, *pages]])
    others = np.arange(len(fetched), dtype=np.int64)
    return tuple(
        round(float(jaccard(sets, np.full_like(others, len(fetched) + i), others).max()), 3)
        for i in range(len(pages))
    )


def contained_in_fetched(
    truth: SiteTruth, pages: Sequence[str], fetch_log: Sequence[str]
) -> tuple[float, ...]:
    """Each page's highest containment in a fetched page: the share of its distinct word
    4-shingles that one page the crawl fetched also has (exact). Near 1.0, the crawl has the
    page's text but for a few words (versions, dates), however low their resemblance."""
    fetched = [url for url in dict.fromkeys(fetch_log) if url in truth.rendered]
    if not pages or not fetched:
        return tuple(0.0 for _ in pages)
    sets = shingle_sets([truth.rendered[url].text for url in [*fetched, *pages]])
    others = np.arange(len(fetched), dtype=np.int64)
    shares = []
    for i in range(len(pages)):
        page = len(fetched) + i
        same = intersections(sets, np.full_like(others, page), others)
        shares.append(round(float(same.max()) / max(int(sets.sizes[page]), 1), 3))
    return tuple(shares)


@dataclass(frozen=True)
class TextMissed:
    text_missed: int
    text_total: int
    text_missed_on_lost: int


def contained_in_match(
    truth: SiteTruth, pages: Sequence[str], decisions: Mapping[str, Decision]
) -> tuple[float, ...]:
    """Each suppressed page's containment in the page its decision names as its original
    (pages whose match is not a page of the site are left out)."""
    pairs: list[tuple[str, str]] = []
    for url in pages:
        match = decisions[url].duplicate_of
        if match is not None and match in truth.rendered and url in truth.rendered:
            pairs.append((url, match))
    if not pairs:
        return ()
    sets = shingle_sets([truth.rendered[u].text for pair in pairs for u in pair])
    left = np.arange(0, 2 * len(pairs), 2, dtype=np.int64)
    same = intersections(sets, left, left + 1)
    return tuple(
        round(int(n) / max(int(size), 1), 3)
        for n, size in zip(same.tolist(), sets.sizes[left].tolist(), strict=True)
    )


def text_never_fetched(
    truth: SiteTruth, fetch_log: Sequence[str], lost: Sequence[str] = ()
) -> TextMissed:
    """Distinct word 4-shingles of the site's pages that no fetched page has, of all its
    pages, and of the missed ones those on the ``lost`` pages: what a crawl lost, counted in
    text rather than in pages."""
    urls = [url for url in truth.pages if url in truth.rendered]
    if not urls:
        return TextMissed(0, 0, 0)
    fetched = {url for url in fetch_log if url in truth.rendered}
    sets = shingle_sets([truth.rendered[url].text for url in urls])

    def of(pages: set[str]) -> npt.NDArray[np.uint64]:
        mask = np.repeat(np.array([url in pages for url in urls], dtype=bool), sets.sizes)
        return np.unique(sets.values[mask])

    missed = np.setdiff1d(np.unique(sets.values), of(fetched), assume_unique=True)
    on_lost = np.intersect1d(missed, of(set(lost)), assume_unique=True)
    return TextMissed(int(missed.size), int(np.unique(sets.values).size), int(on_lost.size))


def _host_scores(
    truth: SiteTruth, fetch_log: Sequence[str], lost: set[str]
) -> tuple[HostScore, ...]:
    fetched: set[str] = set()
    rows: dict[str, list[int]] = {host: [0, 0, 0, 0] for host in truth.base}
    for url in truth.pages:
        rows[truth.host[url]][0] += 1
    for url in fetch_log:
        host = truth.host.get(url)
        if host is None:
            continue
        rows[host][1] += 1
        if url in fetched or any(p in fetched for p in truth.partners.get(url, ())):
            rows[host][2] += 1
        fetched.add(url)
    for url in lost:
        rows[truth.host[url]][3] += 1
    return tuple(HostScore(host, *counts) for host, counts in rows.items())


def site_score_lines(s: SiteScore, by_rule: DuplicatesByRule | None = None) -> list[str]:
    """The summary: this crawl against one that fetches every link, in total and per host
    (``by_rule``: the duplicates fetched in classes, under their count)."""
    share = 100 * s.saved / max(s.full_fetches, 1)
    lines = [
        "",
        "neardup demo: this crawl against the ground truth of the site folder",
        f"  a crawl following every link fetches {s.full_fetches} pages, "
        f"{s.full_duplicates} of them near-duplicates of a page fetched before",
        (
            f"  this crawl fetched {s.fetched} pages ({s.saved} fetches saved, {share:.0f}%) "
            if s.budget is None
            else f"  this crawl fetched {s.fetched} pages with a budget of {s.budget} "
            f"({s.saved} of the site's pages not fetched) "
        )
        + f"and found {s.found} duplicates",
        f"    duplicates fetched:         {s.duplicates_fetched} (a crawl of every link: "
        f"{s.full_duplicates})",
        *(duplicates_by_rule_lines(by_rule) if by_rule is not None else []),
        f"    unique pages never fetched: {len(s.lost)} (coverage {s.coverage:.3f}"
        + _nearest(s.lost_nearest)
        + _contained(s.lost_contained)
        + ")"
        + _examples(s.lost),
        f"      breadth-first, every link, stopped after as many fetches: "
        f"{s.breadth_first_lost} (coverage {_coverage(s.breadth_first_lost, s):.3f})",
        f"    text never fetched:         {s.text_missed_share:.3%} of the site's distinct "
        f"word 4-shingles ({s.text_missed:,} of {s.text_total:,}) are on no page fetched, "
        f"{s.text_missed_on_lost:,} of them on the unique pages never fetched",
        f"    suppressed although not a near-duplicate (J < 0.9) of their match: {len(s.wrong)}"
        + (
            f" (the match holds {_span(s.wrong_contained)} of their text)"
            if s.wrong_contained
            else ""
        )
        + _examples(s.wrong),
        "",
        f"  {'host':<40}{'pages':>7}{'fetched':>9}{'dup. fetched':>14}{'unique missed':>15}",
    ]
    for h in s.hosts:
        lines.append(
            f"  {h.host[:39]:<40}{h.pages:>7}{h.fetched:>9}{h.duplicates_fetched:>14}"
            f"{h.unique_missed:>15}"
        )
    return lines


def _coverage(lost: int, s: SiteScore) -> float:
    reachable = s.full_fetches
    return (reachable - lost) / reachable if reachable else 1.0


def _nearest(resemblances: Sequence[float]) -> str:
    if not resemblances:
        return ""
    low, high = min(resemblances), max(resemblances)
    span = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
    return f"; each resembles a page fetched at J {span}"


def _contained(shares: Sequence[float]) -> str:
    return f"; a page fetched holds {_span(shares)} of its text" if shares else ""


def _span(shares: Sequence[float]) -> str:
    low, high = min(shares), max(shares)
    return f"{low:.0%}" if low == high else f"{low:.0%}-{high:.0%}"


def _examples(urls: Sequence[str]) -> str:
    if not urls:
        return ""
    more = f", ... ({len(urls) - EXAMPLES} more)" if len(urls) > EXAMPLES else ""
    return ": " + ", ".join(urls[:EXAMPLES]) + more


@dataclass(frozen=True)
class RuleScore:
    """One URL rule the crawl learned, against the folder: of the page pairs it maps (a page of
    the site to its counterpart, also a page of the site), how many are alike (J >= 0.9)."""

    key: str
    state: str
    pairs: int
    alike: int

    @property
    def holds(self) -> bool:
        """Alike on every pair: skipping by it loses nothing."""
        return self.pairs > 0 and self.alike == self.pairs


def score_rules(truth: SiteTruth, rules: Sequence[RuleRow]) -> tuple[RuleScore, ...]:
    """The crawl's active and dropped rules against the truth: an active rule that does not
    hold skips pages below 0.9 of their counterpart (that is where unique pages are lost), a
    dropped one that holds cost fetches for nothing. Candidates predicted nothing; a rule that
    maps no pair of the site is left out."""
    pages = set(truth.pages)
    scores = []
    for row in rules:
        if row.state not in ("active", "dropped"):
            continue
        try:
            rule = parse_rule(row.key)
        except ValueError:  # a rules file of another version: nothing to score it by
            continue
        mapped = [(url, rule.apply(url)) for url in truth.pages]
        pairs = [(url, other) for url, other in mapped if other is not None and other in pages]
        alike = sum(other in truth.partners.get(url, ()) for url, other in pairs)
        if pairs:
            scores.append(RuleScore(row.key, row.state, len(pairs), alike))
    return tuple(scores)


def rule_score_lines(scores: Sequence[RuleScore]) -> list[str]:
    """How right the crawl's rules were: those that acted on pairs not alike, those dropped
    although every pair was alike."""
    active = [s for s in scores if s.state == "active"]
    dropped = [s for s in scores if s.state == "dropped"]
    leaky = sorted((s for s in active if not s.holds), key=lambda s: s.alike / s.pairs)
    wasted = [s for s in dropped if s.holds]
    lines = [
        f"    URL rules against the site: {len(active)} active, {len(active) - len(leaky)} of "
        f"them alike on every page pair they map; {len(dropped)} dropped, {len(wasted)} of "
        "them alike on every pair"
    ]
    lines += [f"      active, {s.alike} of {s.pairs} pairs alike: {s.key}" for s in leaky[:5]]
    lines += [f"      dropped, all {s.pairs} pairs alike: {s.key}" for s in wasted[:5]]
    return lines
