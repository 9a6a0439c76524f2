"""The outlinks of a duplicate page, judged against its keeper's instead of dropped wholesale.

A near-duplicate page P of keeper K is a duplicate page, not necessarily a duplicate subtree:
two releases of a manual share near-duplicate index pages while many of their leaves differ.
The rewrite P -> K (:func:`~crawler.rules.learning.rewrite_between`: host alias, path prefix,
or one parameter) maps every outlink o of P onto its *counterpart* c under K:

- o has no counterpart (the rewrite does not apply to it, or c is neither fetched nor
  scheduled): new content, **followed**;
- otherwise o is a **predicted duplicate**. P's predicted duplicates form one group, checked on
  a sample first (:class:`GroupCheck`): the sample is fetched; if every sampled page comes back
  a duplicate of its counterpart, the rest of the group is suppressed; at the first sampled page
  that does not, the rest is followed.

If the rewrite P -> K is a rule the crawl already dropped, or one with a failed check anywhere
in the crawl (``refuted``: a release's rewrite that failed 2 of its 11 checks while one group
of it sampled 10 pages that all matched), the group is followed without sampling: the rewrite
is known not to hold everywhere. A group already waiting is followed when its samples are in;
what a group dropped before its rewrite failed is fetched back (:mod:`crawler.rules.fetch_back`).
An outlink whose counterpart lies at a path pair known to differ
(:class:`crawler.rules.differing.DifferingPairs`: a release's release notes) is followed too: it
is no member of the group.

The groups of one rewrite share their samples (:class:`RewriteEvidence`): every page of a
mirrored section is a duplicate linking to its siblings, so each page fetched makes a group of
much the same members, and groups sampled on their own fetched a new sample each, most of the
section in the end (seen on real documentation sites: 4,581 samples in a crawl of 5,241
pages). A group counts the samples its rewrite has already decided or has in flight, and
fetches only what it lacks; one sample of the rewrite that did not match releases every group
of it from then on (its leaves differ somewhere: fetch them, never lose one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from crawler.rules.book import RuleBook
from crawler.rules.learning import rewrite_between
from crawler.rules.policy import (
    DEFAULT_POLICY,
    RulePolicy,
    State,
    group_sample_size,
    stable_fraction,
)
from crawler.rules.rewrite import Rule


class GroupVerdict(StrEnum):
    PENDING = "pending"  # waiting for sampled pages
    SUPPRESS = "suppress"  # every sample matched its counterpart: skip the held pages
    FOLLOW = "follow"  # a sample did not: fetch the held pages


@dataclass
class RewriteEvidence:
    """The samples of every group of one rewrite: decided (did the page match its
    counterpart?) or in flight, each with its counterpart. Not thread-safe."""

    outcomes: dict[str, bool] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)  # sample in flight -> counterpart
    counterparts: dict[str, str] = field(default_factory=dict)  # every sample's

    def sampled(self, url: str) -> bool:
        return url in self.outcomes or url in self.pending

    def add(self, url: str, counterpart: str) -> None:
        self.pending[url] = counterpart
        self.counterparts[url] = counterpart

    def record(self, url: str, duplicate_of_counterpart: bool) -> None:
        """The first report of a sample in flight counts; others change nothing."""
        if self.pending.pop(url, None) is not None:
            self.outcomes[url] = duplicate_of_counterpart

    def withdraw(self, url: str) -> None:
        """A sample that will not come back (never fetched): no outcome, no longer awaited."""
        self.pending.pop(url, None)

    @property
    def failed(self) -> bool:
        return not all(self.outcomes.values())


class GroupCheck:
    """Predicted duplicates of one page (outlink -> counterpart): a sample, then a verdict.

    The group needs ``group_sample_size`` samples of its rewrite (``evidence``, shared by the
    rewrite's groups; a fresh one by default; more while the rewrite's rule has fewer than
    ``group_trust_checks`` checks, ``rule_checks``): those decided or in flight count, and the rest
    are new samples, the members of lowest stable hash not sampled yet (so every process picks
    the same). Not thread-safe."""

    def __init__(
        self,
        rewrite: Rule,
        members: Mapping[str, str],
        policy: RulePolicy = DEFAULT_POLICY,
        evidence: RewriteEvidence | None = None,
        refuted: Callable[[str], bool] | None = None,
        rule_checks: int | None = None,
    ) -> None:
        if not members:
            raise ValueError("a group needs at least one predicted duplicate")
        self.rewrite = rewrite
        self.members = dict(members)
        self.evidence = RewriteEvidence() if evidence is None else evidence
        self._refuted = refuted
        self.size = group_sample_size(len(self.members), policy, rule_checks)
        order = sorted(self.members, key=lambda url: (stable_fraction(url), url))
        counted = len(self.evidence.outcomes) + len(self.evidence.pending)
        fresh = [url for url in order if not self.evidence.sampled(url)]
        self.sample = tuple(fresh[: max(0, self.size - counted)])
        for url in self.sample:
            self.evidence.add(url, self.members[url])
        chosen = set(self.sample)
        self.held = tuple(url for url in order if url not in chosen)

    def counterpart(self, url: str) -> str:
        return self.members.get(url) or self.evidence.counterparts[url]

    def record(self, url: str, duplicate_of_counterpart: bool) -> GroupVerdict:
        """A sampled page was decided (see ``learning.check_outcome``; a page that could not
        be fetched or whose counterpart is unknown counts as not matching)."""
        self.evidence.record(url, duplicate_of_counterpart)
        return self.verdict

    @property
    def verdict(self) -> GroupVerdict:
        evidence = self.evidence
        if evidence.failed or (self._refuted is not None and self._refuted(self.rewrite.key)):
            return GroupVerdict.FOLLOW
        if len(evidence.outcomes) >= self.size:
            return GroupVerdict.SUPPRESS
        # Samples withdrawn (never fetched) leave the group short: fetch it all.
        return GroupVerdict.PENDING if evidence.pending else GroupVerdict.FOLLOW

    @property
    def waiting_for(self) -> tuple[str, ...]:
        """Samples of the rewrite in flight: this group's new ones and its siblings'."""
        return tuple(self.evidence.pending)


@dataclass(frozen=True)
class OutlinkJudgement:
    """What to do with a duplicate page's outlinks: ``follow`` now, and the ``group`` of
    predicted duplicates (None if there is none): fetch ``group.sample`` now, decide on
    ``group.held`` from the sample's verdict. ``known_to_differ``: how many of ``follow``
    have a counterpart, but at a path pair known to differ. ``refuted``: no group was formed
    because the rewrite's rule failed a check."""

    page: str
    keeper: str
    rewrite: Rule | None
    follow: tuple[str, ...]
    group: GroupCheck | None
    known_to_differ: int = 0
    refuted: bool = False  # no group: the rewrite's rule failed a check


