"""Page pairs a good rule got wrong: the one page of a release that changes between releases.

A rule that holds on nearly every page still has its exceptions, and they are the same pages
wherever the rule's shape recurs. Between two releases of a manual the release notes, the
changelog and the install page change while the rest is copied; the same two releases served
by a mirror, or another renderer's host, change on the same pages. In crawls of 19 real
documentation hosts (README, "Real sites") the unique pages still lost were of this kind:
``0.21.1/dev/release.html`` (J 0.88 with ``latest/dev/release.html``) skipped by the active
rule ``0.21.1 -> latest`` of one host, seconds after the same rule of another host, serving
the same docs, had fetched that page as a check and seen it differ.

:class:`DifferingPairs` remembers, for the whole crawl, the path pairs (path and query, no
origin) of failed checks of rules that otherwise hold (:func:`telling`). A prediction between
two paths so remembered is fetched, as a check of its rule, instead of skipped
(:meth:`crawler.rules.shared.SharedRules.explore`); so is a member of a duplicate page's group
(:func:`crawler.rules.counterparts.judge_outlinks`). Every process computes the same pairs
from the decisions it reads (each process reads all of them), so nothing is stored.

Before any failure, a page named like release notes (``CHANGES_BY_RELEASE`` in
:mod:`crawler.rules.policy`: ``release``, ``changes``, ``changelog``, ...) is known to differ
between two different paths: release notes gain an entry with each release, and the good rule
of a release skips them all otherwise (``0.21.1/dev/release.html`` above was lost on 1-3 of the
3 hosts serving it in nearly every crawl, because no host happened to fetch it as a check).
The same path under a host alias is unaffected.

The front pages of two releases are known to differ too (``/3.0.2/index.html`` and
``/latest/index.html``: the index pages of two directories named like releases,
``RELEASE_DIRECTORY``, under one parent). A front page holds the table of contents and the
introduction, which change with any page the release adds or rewords. Flask's
``3.0.2/index.html`` and ``3.0.3/index.html`` (J 0.84 with ``latest/``'s: a new introductory
paragraph) were lost on one held-out host in about a third of the crawls, skipped by a release
rule that held on 73 of its 75 checks. Front pages are 48 of the held-out sites' 3,103 pages, 43
of the development sites' 5,847 and none of the shops'.

The failure must come from a rule with at least ``window`` checks and a precision of at least
``activate_at``: failures of rules that fail everywhere (two renderings of one long page, a
major release against a minor one) mark pairs by the hundred and say nothing about a page.
Measured on one instrumented 19-host crawl: marking the path suffix of every failed check
would have fetched 528 of its 702 skipped pages; the pairs of good rules' failures, 8. In three
crawls with it, the fetches it caused (predictions fetched, group members followed) were 12
distinct unique pages (9 of them lost in other crawls, the rest the same pages under another
release) and 41 duplicates.
"""

from __future__ import annotations

from crawler.rules.policy import (
    CHANGES_BY_RELEASE,
    DEFAULT_POLICY,
    RELEASE_DIRECTORY,
    RulePolicy,
)
from crawler.rules.rewrite import split_url

#: Pairs a process remembers; past this the oldest is forgotten (forgetting costs content only
#: as the crawl did without this memory, never a fetch; starting over forgot the pairs just
#: learned too, those of the rules most likely still skipping).
PAIR_LIMIT = 100_000


def telling(successes: int, checks: int, policy: RulePolicy = DEFAULT_POLICY) -> bool:
    """Whether a failed check of a rule with these counts (the failure included) says
    something about its page: the rule holds elsewhere (see the module docstring)."""
    return checks >= policy.window and successes >= policy.activate_at * checks


def _local(url: str) -> str:
    _, path, query = split_url(url)
    return f"{path}?{query}" if query else path


_INDEX_PAGES = frozenset({"", "index", "index.html", "index.htm"})


def release_front_pages(path: str, other_path: str) -> bool:
    """Whether two paths are the front pages (index pages) of two different releases under one
    parent: ``/docs/3.0.2/`` and ``/docs/latest/index.html``."""
    front, other_front = _front(path), _front(other_path)
    if front is None or other_front is None:
        return False
    (parent, release), (other_parent, other_release) = front, other_front
    return (
        parent == other_parent
        and release != other_release
        and RELEASE_DIRECTORY.fullmatch(release) is not None
        and RELEASE_DIRECTORY.fullmatch(other_release) is not None
    )


def _front(path: str) -> tuple[str, str] | None:
    """(parent path, directory) of a directory's index page; None for any other page."""
    segments = path.split("/")
    if len(segments) < 3 or segments[-1].lower() not in _INDEX_PAGES:
        return None
    return "/".join(segments[:-2]), segments[-2]


def page_name(path: str) -> str:
    """The name a path gives its page, lowercase, without extension: ``/0.21/dev/Release.html``
    -> ``release``; a directory's index page takes the directory's name (``/2.0/changelog/``
    -> ``changelog``)."""
    segments = path.rsplit("/", 2)
    name = segments[-1]
    if name.lower() in _INDEX_PAGES and len(segments) > 2:
        name = segments[-2]
    return name.split(".", 1)[0].lower()


class DifferingPairs:
    """Unordered pairs of local URLs (path and query) known to differ. Not thread-safe."""

    def __init__(
        self,
        limit: int = PAIR_LIMIT,
        changes_by_release: frozenset[str] = CHANGES_BY_RELEASE,
        release_front_pages: bool = True,
    ) -> None:
        self.limit = limit
        self.changes_by_release = changes_by_release
        self.release_front_pages = release_front_pages
        self._pairs: dict[tuple[str, str], None] = {}  # insertion order: the oldest first
        self._fresh: list[tuple[str, str]] = []  # noted since the last ``fresh()``

    @staticmethod
    def key(url: str, other: str) -> tuple[str, str]:
        """The pair of two URLs as remembered (their local URLs, in order)."""
        a, b = _local(url), _local(other)
        return (a, b) if a <= b else (b, a)

    def note(self, url: str, other: str) -> None:
        key = self.key(url, other)
        if key in self._pairs:
            del self._pairs[key]  # noted again: the newest (the oldest go first)
        else:
            if len(self._pairs) >= self.limit:
                del self._pairs[next(iter(self._pairs))]
            if len(self._fresh) < self.limit:
                self._fresh.append(key)
        self._pairs[key] = None

    def fresh(self) -> list[tuple[str, str]]:
        """The pairs noted since the last call (:mod:`crawler.rules.fetch_back`)."""
        fresh, self._fresh = self._fresh, []
        return fresh

    def known(self, url: str, other: str) -> bool:
        """Whether the pages at these paths differed somewhere in the crawl, or are release
        notes at two different paths or two releases' front pages (they differ by
        convention)."""
        if bool(self._pairs) and self.key(url, other) in self._pairs:
            return True
        return self.by_convention(url, other)

    def by_convention(self, url: str, other: str) -> bool:
        """Two paths of a page named like release notes (``CHANGES_BY_RELEASE``), or the front
        pages of two releases (:func:`release_front_pages`)."""
        path, other_path = split_url(url)[1], split_url(other)[1]
        if path == other_path:
            return False
        if self.changes_by_release and page_name(path) in self.changes_by_release:
            return True
        return self.release_front_pages and release_front_pages(path, other_path)

    def __len__(self) -> int:
        return len(self._pairs)
