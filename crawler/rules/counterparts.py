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

If the rewrite P -> K is a rule the crawl already dropped (it failed its checks), the group is
followed without sampling: the rewrite is known not to hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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


class GroupCheck:
    """Predicted duplicates of one page (outlink -> counterpart): a sample, then a verdict.

    The sample is the ``group_sample_size`` members of lowest stable hash, so every process
    picks the same one. Not thread-safe."""

    def __init__(
        self, rewrite: Rule, members: Mapping[str, str], policy: RulePolicy = DEFAULT_POLICY
    ) -> None:
        if not members:
            raise ValueError("a group needs at least one predicted duplicate")
        self.rewrite = rewrite
        self.members = dict(members)
        order = sorted(self.members, key=lambda url: (stable_fraction(url), url))
        size = group_sample_size(len(order), policy)
        self.sample = tuple(order[:size])
        self.held = tuple(order[size:])
        self._outcomes: dict[str, bool] = {}

    def counterpart(self, url: str) -> str:
        return self.members[url]

    def record(self, url: str, duplicate_of_counterpart: bool) -> GroupVerdict:
        """A sampled page was decided (see ``learning.check_outcome``; a page that could not
        be fetched or whose counterpart is unknown counts as not matching)."""
        if url in self.sample:
            self._outcomes.setdefault(url, duplicate_of_counterpart)
        return self.verdict

    @property
    def verdict(self) -> GroupVerdict:
        if not all(self._outcomes.values()):
            return GroupVerdict.FOLLOW
        if len(self._outcomes) == len(self.sample):
            return GroupVerdict.SUPPRESS
        return GroupVerdict.PENDING

    @property
    def waiting_for(self) -> tuple[str, ...]:
        return tuple(url for url in self.sample if url not in self._outcomes)


@dataclass(frozen=True)
class OutlinkJudgement:
    """What to do with a duplicate page's outlinks: ``follow`` now, and the ``group`` of
    predicted duplicates (None if there is none): fetch ``group.sample`` now, decide on
    ``group.held`` from the sample's verdict."""

    page: str
    keeper: str
    rewrite: Rule | None
    follow: tuple[str, ...]
    group: GroupCheck | None


def judge_outlinks(
    page: str,
    keeper: str,
    outlinks: Iterable[str],
    known: Callable[[str], bool],
    policy: RulePolicy = DEFAULT_POLICY,
    book: RuleBook | None = None,
) -> OutlinkJudgement:
    """Split the outlinks of duplicate ``page`` (of ``keeper``) into new content and a group
    of predicted duplicates. ``known(url)``: fetched or scheduled by the crawl."""
    links = list(dict.fromkeys(outlinks))
    rewrite = rewrite_between(page, keeper)
    if rewrite is None or (book is not None and book.state(rewrite.key) is State.DROPPED):
        return OutlinkJudgement(page, keeper, rewrite, tuple(links), None)
    follow: list[str] = []
    members: dict[str, str] = {}
    for link in links:
        counterpart = rewrite.apply(link)
        if counterpart is not None and known(counterpart):
            members[link] = counterpart
        else:
            follow.append(link)
    group = GroupCheck(rewrite, members, policy) if members else None
    return OutlinkJudgement(page, keeper, rewrite, tuple(follow), group)
