"""A crawl of a folder of real pages scored against its ground truth (pure: no crawl, no servers).

Inputs: the truth (:class:`~neardup.demo.static.SiteTruth`), the fetch log as the hosts served
it and each page's standing decision. What a user of a real crawl counts, against a crawl
that follows every link: the duplicates fetched (pages with a partner fetched before them)
and the unique pages never fetched (no copy of their content fetched), with how close each of
those came to a page fetched; suppressions whose match is not a partner; a line per host;
and the crawl's URL rules against the truth (:func:`score_rules`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from crawler.coverage import measure
from crawler.rules.rewrite import parse_rule
from dedup_worker.contract.messages import Decision
from neardup.demo.static import SiteTruth
from neardup.demo.static_waste import DuplicatesByRule, duplicates_by_rule_lines
from neardup.evaluation.quality import jaccard, shingle_sets
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

    @property
    def saved(self) -> int:
        return self.full_fetches - self.fetched

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "saved": self.saved, "unique_missed": len(self.lost)}


def score_site(
    truth: SiteTruth, fetch_log: Sequence[str], decisions: Mapping[str, Decision]
) -> SiteScore:
    """``fetch_log``: HTML pages served, in order; ``decisions``: each page's standing one."""
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
        f"  this crawl fetched {s.fetched} pages ({s.saved} fetches saved, {share:.0f}%) "
        f"and found {s.found} duplicates",
        f"    duplicates fetched:         {s.duplicates_fetched} (a crawl of every link: "
        f"{s.full_duplicates})",
        *(duplicates_by_rule_lines(by_rule) if by_rule is not None else []),
        f"    unique pages never fetched: {len(s.lost)} (coverage {s.coverage:.3f}"
        + _nearest(s.lost_nearest)
        + ")"
        + _examples(s.lost),
        f"    suppressed although not a near-duplicate (J < 0.9) of their match: {len(s.wrong)}"
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


def _nearest(resemblances: Sequence[float]) -> str:
    if not resemblances:
        return ""
    low, high = min(resemblances), max(resemblances)
    span = f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
    return f"; each resembles a page fetched at J {span}"


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
