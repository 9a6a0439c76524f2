"""The outlinks of a duplicate page, judged instead of dropped (issue 13, point 1).

:class:`SubtreeJudge` is the link scheduler's :class:`~crawler.judging.OutlinkJudge`. A new
page's requests go as the decision says (:class:`~crawler.judging.DecisionJudge`). For a
near-duplicate page P of keeper K (the keeper of the page the decision names), the requests P's
callback yielded are split by :func:`crawler.rules.counterparts.judge_outlinks`: each URL is
rewritten as P's URL rewrites onto K's (same host alias, path prefix or parameter); a URL whose
counterpart the crawl has fetched or scheduled (this process's decisions, else the crawl's
seen set: one round trip per duplicate page) is a *predicted duplicate*, any other is **new
content, followed**. P's predicted duplicates form a group: a sample of it (5 + 10%) is
fetched at once, whatever the URL rules say; the rest is held here until every sampled page
came back a duplicate of its counterpart (**the rest is dropped**, counted as suppressed) or one
did not (**the rest is followed**: the hub was a duplicate, its leaves are not).

"Same anchor text", the issue's other way to find a counterpart, is not available: the contract
carries a page's outlinks as URLs only (the ``pages`` message has no anchors), and a judge sees
the requests a callback yielded, not the markup.

A sample that never comes back (it could not be fetched, was out of scope, or another process
skipped it) must not hold its group forever: a group still waiting after ``max_wait`` seconds,
or when the crawl has nothing left to fetch (:meth:`SubtreeJudge.settle`), is followed. A crawl
stopped with ``JOBDIR`` while groups wait saves their held requests (:meth:`held_back`) and
follows them when it resumes (the groups are counted in ``dedup/groups_waiting_at_close``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from crawler.crawl_rules import CrawlRules, Stats
from crawler.frontier import Held
from crawler.judging import DecidedPage, DecisionJudge, Judgement
from crawler.rules.counterparts import GroupCheck, GroupVerdict, judge_outlinks
from crawler.rules.learning import check_outcome, rewrite_between
from dedup_worker.contract.reading import PageKey

#: claimed(urls): whether each URL is claimed in the crawl's seen set (fetched or scheduled).
Claimed = Callable[[Sequence[str]], list[bool]]


class Releaser(Protocol):
    """The link scheduler's side of a judge that keeps requests back."""

    def release_held(
        self, source: PageKey, held: Sequence[Held], depth: int, priority: float
    ) -> None: ...
    def drop_held(self, held: Sequence[Held], depth: int) -> None: ...


@dataclass(eq=False)  # groups are told apart by identity
class _Group:
    check: GroupCheck
    source: PageKey
    depth: int
    priority: float
    held: list[Held]
    since: float


