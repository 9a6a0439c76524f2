"""What a crawl decided, folded from its decisions: the counts ``neardup report`` shows and the
ones ``neardup crawl`` prints, from the same fold so that the two always agree.

Pure (no plotting, no Kafka): the contract's reading rule
(:class:`dedup_worker.contract.reading.DecisionFold`) gives each page's standing decision;
the outlink estimate is explicit about its source: a suppressed page's outlinks are counted
from the decision that suppressed it or, for a correction (which does not carry them), from
the page it duplicates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.contract.reading import DecisionFold, PageKey
from dedup_worker.errors import ContractError

SUPPRESSED_VERDICTS = ("near_duplicate", "exact_duplicate")


def is_suppressed(decision: Decision) -> bool:
    """A duplicate whose outlinks were not followed: a near or exact duplicate, or a recrawl's
    ``unchanged`` page that keeps its standing as a duplicate (it names its original)."""
    verdict = decision.verdict.value
    return verdict in SUPPRESSED_VERDICTS or (
        verdict == "unchanged" and bool(decision.duplicate_of)
    )


@dataclass
class CrawlSummary:
    """Each page's standing decision (corrections applied) and the counts derived from it."""

    fold: DecisionFold = field(default_factory=DecisionFold)
    undecodable: int = 0
    #: Decision messages read (redeliveries included).
    lines: int = 0

    @property
    def final(self) -> dict[PageKey, Decision]:
        return self.fold.final

    @property
    def corrections(self) -> int:
        """Pages whose standing decision is a correction (each counted once)."""
        return self.fold.corrected()

    @property
    def verdicts(self) -> Counter[str]:
        return Counter(d.verdict.value for d in self.final.values())

    @property
    def suppressed(self) -> list[Decision]:
        return [d for d in self.final.values() if is_suppressed(d)]

    def add(self, raw: bytes) -> None:
        """Apply one decision message (an undecodable one is counted, not applied)."""
        if not raw.strip():
            return
        self.lines += 1
        try:
            decision = decode_decision(raw)
        except ContractError:
            self.undecodable += 1
            return
        self.fold.add(decision)


def summarise(lines: Iterable[bytes]) -> CrawlSummary:
    """Fold a decision stream (one JSON message per item)."""
    summary = CrawlSummary()
    for raw in lines:
        summary.add(raw)
    return summary


def suppressed_links(summary: CrawlSummary) -> int:
    """Outlinks not followed because their page was a duplicate."""
    by_url = {d.url: d for d in summary.final.values()}
    return sum(links_of(decision, by_url) for decision in summary.suppressed)


def links_of(decision: Decision, by_url: dict[str, Decision]) -> int:
    """The engine records a duplicate's outlink count; a correction does not know it, so the
    estimate walks to the original that was crawled and uses its outlink count."""
    known = decision.evidence.get("suppressed_outlinks")
    if isinstance(known, int):
        return known
    seen: set[str] = set()
    current: Decision | None = decision
    while current is not None and current.url not in seen:
        seen.add(current.url)
        if current.outlinks:
            return len(current.outlinks)
        current = by_url.get(current.duplicate_of or "")
    return 0
