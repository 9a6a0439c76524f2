"""What ``neardup crawl`` prints and keeps beyond the decisions: the spider's ``dedup/*`` counts
(fetched, skipped by rule, duplicates' outlinks followed or suppressed; with ``--crawlers``, how
the spiders shared the crawl) and the crawl's URL rules.

The spider writes its stats as JSON at close (``NEARDUP_STATS_FILE``, set by ``neardup crawl``
in its state directory), with the crawl id it used; the rules are read from the crawl's rule
store in Redis before the embedded stack stops, and written beside the decisions file
(:func:`neardup.rules_table.rules_path`) for ``neardup report``.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dedup_worker.worker.config import WorkerConfig
from neardup.rules_table import RuleRow, rule_rows, rules_text

logger = logging.getLogger(__name__)

#: The file name of the spider's stats in ``neardup crawl``'s state directory.
STATS_FILE = "crawl-stats.json"


def read_stats(path: Path) -> dict[str, Any]:
    """The spider's stats (empty if it wrote none: it failed before closing)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


#: Values of a crawl's spiders that are not summed when they are merged: the longest time; the
#: URLs seen before the crawl, as the first spider found them (a later one finds the first's).
_MERGED_BY = {"elapsed_time_seconds": max, "dedup/seen_at_start": min}


