"""A crawl of the demo site scored against its ground truth (pure: no crawl, no servers).

Inputs: the truth (:class:`~neardup.demo.site.DemoTruth`), the fetch log as the site served it
and each page's standing decision. Exact figures, no estimate:

- a crawl following every link fetches ``len(truth.pages)`` pages, of which those with a
  partner fetched before them are duplicates (for groups of copies: all but one per group);
- this crawl's fetches, its saved fetches (pages of the full crawl it did not fetch), split
  into duplicates never fetched (a partner was fetched) and unique content never fetched;
- per kind of planted copy: copies, found (decided a duplicate of a page of its group), not
  fetched, missed (fetched, decided new although a page of its group was decided before);
- pagination pages suppressed, and suppressions whose match is not a J >= 0.9 partner.

Attribution to kinds follows earliest-wins: one page of a group is its keeper (the original,
unless a copy was fetched and decided first), the others are its duplicates; a copy that became
the keeper hands its kind to the original, which then stands in its place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from crawler.coverage import measure
from dedup_worker.contract.messages import Decision
from neardup.demo.site import KINDS, DemoTruth, Group

SUPPRESSED = ("near_duplicate", "exact_duplicate")
EXAMPLES = 3


@dataclass(frozen=True)
class KindScore:
    kind: str
    label: str
    copies: int
    found: int
    not_fetched: int
    missed: int


@dataclass(frozen=True)
class DemoScore:
    full_fetches: int
    full_duplicates: int
    fetched: int
    decided: int
    found: int
    duplicates_not_fetched: int
    lost: tuple[str, ...]
    coverage: float
    kinds: tuple[KindScore, ...]
    traps: int
    traps_fetched: int
    traps_suppressed: tuple[str, ...]
    wrong: tuple[str, ...]

    @property
    def saved(self) -> int:
        return self.full_fetches - self.fetched

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "saved": self.saved}


def score(
    truth: DemoTruth, fetch_log: Sequence[str], decisions: Mapping[str, Decision]
) -> DemoScore:
    """``decisions``: each page's standing decision by URL (``CrawlSummary.final``)."""
    measures = measure(fetch_log, truth.pages, truth.partners)
    full = measure(truth.pages, truth.pages, truth.partners)
    fetched = set(fetch_log)
    not_fetched = [page for page in truth.pages if page not in fetched]
    suppressed = {url for url, d in decisions.items() if d.verdict.value in SUPPRESSED}
    wrong = sorted(
        url for url in suppressed if decisions[url].duplicate_of not in truth.partners.get(url, ())
    )
    return DemoScore(
        full_fetches=full.fetches,
        full_duplicates=full.wasted,
        fetched=len(fetch_log),
        decided=len(decisions),
        found=len(suppressed),
        duplicates_not_fetched=len(not_fetched) - len(measures.lost),
        lost=measures.lost,
        coverage=measures.coverage,
        kinds=_kinds(truth.groups, decisions),
        traps=len(truth.traps),
        traps_fetched=len(truth.traps & fetched),
        traps_suppressed=tuple(sorted(truth.traps & suppressed)),
        wrong=tuple(wrong),
    )


def _kinds(groups: Sequence[Group], decisions: Mapping[str, Decision]) -> tuple[KindScore, ...]:
    outcomes: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for group in groups:
        for kind, outcome in _group_outcomes(group, decisions):
            outcomes[kind].append(outcome)
    return tuple(_kind_score(kind, found) for kind, found in outcomes.items())


def _kind_score(kind: str, outcomes: list[str]) -> KindScore:
    return KindScore(
        kind=kind,
        label=KINDS[kind],
        copies=len(outcomes),
        found=outcomes.count("found"),
        not_fetched=outcomes.count("not fetched"),
        missed=outcomes.count("missed"),
    )


def _group_outcomes(group: Group, decisions: Mapping[str, Decision]) -> list[tuple[str, str]]:
    """(kind, outcome) of each copy's place in the group."""
    members = set(group.members)

    def duplicate_in_group(url: str) -> bool:
        d = decisions.get(url)
        return d is not None and d.verdict.value in SUPPRESSED and d.duplicate_of in members

    keepers = [u for u in group.members if u in decisions and not duplicate_in_group(u)]
    keeper = keepers[0] if keepers else group.original  # the original first, if it is one
    result = []
    for copy, kind in group.copies:
        page = group.original if copy == keeper else copy
        if page not in decisions:
            result.append((kind, "not fetched"))
        elif duplicate_in_group(page):
            result.append((kind, "found"))
        else:
            result.append((kind, "missed"))
    return result


def score_lines(s: DemoScore) -> list[str]:
    """The demo's summary: this crawl against one that fetches every link."""
    share = 100 * s.saved / max(s.full_fetches, 1)
    lines = [
        "",
        "neardup demo: this crawl against the site's ground truth",
        f"  a crawl following every link fetches {s.full_fetches} pages, "
        f"{s.full_duplicates} of them near-duplicates of a page fetched before",
        f"  this crawl fetched {s.fetched} pages ({s.saved} fetches saved, {share:.0f}%) "
        f"and found {s.found} duplicates",
        f"    duplicates never fetched:   {s.duplicates_not_fetched}",
        f"    unique pages never fetched: {len(s.lost)} (coverage {s.coverage:.3f})"
        + _examples(s.lost),
        "",
        f"  {'planted copies':<44}{'copies':>7}{'found':>7}{'not fetched':>13}{'missed':>8}",
    ]
    for k in s.kinds:
        lines.append(f"  {k.label:<44}{k.copies:>7}{k.found:>7}{k.not_fetched:>13}{k.missed:>8}")
    lines += [
        f"  pagination pages (alike, not duplicates): {s.traps_fetched} of {s.traps} fetched, "
        f"{len(s.traps_suppressed)} suppressed" + _examples(s.traps_suppressed),
        f"  suppressed although not a near-duplicate (J < 0.9) of their match: {len(s.wrong)}"
        + _examples(s.wrong),
    ]
    return lines


def _examples(urls: Sequence[str]) -> str:
    if not urls:
        return ""
    more = f", ... ({len(urls) - EXAMPLES} more)" if len(urls) > EXAMPLES else ""
    return ": " + ", ".join(urls[:EXAMPLES]) + more
