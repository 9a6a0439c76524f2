"""Likely duplicates: links a budgeted crawl sends last (:mod:`crawler.budget`). Pure.

A link is a likely duplicate when a page the crawl fetched, or queued, is its counterpart under

- a **candidate rule** with no failed check (a young rule, not yet trusted to skip anything), or
- **no rule yet, but the same page in a sibling release**: ``/docs/7.6.8/api.html`` against
  ``/docs/latest/api.html`` or ``/docs/7.6.9/api.html`` on the same origin, two directories named
  like releases (``RELEASE_DIRECTORY``) under one parent. Consecutive releases of a manual copy
  most of their pages, and a crawl reaches them together, from the front page that links every
  release: before any pair of them is fetched no rule exists, and each release's copies took a
  place in the budget while the first release was still being crawled. On the click fixture
  crawled with 50 fetches, one host's release copies took the budget in about one crawl of
  three (69 unique pages missed against 16). The rule the pair would learn (the longest common
  path suffix: ``/docs/7.6.8 -> /docs/latest``) must not be dropped or refuted already.

Either way the pair must not be known to differ (release notes, two releases' front pages, a
pair that differed under a rule that holds elsewhere: :mod:`crawler.rules.differing`). A likely
duplicate is never skipped for being one: it only waits until the crawl is idle, so the cost of
a wrong guess is order, never content.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from crawler.rules.book import RuleBook
from crawler.rules.differing import DifferingPairs
from crawler.rules.policy import RELEASE_DIRECTORY, State
from crawler.rules.rewrite import PathRewrite, split_url

#: (origin, parent path) pairs remembered with their release directories; past this the memory
#: starts over (a release forgotten only makes its copies take places, as before).
PARENT_LIMIT = 10_000


class ReleaseSiblings:
    """The directories named like releases seen under each parent path of each origin (in the
    pages the crawl fetched, those of every process, and the links asked about here)."""

    def __init__(self, limit: int = PARENT_LIMIT) -> None:
        self.limit = limit
        self._releases: dict[tuple[str, str], set[str]] = {}

    def note(self, url: str) -> None:
        origin, path, _ = split_url(url)
        for parent, release, _ in _release_segments(path):
            if len(self._releases) >= self.limit:
                self._releases.clear()
            self._releases.setdefault((origin, parent), set()).add(release)

    def rewrites(self, url: str) -> list[PathRewrite]:
        """The rewrites of ``url`` onto the same page of each other release seen beside its
        own (the rules such a pair would teach)."""
        origin, path, _ = split_url(url)
        found = []
        for parent, release, _ in _release_segments(path):
            for other in sorted(self._releases.get((origin, parent), ())):
                if other != release:
                    found.append(
                        PathRewrite(origin, f"{parent}/{release}", origin, f"{parent}/{other}")
                    )
        return found


def _release_segments(path: str) -> Iterable[tuple[str, str, str]]:
    """(parent path, release directory, rest) of each directory of ``path`` named like a
    release; a page's own file name is not a directory."""
    segments = path.split("/")
    for i in range(1, len(segments) - 1):
        if RELEASE_DIRECTORY.fullmatch(segments[i]):
            yield "/".join(segments[:i]), segments[i], "/".join(segments[i + 1 :])


def likely_duplicate(
    url: str,
    book: RuleBook,
    refuted: set[str],
    differing: DifferingPairs,
    siblings: ReleaseSiblings,
    present: Callable[[str], bool],
) -> bool:
    """Whether ``url`` is a likely duplicate of a page ``present`` (fetched, or queued in this
    process): see the module docstring."""
    siblings.note(url)
    for rule, counterpart in book.applicable(url):
        if (
            book.state(rule.key) is State.CANDIDATE
            and rule.key not in refuted
            and present(counterpart)
            and not differing.known(url, counterpart)
        ):
            return True
    for rewrite in siblings.rewrites(url):
        sibling = rewrite.apply(url)
        if (
            sibling is not None
            and book.state(rewrite.key) is None
            and rewrite.key not in refuted
            and present(sibling)
            and not differing.known(url, sibling)
        ):
            return True
    return False