def merge_stats(each: list[dict[str, Any]]) -> dict[str, Any]:
    """The stats of a crawl's spiders as one (``neardup crawl --crawlers N``): counts summed
    (but ``_MERGED_BY``), the first close reason that is not ``finished`` (a failure shows)."""
    written = [stats for stats in each if stats]
    if len(written) <= 1:
        return written[0] if written else {}
    merged: dict[str, Any] = {}
    for stats in written:
        for key, value in stats.items():
            if key in _MERGED_BY and isinstance(value, int | float):
                merged[key] = _MERGED_BY[key](merged.get(key, value), value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                merged[key] = merged.get(key, 0) + value
            else:
                merged.setdefault(key, value)
    reasons = [str(stats.get("finish_reason", "")) for stats in written]
    merged["finish_reason"] = next((r for r in reasons if r != "finished"), "finished")
    return merged


def load_rules(config: WorkerConfig, crawl_id: str) -> list[RuleRow]:
    """The crawl's rules from its Redis rule store (none without Redis or a crawl id)."""
    from crawler.rules.redis_store import RedisRuleStore
    from dedup_worker.adapters.redis_client import connect

    if not crawl_id or config.memory_backend:
        return []
    client = connect(
        config.redis_url,
        cluster=config.redis_cluster,
        secured=config.redis_security,
        fail_fast=False,
    )
    try:
        return rule_rows(RedisRuleStore(client, crawl_id).statuses())
    finally:
        client.close()


#: The spider's close reasons that mean the crawl did not do its job, and what to tell the user.
FAILED_REASONS = {
    "dedup_stalled": (
        "the dedup pipeline stalled: published pages got no decision for "
        "NEARDUP_DECISION_TIMEOUT seconds (the spider's log names a page and the topics)"
    ),
}


def failure(stats: Mapping[str, Any]) -> str | None:
    """Why the crawl failed although the spider exited cleanly, or None."""
    return FAILED_REASONS.get(str(stats.get("finish_reason", "")))


def exit_code(spider_code: int, stats: Mapping[str, Any]) -> int:
    """``neardup crawl``'s exit code: the spider's, or 1 when it closed for a failure
    (Scrapy exits 0 whatever the close reason, so a script could not tell otherwise); a
    spider killed by signal N gives 128 + N, as a shell does."""
    if spider_code < 0:
        return 128 - spider_code
    if spider_code == 0 and failure(stats) is not None:
        return 1
    return spider_code


def killed_line(spider_code: int, crawl_id: str | None) -> str | None:
    """What a spider killed by a signal (``spider_code`` < 0) leaves: what it owed is in its
    journal in Redis, which the crawl takes over once its beat is ``PEER_TIMEOUT`` old."""
    if spider_code >= 0:
        return None
    try:
        name = signal.Signals(-spider_code).name
    except ValueError:
        name = f"signal {-spider_code}"
    crawl = f"crawl {crawl_id!r}" if crawl_id else "the crawl (its id derived from the seeds)"
    return (
        f"a spider was killed by {name} (out of memory? see its log): what it owed {crawl} "
        "stays in its journal in Redis, and once its beat is 30 s old a live spider of the "
        "crawl, or the next run of the same crawl id against the same Redis, takes it over "
        "(the embedded stack's Redis goes with the command: resuming needs NEARDUP_REDIS_URL)"
    )


def outcome_lines(stats: Mapping[str, Any], rules: list[RuleRow]) -> list[str]:
    """The counts that say how much of the site the crawl holds and what it did not fetch."""

    def n(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    if not stats:
        return ["spider stats: none written (see the spider's log)"]
    states = {name: sum(1 for r in rules if r.state == name) for name in ("active", "dropped")}
    lines = [
        f"pages fetched: {n('dedup/pages_fetched')}; published: {n('dedup/pages_published')}",
        f"skipped by URL rule: {n('dedup/requests_skipped/rule')} "
        f"(published as predicted duplicates: {n('dedup/predictions_published')}); "
        f"fetched anyway as rule checks: {n('dedup/rules/explored')}",
        f"duplicates' outlinks: {n('dedup/outlinks_new_content')} new content followed; "
        f"groups of predicted duplicates: {n('dedup/groups_sampled')} sampled "
        f"({n('dedup/group_samples')} pages), {n('dedup/groups_suppressed')} suppressed, "
        f"{n('dedup/groups_followed')} followed, {n('dedup/groups_refuted')} not formed "
        "(their rewrite's rule failed a check)",
        f"outlinks suppressed (never fetched): {n('dedup/outlinks_suppressed')}",
        f"URL rules: {states['active']} active, {states['dropped']} dropped, "
        f"{len(rules) - states['active'] - states['dropped']} candidates",
    ]
    recrawl = n("dedup/rules/counterpart_changed") + n("dedup/rules/original_of_counterpart")
    if recrawl or n("dedup/outlinks_recrawl_fetched"):
        lines.append(
            f"fetched because this is a recrawl: {recrawl} URLs a rule maps onto a page that "
            f"changed ({n('dedup/rules/counterpart_changed')}) or that was their original "
            f"({n('dedup/rules/original_of_counterpart')}); "
            f"{n('dedup/outlinks_recrawl_fetched')} duplicates' outlinks likewise"
        )
    if n("dedup/outlinks_over_budget"):
        lines.append(
            f"page budget reached (--max-pages, NEARDUP_MAX_PAGES): "
            f"{n('dedup/outlinks_over_budget')} links released after it was spent were not "
            f"fetched ({n('dedup/budget_returned')} places given back by requests that never "
            "went out; "
            f"{n('dedup/requests_http_error')} spent on requests answered with an HTTP error "
            "status, such as a dead link's 404); a larger budget goes further (a Scrapy "
            "project's JOBDIR resume starts with them)"
        )
    if n("dedup/fetches_failed"):
        lines.append(
            f"fetches failed for a passing reason after Scrapy's retries (a timeout, a 503, ...): "
            f"{n('dedup/fetches_failed')}; {n('dedup/failed_left_for_a_later_run')} kept for a "
            f"later run of crawl {stats.get('crawl_id', '')!r}, which tries them again "
            "(the embedded stack's Redis goes with the command: resuming needs NEARDUP_REDIS_URL)"
        )
    left = n("dedup/requests_left_to_the_crawl") + n("dedup/undecided_left_to_the_crawl")
    if left:
        lines.append(
            f"stopped before the end: {left} requests left for a later run of crawl "
            f"{stats.get('crawl_id', '')!r} ({n('dedup/undecided_left_to_the_crawl')} of them "
            f"undecided; {n('dedup/decisions_applied_while_stopping')} decisions applied while "
            "stopping): a run of the same crawl id against the same Redis takes them up (the "
            "embedded stack's goes with the command: resuming needs NEARDUP_REDIS_URL, e.g. "
            "from neardup up)"
        )
    if n("dedup/seen_at_start"):
        lines.append(
            f"resumed crawl {stats.get('crawl_id', '')!r}: {n('dedup/seen_at_start')} URLs were "
            "claimed before this run (fetched, or queued by a process of the crawl: one that "
            "was killed left its queue claimed) and were not fetched again; to crawl the site "
            "again, give a new --crawl-id (NEARDUP_CRAWL_ID): a new crawl against the same "
            "index, which finds what changed"
        )
    shown = [row for row in rules if row.state != "candidate"]
    if shown:
        lines.extend("  " + line for line in rules_text(shown))
    return lines


def spiders_line(each: list[dict[str, object]]) -> str:
    """How the crawl's spiders shared it (``--crawlers``)."""

    def n(stats: dict[str, object], key: str) -> int:
        value = stats.get(key, 0)
        return int(value) if isinstance(value, int | float) else 0

    fetched = " / ".join(str(n(stats, "dedup/pages_fetched")) for stats in each)
    handed = sum(n(stats, "dedup/requests_handed_over") for stats in each)
    taken = sum(n(stats, "dedup/requests_taken_over") for stats in each)
    line = (
        f"spiders: {len(each)}, pages fetched {fetched}; links handed to an idle spider: "
        f"{handed}, taken: {taken}"
    )
    if handed > taken:  # handed over by spiders whose share of the budget was spent
        line += (
            f"; {handed - taken} left in the crawl's shared list with the budget spent "
            "(the same crawl id run again takes them)"
        )
    return line
