"""The outlinks of a duplicate page, judged instead of dropped (issue 13, point 1).

:class:`SubtreeJudge` is the link scheduler's :class:`~crawler.judging.OutlinkJudge`. A new
page's requests go as the decision says (:class:`~crawler.judging.DecisionJudge`). For a
near-duplicate page P of keeper K (the keeper of the page the decision names), the requests P's
callback yielded are split by :func:`crawler.rules.counterparts.judge_outlinks`: each URL is
rewritten as P's URL rewrites onto K's (same host alias, path prefix or parameter); a URL whose
counterpart the crawl has fetched or scheduled (this process's decisions, else the crawl's
seen set: one round trip per duplicate page) is a *predicted duplicate*, any other is **new
content, followed**. P's predicted duplicates form a group: a sample of it (5 + 10%, more while
the rewrite's rule is young) is fetched at once, whatever the URL rules say; the rest is held
here until every sampled page came back a duplicate of its counterpart (**the rest is dropped**,
counted as suppressed) or one did not (**the rest is followed**: the hub was a duplicate, its
leaves are not). The groups of one rewrite share their samples
(:class:`~crawler.rules.counterparts.RewriteEvidence`): a group fetches only the samples its
rewrite lacks, and waits for those its siblings have in flight.

In a recrawl (a new crawl id against the same Redis), a link whose counterpart came back
``changed``, or names the link as its original, may hold content the counterpart no longer
has: it is followed, not grouped (:meth:`crawler.crawl_rules.CrawlRules.recrawl_reason`); one
dropped with its group before its counterpart was decided is released if that decision gives
such a reason (``dedup/outlinks_recrawl_fetched``).

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
from dataclasses import dataclass, field
from typing import Protocol

from crawler.crawl_rules import CrawlRules, Stats
from crawler.frontier import Held
from crawler.judging import DecidedPage, DecisionJudge, Judgement
from crawler.rules.counterparts import GroupCheck, GroupVerdict, RewriteEvidence, judge_outlinks
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
    def settle_page(self, source: PageKey) -> None: ...


@dataclass(eq=False)  # groups are told apart by identity
class _Group:
    check: GroupCheck
    source: PageKey
    depth: int
    priority: float
    held: list[Held]
    since: float
    keeper: str = ""  # the page its source duplicates (the decision's duplicate_of)
    waits: tuple[str, ...] = ()  # the samples it was registered as waiting for
    counterparts: list[str] = field(default_factory=list)  # and the counterparts, likewise


@dataclass(frozen=True)
class _Dropped:
    """A request of a suppressed group whose counterpart was not decided yet (see
    :meth:`SubtreeJudge.decided`)."""

    source: PageKey
    depth: int
    priority: float
    held: Held


#: Dropped requests remembered until their counterpart's decision (past it: forgotten, which in
#: a recrawl can cost a page whose counterpart came back changed late).
DROPPED_LIMIT = 200_000


class SubtreeJudge:
    """Judge of duplicates' outlinks, sampling groups of predicted duplicates."""

    #: A page corrected to a duplicate after its links went out keeps them (the link
    #: scheduler asks): cancelled whole, a subtree whose pages differ from the original's was
    #: lost, with no sample to tell; the gate still skips what an active URL rule predicts.
    keeps_corrected_links = True

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
        self._evidence: dict[str, RewriteEvidence] = {}  # rewrite key -> its groups' samples
        # counterpart URL -> (group, sample) decided before it, waiting for its decision
        self._counterparts: dict[str, list[tuple[_Group, str]]] = {}
        self._dropped: dict[str, list[_Dropped]] = {}  # counterpart URL -> requests dropped
        self._dropped_count = 0
        rules.sampler = self

    @property
    def remembered(self) -> int:
        """Dropped requests kept until their counterpart's decision (a recrawl only)."""
        return self._dropped_count

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
        rules = self.rules.rules
        recrawl: list[str] = []

        def differs(link: str, counterpart: str) -> bool:
            if self.rules.recrawl_reason(link, counterpart) is not None:
                recrawl.append(link)  # may differ now (see CrawlRules.recrawl_reason)
                return True
            return rules.differing.known(link, counterpart)

        judged = judge_outlinks(
            url, keeper, by_url, known.__contains__, rules.book.policy, rules.book,
            self._evidence, differs, rules.refuted.__contains__,
        )  # fmt: skip
        self.stats.inc_value("dedup/outlinks_new_content", len(judged.follow))
        if judged.known_to_differ > len(recrawl):
            self.stats.inc_value(
                "dedup/outlinks_known_to_differ", judged.known_to_differ - len(recrawl)
            )
        if recrawl:
            self.stats.inc_value("dedup/outlinks_recrawl_fetched", len(recrawl))
        if judged.refuted:
            self.stats.inc_value("dedup/groups_refuted")
        follow = [*skipped, *(held for link in judged.follow for held in by_url[link])]
        if judged.group is None:
            return Judgement(tuple(follow))
        check = judged.group
        for sample in check.sample:
            self.rules.forced.add(sample)
            follow.extend(by_url[sample])
        held_back = [held for link in check.held for held in by_url[link]]
        group = _Group(
            check, page.key, page.depth, decision.priority, held_back, self.clock(), original
        )
        self.stats.inc_value("dedup/groups_sampled")
        self.stats.inc_value("dedup/group_samples", len(check.sample))
        self.stats.inc_value("dedup/group_members_held", len(check.held))
        verdict = self._open(group)
        if verdict is GroupVerdict.PENDING:
            return Judgement(tuple(follow))
        self._count(verdict, group)
        if verdict is GroupVerdict.SUPPRESS:
            keep, drop = self._suppress(group)
            return Judgement((*follow, *keep), tuple(drop))
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
        """The verdict the rewrite's samples give already, recording those decided since they
        were sampled; or wait for the others."""
        verdict = group.check.verdict
        for sample in group.check.waiting_for:
            if verdict is not GroupVerdict.PENDING:
                break
            verdict = self._check(group, sample)
        if verdict is not GroupVerdict.PENDING:
            return verdict
        self._pending[id(group)] = group
        group.waits = group.check.waiting_for
        for sample in group.waits:
            self._waiting.setdefault(sample, []).append(group)
        return verdict

    def _check(self, group: _Group, sample: str) -> GroupVerdict:
        """Record a sample once it and its counterpart are decided. A sample fetched before
        its counterpart (both queued, the sample first) waits for the counterpart's decision:
        it is no evidence yet, and counted as a failure it released groups of pages that were
        duplicates (a release and its /latest/ alias fetched side by side)."""
        fetched = self.rules.fetched
        keeper = fetched.keeper_of(sample)
        if keeper is None:
            return group.check.verdict
        counterpart = group.check.counterpart(sample)
        comparer = self.rules.comparer
        resembles = comparer.resembles if comparer is not None else None
        duplicate_of = None if keeper == sample else keeper
        outcome = check_outcome(sample, duplicate_of, counterpart, fetched.keeper_of, resembles)
        if outcome is None:
            self._counterparts.setdefault(counterpart, []).append((group, sample))
            group.counterparts.append(counterpart)
            return group.check.verdict
        return group.check.record(sample, outcome)

    # ---- decisions of samples (the observer's news) --------------------------------------------

    def decided(self, pages: Sequence[tuple[str, str | None]]) -> None:
        for url, _ in pages:
            self.rules.forced.discard(url)
            self._revive(url)
            waiting = [(group, url) for group in self._waiting.pop(url, ())]
            waiting += self._counterparts.pop(url, [])  # samples that waited for this page
            for group, sample in waiting:
                if id(group) in self._pending:
                    verdict = self._check(group, sample)
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
        """Samples that did not come back are no evidence either way: withdrawn, and the
        group, short of its samples, is followed."""
        self.stats.inc_value("dedup/groups_unsettled")
        for sample in group.check.waiting_for:
            group.check.evidence.withdraw(sample)
        verdict = group.check.verdict
        if verdict is GroupVerdict.PENDING:  # not after a withdrawal; kept safe regardless
            verdict = GroupVerdict.FOLLOW
        self._resolve(group, verdict)
        return bool(group.held) and verdict is GroupVerdict.FOLLOW

    def _resolve(self, group: _Group, verdict: GroupVerdict) -> None:
        self._pending.pop(id(group), None)
        for sample in group.waits:
            others = self._waiting.get(sample)
            if others is not None and group in others:
                others.remove(group)
                if not others:
                    del self._waiting[sample]
        for counterpart in group.counterparts:
            kept = [w for w in self._counterparts.get(counterpart, ()) if w[0] is not group]
            if kept:
                self._counterparts[counterpart] = kept
            else:
                self._counterparts.pop(counterpart, None)
        self._count(verdict, group)
        if verdict is GroupVerdict.SUPPRESS:
            keep, drop = self._suppress(group)
            if keep:
                self.links.release_held(group.source, keep, group.depth, group.priority)
            self.links.drop_held(drop, group.depth)
        else:
            self.links.release_held(group.source, group.held, group.depth, group.priority)
        if not self.holds(group.source):
            self.links.settle_page(group.source)

    def holds(self, source: PageKey) -> bool:
        """Whether a group of page ``source``'s outlinks waits for its samples: held here,
        in memory only, so the page stays in its process's journal until it resolves."""
        return any(group.source == source for group in self._pending.values())

    def _suppress(self, group: _Group) -> tuple[list[Held], list[Held]]:
        """A suppressed group's held requests: those a recrawl must fetch after all (their
        counterpart came back changed, or names them as its original; see
        :meth:`CrawlRules.recrawl_reason`), and those dropped. A dropped one whose counterpart
        is not decided yet is remembered in a recrawl, to be released if that decision gives a
        reason."""
        keep: list[Held] = []
        drop: list[Held] = []
        for held in group.held:
            counterpart = group.check.counterpart(held.url)
            if self.rules.recrawl_reason(held.url, counterpart) is not None:
                keep.append(held)
                continue
            drop.append(held)
            if self.rules.fetched.keeper_of(held.url) is None:  # fetched back if it differs
                self.rules.skips.skipped(held.url, counterpart, (), group.check.rewrite.key)
            if self.rules.recrawl and self.rules.fetched.keeper_of(counterpart) is None:
                self._remember(
                    counterpart, _Dropped(group.source, group.depth, group.priority, held)
                )
        if keep:
            self.stats.inc_value("dedup/outlinks_recrawl_fetched", len(keep))
        return keep, drop

    def _remember(self, counterpart: str, dropped: _Dropped) -> None:
        if self._dropped_count >= DROPPED_LIMIT:
            self._dropped.clear()
            self._dropped_count = 0
        self._dropped.setdefault(counterpart, []).append(dropped)
        self._dropped_count += 1

    def _revive(self, counterpart: str) -> None:
        """``counterpart`` was just decided: release the requests dropped with it as their
        counterpart for which a recrawl has a reason to fetch (else they stay dropped)."""
        dropped = self._dropped.pop(counterpart, None)
        if dropped is None:
            return
        self._dropped_count -= len(dropped)
        for item in dropped:
            if self.rules.recrawl_reason(item.held.url, counterpart) is not None:
                self.stats.inc_value("dedup/outlinks_recrawl_fetched")
                self.links.release_held(item.source, [item.held], item.depth, item.priority)

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

    def keepers(self) -> dict[PageKey, str]:
        """The page each waiting group's source duplicates, by source, for the groups another
        run may judge again (``crawler.regroup``). Not a group with a sample waiting for its
        counterpart's decision: that sample may have differed, and the group would have been
        followed; judged again on other samples it could be dropped, so it is followed."""
        unsure = {id(group) for waits in self._counterparts.values() for group, _ in waits}
        # By source page, as the groups are handed over: one unsure group keeps its page out.
        doubtful = {g.source for key, g in self._pending.items() if key in unsure}
        return {g.source: g.keeper for g in self._pending.values() if g.source not in doubtful}

    def close(self) -> None:
        self.stats.set_value("dedup/groups_waiting_at_close", len(self._pending))
