"""A breadth-first crawl of a rendered site with an oracle engine, to judge the rules' policy.

The oracle decides as the engine would with a perfect detector: a fetched page is a duplicate
of the earliest fetched page among its J >= 0.9 partners; ``engine_misses`` makes it decide a
share of duplicates unique, as the real index does for pairs beyond k bits. Modes:

- ``none``: every outlink of every page is followed (coverage 1.0, waste W0);
- ``wholesale``: outlinks of duplicate pages are dropped (what the crawler did before issue 13);
- ``rules``: outlinks of unique pages go through the rules (a confident prediction whose
  counterpart is fetched or queued is skipped, unless sampled), outlinks of duplicate pages are
  judged against their keeper's (new content followed, predicted duplicates sampled as a group,
  the groups of one rewrite sharing their samples), and every decision is learned from. This
  is the integration the crawler does, in miniature.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from crawler.coverage import CrawlMeasures, measure
from crawler.rules.counterparts import GroupCheck, GroupVerdict, RewriteEvidence, judge_outlinks
from crawler.rules.learning import check_outcome
from crawler.rules.policy import DEFAULT_POLICY, RulePolicy, stable_fraction
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore, RuleStore
from neardup.demo.truth import Truth


@dataclass
class SimResult:
    fetch_log: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # by a rule's prediction
    suppressed: list[str] = field(default_factory=list)  # held by a group that matched
    groups: list[GroupCheck] = field(default_factory=list)
    rules: SharedRules | None = None

    def measures(self, truth: Truth) -> CrawlMeasures:
        return measure(self.fetch_log, truth.pages, truth.partners)


class _Crawl:
    def __init__(
        self,
        truth: Truth,
        mode: str,
        rules: SharedRules | None,
        order: str,
        engine_misses: float,
        verify: bool,
    ) -> None:
        self.truth, self.mode, self.rules = truth, mode, rules
        self.engine_misses = engine_misses
        self.resembles = self.partners if verify else None
        self.order = order
        self.rng = random.Random(int(order[6:]) if order.startswith("random") else 0)
        self.result = SimResult(rules=rules)
        self.queue: deque[str] = deque()
        self.claimed: set[str] = set()  # offered once: queued, fetched or skipped
        self.queued_or_fetched: set[str] = set()
        self.keeper: dict[str, str] = {}
        self.waiting: dict[str, list[GroupCheck]] = {}
        self.forced: set[str] = set()  # group samples: fetched whatever the rules say
        self.evidence: dict[str, RewriteEvidence] = {}  # each rewrite's samples
        self.done: set[GroupCheck] = set()  # groups whose verdict was applied

    def run(self) -> SimResult:
        for seed in self.truth.seeds:
            self.enqueue(seed)
        while self.queue or self.waiting:
            if not self.queue:  # samples that will never be fetched: follow their groups
                for url in list(self.waiting):
                    for group in self.waiting.pop(url):
                        group.evidence.withdraw(url)
                        verdict = group.verdict  # short of samples: followed
                        if group not in self.done and verdict is not GroupVerdict.PENDING:
                            self.settled(group, verdict)
                continue
            self.fetch(self.next_url())
        return self.result

    def next_url(self) -> str:
        """Breadth-first (``bfs``), last-in first-out (``dfs``, Scrapy's default order) or a
        seeded random pick (``random<seed>``: concurrent downloads finish in any order)."""
        if self.order == "dfs":
            return self.queue.pop()
        if self.order.startswith("random"):
            self.queue.rotate(-self.rng.randrange(len(self.queue)))
        return self.queue.popleft()

    def enqueue(self, url: str) -> None:
        self.claimed.add(url)
        self.queued_or_fetched.add(url)
        self.queue.append(url)

    def offer(self, url: str) -> None:
        if url in self.claimed or url not in self.truth.rendered:
            return
        if self.skip(url):
            self.claimed.add(url)
            return
        self.enqueue(url)

    def skip(self, url: str) -> bool:
        """A confident rule maps ``url`` onto a page fetched or queued, and ``url`` is not
        sampled: asked when a link is found and again just before it is fetched (a crawl queues
        most links long before the decisions that activate a rule arrive)."""
        if self.rules is None or url in self.forced:
            return False
        prediction = self.rules.predict(url)
        if (
            prediction is None
            or prediction.counterpart not in self.queued_or_fetched
            or self.rules.explore(prediction)
        ):
            return False
        self.result.skipped.append(url)
        self.rules.saved({rule.key: 1 for rule in prediction.rules})
        return True

    def fetch(self, url: str) -> None:
        if self.skip(url):
            self.queued_or_fetched.discard(url)
            return
        self.result.fetch_log.append(url)
        earlier = [p for p in self.truth.partners.get(url, ()) if p in self.keeper]
        duplicate_of = min(earlier, key=self.result.fetch_log.index) if earlier else None
        if stable_fraction("miss " + url) < self.engine_misses:
            duplicate_of = None  # the index did not reach the pair (beyond k bits)
        self.keeper[url] = url if duplicate_of is None else self.keeper[duplicate_of]
        if self.rules is not None:
            self.rules.learn(url, duplicate_of, self.keeper.get, self.resembles)
        for group in self.waiting.pop(url, []):
            ok = check_outcome(
                url, duplicate_of, group.counterpart(url), self.keeper.get, self.resembles
            )
            self.resolve(group, url, ok=bool(ok))
        outlinks = self.truth.rendered[url].outlinks
        if duplicate_of is None or self.mode == "none":
            for link in outlinks:
                self.offer(link)
        elif self.mode == "rules":
            self.judge(url, outlinks)

    def judge(self, url: str, outlinks: tuple[str, ...]) -> None:
        assert self.rules is not None
        # A link a rule skipped is no member of a group (as in the crawler's judge).
        skipped = {link for link in outlinks if link in self.claimed} - self.queued_or_fetched
        judgement = judge_outlinks(
            url,
            self.keeper[url],
            [link for link in outlinks if link not in skipped],
            self.queued_or_fetched.__contains__,
            self.rules.store.policy,
            self.rules.book,
            self.evidence,
        )
        for link in judgement.follow:
            self.offer(link)
        group = judgement.group
        if group is None:
            return
        self.result.groups.append(group)
        if group.verdict is not GroupVerdict.PENDING:  # its rewrite's samples decided it
            self.settled(group, group.verdict)
            return
        for sample in group.waiting_for:  # its own new samples and those of its siblings
            if sample in self.keeper:  # already fetched: its decision is known
                self.resolve(group, sample, ok=self.outcome(group, sample))
            elif sample in self.queued_or_fetched:
                self.waiting.setdefault(sample, []).append(group)
            elif sample in self.claimed:  # skipped by a rule: no check to wait for
                group.evidence.withdraw(sample)
            else:
                self.forced.add(sample)
                self.enqueue(sample)
                self.waiting.setdefault(sample, []).append(group)
        if group.verdict is not GroupVerdict.PENDING and group not in self.done:
            self.settled(group, group.verdict)

    def outcome(self, group: GroupCheck, sample: str) -> bool:
        duplicate_of = None if self.keeper[sample] == sample else self.keeper[sample]
        counterpart = group.counterpart(sample)
        return bool(
            check_outcome(sample, duplicate_of, counterpart, self.keeper.get, self.resembles)
        )

    def partners(self, url: str, other: str) -> bool:
        """The pairwise check (a sketch comparison in the crawler): J >= 0.9 here."""
        return other in self.truth.partners.get(url, ())

    def resolve(self, group: GroupCheck, sample: str, ok: bool) -> None:
        verdict = group.record(sample, ok)
        if verdict is not GroupVerdict.PENDING and group not in self.done:
            self.settled(group, verdict)

    def settled(self, group: GroupCheck, verdict: GroupVerdict) -> None:
        """Once per group: its held members followed or suppressed."""
        self.done.add(group)
        if verdict is GroupVerdict.FOLLOW:
            for link in group.held:
                self.offer(link)
        else:
            self.result.suppressed.extend(group.held)


def simulate(
    truth: Truth,
    mode: str = "rules",
    policy: RulePolicy = DEFAULT_POLICY,
    store: Callable[[RulePolicy], RuleStore] = MemoryRuleStore,
    order: str = "bfs",
    engine_misses: float = 0.0,
    verify: bool = True,
) -> SimResult:
    """``engine_misses``: share of duplicates the engine decides unique (stable per URL);
    ``verify``: whether checks compare a page with its counterpart directly when the engine's
    keepers differ."""
    rules = SharedRules(store(policy), refresh_every=0.0) if mode == "rules" else None
    return _Crawl(truth, mode, rules, order, engine_misses, verify).run()
