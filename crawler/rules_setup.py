"""Wiring the URL rules into one crawler (issue 13): stores, judge, gate, observer.

Called by the scheduling extension as the spider opens (``NEARDUP_RULES``, on by default):
with a shared seen set (``NEARDUP_REDIS_URL``) the crawl's rules and page sketches live in
Redis under the crawl id, so every process of the crawl learns into and predicts from one set
of rules and a restarted process finds them; without Redis they live in process memory. The
link scheduler of the crawler's session gets :class:`~crawler.subtree_judge.SubtreeJudge` as
its judge and :class:`~crawler.crawl_rules.CrawlRules` as its gate and observer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawler.crawl_rules import CrawlRules, PublishPrediction
from crawler.judging import AdmitAll, DecisionJudge, IgnoreDecisions
from crawler.rules.policy import DEFAULT_POLICY
from crawler.rules.redis_sketches import RedisSketchStore
from crawler.rules.redis_store import RedisRuleStore
from crawler.rules.shared import SharedRules
from crawler.rules.sketches import MemorySketchStore, PageComparer, SketchStore
from crawler.rules.store import MemoryRuleStore, RuleStore
from crawler.seen import CrawlSeen
from crawler.subtree_judge import SubtreeJudge
from crawler.urls import canonicalize_url
from dedup_worker.adapters.redis_client import Client, connect, describe, translated
from dedup_worker.contract.messages import Page

logger = logging.getLogger(__name__)


@dataclass
class InstalledRules:
    """What :func:`install_rules` built, to close at the end of the crawl."""

    rules: CrawlRules
    judge: SubtreeJudge
    client: Client | None

    def remember(self, page: Page) -> None:
        """A page is published: keep its sketch for direct comparisons."""
        comparer = self.rules.comparer
        if comparer is not None:
            comparer.remember(self.rules.canonical(page.url), page.text)

    def close(self) -> None:
        try:
            self.rules.close()
            self.judge.close()
        finally:
            if self.client is not None:
                self.client.close()


def install_rules(
    session: Any, stats: Any, crawl_id: str, publish: PublishPrediction
) -> InstalledRules:
    """Build the rules of ``session``'s crawl and plug them into its link scheduler."""
    config = session.config
    client: Client | None = None
    store: RuleStore
    sketches: SketchStore | None
    if config.shared_seen:
        client = connect(
            config.redis_url,
            cluster=config.redis_cluster,
            secured=config.redis_security,
            fail_fast=False,
        )
        with translated(describe(client)):
            client.ping()
        store = RedisRuleStore(client, crawl_id, DEFAULT_POLICY)
        ttl = config.rule_sketch_ttl
        sketches = RedisSketchStore(client, crawl_id, ttl) if ttl else None
    else:
        store = MemoryRuleStore(DEFAULT_POLICY)
        sketches = MemorySketchStore() if config.rule_sketch_ttl else None
    comparer = PageComparer(sketches) if sketches is not None else None
    shingles_of = comparer.shingle_count if comparer is not None else None
    shared = SharedRules(store, shingles_of=shingles_of)
    shared.refresh()
    drop_params = config.extract_options.drop_params

    def canonical(url: str) -> str:
        try:
            return canonicalize_url(url, drop_params)
        except ValueError:
            return url

    def claimed(urls: Sequence[str]) -> list[bool]:
        """Claimed in the crawl's seen set, or about to be: wanted by the poll being applied
        (a keeper decided together with its duplicate)."""
        wanted = [session.links.wanted_now(url) for url in urls]
        rest = [url for url, now in zip(urls, wanted, strict=True) if not now]
        seen: CrawlSeen = session.seen()
        found = iter(seen.contains_many(rest) if rest else [])
        return [True if now else next(found) for now in wanted]

    rules = CrawlRules(shared, stats, canonical, publish, comparer, crawl_id)
    links = session.links
    judge = SubtreeJudge(rules, links, claimed, stats, max_wait=config.decision_timeout)
    links.judge, links.gate, links.observer = judge, rules, rules
    rules.release = links.release_paced
    rules.fetch_ahead = links.fetch_ahead
    rules.fetch_back = links.fetch_back
    where = getattr(store, "prefix", "process memory")
    logger.info(
        "URL rules on (crawl %r, %s): %d known, %d active; direct comparisons %s",
        crawl_id,
        where,
        len(shared.book),
        len(shared.active),
        f"kept {config.rule_sketch_ttl} s" if comparer is not None else "off",
    )
    return InstalledRules(rules, judge, client)


def uninstall_rules(session: Any) -> None:
    """Back to the decision's word (``NEARDUP_RULES=false`` does not install them at all)."""
    links = session.links
    links.judge, links.gate, links.observer = DecisionJudge(), AdmitAll(), IgnoreDecisions()