def judge_outlinks(
    page: str,
    keeper: str,
    outlinks: Iterable[str],
    known: Callable[[str], bool],
    policy: RulePolicy = DEFAULT_POLICY,
    book: RuleBook | None = None,
    evidence: dict[str, RewriteEvidence] | None = None,
    differs: Callable[[str, str], bool] | None = None,
    refuted: Callable[[str], bool] | None = None,
) -> OutlinkJudgement:
    """Split the outlinks of duplicate ``page`` (of ``keeper``) into new content and a group
    of predicted duplicates. ``known(url)``: fetched or scheduled by the crawl. ``evidence``:
    each rewrite's samples by rule key, shared by its groups (kept there; none: the group
    samples on its own). ``differs(url, counterpart)``: the pair is known to differ.
    ``refuted(key)``: the rule of this key failed a check. ``book``: the crawl's rules (a
    young rule's groups sample more, see ``group_sample_size``)."""
    links = list(dict.fromkeys(outlinks))
    rewrite = rewrite_between(page, keeper)
    if rewrite is None or (book is not None and book.state(rewrite.key) is State.DROPPED):
        return OutlinkJudgement(page, keeper, rewrite, tuple(links), None)
    if refuted is not None and refuted(rewrite.key):
        return OutlinkJudgement(page, keeper, rewrite, tuple(links), None, refuted=True)
    follow: list[str] = []
    members: dict[str, str] = {}
    differing = 0
    for link in links:
        counterpart = rewrite.apply(link)
        if counterpart is None or not known(counterpart):
            follow.append(link)
        elif differs is not None and differs(link, counterpart):
            follow.append(link)  # a pair known to differ: new content, not a member
            differing += 1
        else:
            members[link] = counterpart
    if not members:
        return OutlinkJudgement(page, keeper, rewrite, tuple(follow), None, differing)
    shared = None if evidence is None else evidence.setdefault(rewrite.key, RewriteEvidence())
    checks = None if book is None else book.checks(rewrite.key)
    group = GroupCheck(rewrite, members, policy, shared, refuted, checks)
    return OutlinkJudgement(page, keeper, rewrite, tuple(follow), group, differing)