class SubtreeJudge:
    """Judge of duplicates' outlinks, sampling groups of predicted duplicates."""

    def __init__(
        self,
        rules: CrawlRules,
        links: Releaser,
        claimed: Claimed,
        stats: Stats,
        max_wait: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rules = rules
        self.links = links
        self.claimed = claimed
        self.stats = stats
        self.max_wait = max_wait
        self.clock = clock
        self._default = DecisionJudge()
        self._pending: dict[int, _Group] = {}  # in creation order
        self._waiting: dict[str, list[_Group]] = {}  # sampled URL -> groups waiting for it
        rules.sampler = self

    @property
    def waiting(self) -> int:
        """Groups waiting for their samples."""
        return len(self._pending)

    # ---- judging a decided page ----------------------------------------------------------------

    def judge(self, page: DecidedPage) -> Judgement:
        decision = page.decision
        if not page.duplicate or not decision.duplicate_of or not page.held:
            return self._default.judge(page)
        canonical = self.rules.canonical
        url, original = canonical(page.key.url), canonical(decision.duplicate_of)
        keeper = self.rules.fetched.keeper_of(original) or original
        by_url: dict[str, list[Held]] = {}
        # A URL the rules already skipped was published as a predicted duplicate and counted as
        # a saved fetch: it is no sample (a sample is fetched whatever the rules say) nor a
        # member of the group; released, the gate skips it again (published once).
        skipped: list[Held] = []
        for held in page.held:
            if self.rules.skipped(held.url):
                skipped.append(held)
            else:
                by_url.setdefault(held.url, []).append(held)
        known = self._known(url, keeper, list(by_url))
        book = self.rules.rules.book
        judged = judge_outlinks(url, keeper, by_url, known.__contains__, book.policy, book)
        self.stats.inc_value("dedup/outlinks_new_content", len(judged.follow))
        follow = [*skipped, *(held for link in judged.follow for held in by_url[link])]
        if judged.group is None:
            return Judgement(tuple(follow))
        check = judged.group
        for sample in check.sample:
            self.rules.forced.add(sample)
            follow.extend(by_url[sample])
        held_back = [held for link in check.held for held in by_url[link]]
        group = _Group(check, page.key, page.depth, decision.priority, held_back, self.clock())
        self.stats.inc_value("dedup/groups_sampled")
        self.stats.inc_value("dedup/group_samples", len(check.sample))
        self.stats.inc_value("dedup/group_members_held", len(check.held))
        verdict = self._open(group)
        if verdict is GroupVerdict.PENDING:
            return Judgement(tuple(follow))
        self._count(verdict, group)
        if verdict is GroupVerdict.SUPPRESS:
            return Judgement(tuple(follow), tuple(held_back))
        return Judgement((*follow, *held_back))

    def _known(self, url: str, keeper: str, links: list[str]) -> set[str]:
        """The counterparts of ``links`` under ``keeper`` that the crawl fetched or scheduled."""
        rewrite = rewrite_between(url, keeper)
        if rewrite is None:
            return set()
        counterparts = {c for link in links if (c := rewrite.apply(link)) is not None}
        fetched = {c for c in counterparts if self.rules.fetched.keeper_of(c) is not None}
        rest = sorted(counterparts - fetched)
        if not rest:
            return fetched
        return fetched | {c for c, hit in zip(rest, self.claimed(rest), strict=True) if hit}

    def _open(self, group: _Group) -> GroupVerdict:
        """Record the samples already decided; wait for the others."""
        fetched = self.rules.fetched
        verdict = GroupVerdict.PENDING
        for sample in group.check.sample:
            keeper = fetched.keeper_of(sample)
            if keeper is None:
                continue
            verdict = group.check.record(sample, self._outcome(group, sample, keeper))
            if verdict is not GroupVerdict.PENDING:
                return verdict
        self._pending[id(group)] = group
        for sample in group.check.waiting_for:
            self._waiting.setdefault(sample, []).append(group)
        return verdict

    def _outcome(self, group: _Group, sample: str, keeper: str) -> bool:
        duplicate_of = None if keeper == sample else keeper
        counterpart = group.check.counterpart(sample)
        comparer = self.rules.comparer
        resembles = comparer.resembles if comparer is not None else None
        outcome = check_outcome(
            sample, duplicate_of, counterpart, self.rules.fetched.keeper_of, resembles
        )
        return bool(outcome)  # an unknown counterpart counts as not matching

    # ---- decisions of samples (the observer's news) --------------------------------------------

    def decided(self, pages: Sequence[tuple[str, str | None]]) -> None:
        for url, _ in pages:
            self.rules.forced.discard(url)
            groups = self._waiting.pop(url, None)
            keeper = self.rules.fetched.keeper_of(url)
            for group in groups or ():
                if id(group) in self._pending and keeper is not None:
                    verdict = group.check.record(url, self._outcome(group, url, keeper))
                    if verdict is not GroupVerdict.PENDING:
                        self._resolve(group, verdict)

    def expire(self) -> None:
        """Follow the groups that waited longer than ``max_wait`` seconds."""
        deadline = self.clock() - self.max_wait
        for group in list(self._pending.values()):
            if group.since > deadline:
                break
            self._give_up(group)

    def settle(self) -> bool:
        """Nothing left to fetch: every waiting group is followed. True if any request went."""
        released = False
        for group in list(self._pending.values()):
            released = self._give_up(group) or released
        return released

    def _give_up(self, group: _Group) -> bool:
        self.stats.inc_value("dedup/groups_unsettled")
        waiting = group.check.waiting_for
        verdict = group.check.record(waiting[0], False) if waiting else GroupVerdict.FOLLOW
        self._resolve(group, verdict)
        return bool(group.held) and verdict is GroupVerdict.FOLLOW

    def _resolve(self, group: _Group, verdict: GroupVerdict) -> None:
        self._pending.pop(id(group), None)
        for sample in group.check.waiting_for:
            others = self._waiting.get(sample)
            if others is not None and group in others:
                others.remove(group)
                if not others:
                    del self._waiting[sample]
        self._count(verdict, group)
        if verdict is GroupVerdict.SUPPRESS:
            self.links.drop_held(group.held, group.depth)
        else:
            self.links.release_held(group.source, group.held, group.depth, group.priority)

    def _count(self, verdict: GroupVerdict, group: _Group) -> None:
        if verdict is GroupVerdict.SUPPRESS:
            self.stats.inc_value("dedup/groups_suppressed")
            self.stats.inc_value("dedup/outlinks_of_suppressed_groups", len(group.held))
        else:
            self.stats.inc_value("dedup/groups_followed")

    def held_back(self) -> list[tuple[PageKey, int, float, list[Held]]]:
        """The requests of every group still waiting: (source page, depth, decision priority,
        held requests), for a ``JOBDIR`` resume to follow."""
        return [(g.source, g.depth, g.priority, list(g.held)) for g in self._pending.values()]

    def close(self) -> None:
        self.stats.set_value("dedup/groups_waiting_at_close", len(self._pending))
