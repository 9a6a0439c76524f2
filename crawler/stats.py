"""``dedup/...`` stats keys and the end-of-crawl summary (pure functions of a stats dict), and
the count of each decision applied."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dedup_worker.contract.messages import Decision

logger = logging.getLogger(__name__)

PREFIX = "dedup/"
VERDICT_PREFIX = "dedup/verdict/"


def mean_page_bytes(stats: Mapping[str, Any]) -> float:
    """Mean size of a fetched HTML page, the unit of the bandwidth estimate."""
    pages = int(stats.get("dedup/pages_fetched", 0))
    return float(stats.get("dedup/html_bytes", 0)) / pages if pages else 0.0


def bytes_saved_estimate(suppressed_links: int, stats: Mapping[str, Any]) -> int:
    """Bytes not fetched thanks to suppression: suppressed outlinks x mean page size.

    An estimate: the suppressed pages were never seen, so their size is assumed typical, and
    each of them would have added outlinks of its own (not counted: this is a lower bound in
    that respect).
    """
    return round(suppressed_links * mean_page_bytes(stats))


def count_verdict(stats: Any, decision: Decision) -> None:
    """Count a decision applied, in a crawler's stats collector; log a correction."""
    if decision.corrects:
        stats.inc_value("dedup/corrections")
        stats.inc_value(f"dedup/corrections/{decision.verdict.value}")
        logger.info(
            "correction: %s is a %s of %s", decision.url, decision.verdict.value,
            decision.duplicate_of,
        )  # fmt: skip
    else:
        stats.inc_value(f"{VERDICT_PREFIX}{decision.verdict.value}")


def verdict_counts(stats: Mapping[str, Any]) -> dict[str, int]:
    return {
        key.removeprefix(VERDICT_PREFIX): int(value)
        for key, value in sorted(stats.items())
        if key.startswith(VERDICT_PREFIX)
    }


def summary(stats: Mapping[str, Any], reason: str) -> str:
    """A few human lines: what was fetched, decided, suppressed and saved."""
    verdicts = verdict_counts(stats)
    verdict_text = ", ".join(f"{name} {count}" for name, count in verdicts.items()) or "none"
    lines = [
        f"neardup crawl finished ({reason})",
        f"  pages fetched      {int(stats.get('dedup/pages_fetched', 0))}"
        f" ({_megabytes(stats.get('dedup/html_bytes', 0))} of HTML),"
        f" published {int(stats.get('dedup/pages_published', 0))},"
        f" publish errors {int(stats.get('dedup/publish_errors', 0))}",
        f"  decisions          {verdict_text};"
        f" corrections {int(stats.get('dedup/corrections', 0))}",
        f"  outlinks scheduled {int(stats.get('dedup/outlinks_scheduled', 0))},"
        f" suppressed {int(stats.get('dedup/outlinks_suppressed', 0))},"
        f" cancelled {int(stats.get('dedup/requests_cancelled', 0))}",
        f"  bandwidth saved    ~{_megabytes(stats.get('dedup/bytes_saved_estimate', 0))}"
        f" (suppressed outlinks x mean page size)",
    ]
    if any(key.startswith(("dedup/rules/", "dedup/groups_")) for key in stats):
        lines.extend(rules_summary(stats))
    outstanding = int(stats.get("dedup/outstanding_at_close", 0))
    if outstanding:
        lines.append(f"  WITHOUT DECISION   {outstanding} published pages (links not followed)")
    return "\n".join(lines)


def rules_summary(stats: Mapping[str, Any]) -> list[str]:
    """The lines of the URL rules and the duplicates' outlinks (issue 13)."""

    def n(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    return [
        f"  skipped by rule    {n('dedup/requests_skipped/rule')}"
        f" ({n('dedup/requests_skipped_before_fetch')} just before fetching),"
        f" {n('dedup/rules/predicted')} URLs predicted duplicates,"
        f" {n('dedup/rules/explored')} fetched anyway as checks"
        f" ({n('dedup/rules/known_to_differ')} known to differ),"
        f" {n('dedup/rules/paced')} held while a candidate's checks were in flight,"
        f" {n('dedup/rules/waited_for_counterpart')} while their counterpart was being fetched,"
        f" {n('dedup/rules/counterpart_fetched_first')} while it was fetched ahead of its turn",
        f"  URL rules          {n('dedup/rules/active')} active,"
        f" {n('dedup/rules/candidates')} candidates, {n('dedup/rules/dropped')} dropped;"
        f" {n('dedup/rules/checks')} checks",
        f"  duplicates' links  {n('dedup/outlinks_new_content')} new content followed"
        f" ({n('dedup/outlinks_known_to_differ')} known to differ from their counterpart);"
        f" groups: {n('dedup/groups_sampled')} sampled ({n('dedup/group_samples')} pages),"
        f" {n('dedup/groups_suppressed')} suppressed"
        f" ({n('dedup/outlinks_of_suppressed_groups')} outlinks),"
        f" {n('dedup/groups_followed')} followed,"
        f" {n('dedup/groups_refuted')} not formed (their rewrite's rule failed a check)",
    ]


def _megabytes(value: Any) -> str:
    return f"{float(value or 0) / 1e6:.2f} MB"
