"""Pages skipped by a rule that turned out wrong, fetched back (pure: no Scrapy, Kafka or Redis).

A rule skips its predictions once its checks clear the bar, and its later checks (exploration,
the checks of other processes) may still show it wrong: the store drops it, or its precision's
lower bound falls back under the bar (:meth:`crawler.rules.shared.SharedRules.in_doubt`), or
another host's rule of the same shape fails on one path pair that this process skipped
(:mod:`crawler.rules.differing`). From then on its predictions are fetched; the pages it skipped
before were lost for good. In crawls of the held-out sites, pytest 8.3.3's rules went active on
their first clean checks, skipped 91 pages, then were dropped at 36 of 40: five unique pages
lost, each with 87-97 % of its text on a page fetched.

The same holds for the members a duplicate page's group dropped (:mod:`crawler.subtree_judge`):
its samples all matched, yet the rule of its rewrite may fail a check later. In held-out crawls
a release rewrite failed 2 of its 11 checks after one of its groups had dropped 6 unique pages.

:class:`SkipLog` remembers which URLs this process skipped, onto which counterpart, by which
rules (or dropped with the group of which rewrite), so that they are fetched back when one of
these things happens (for a group: its rewrite's rule failed any check). A URL another
rule still vouches for (active, not in doubt, its counterpart fetched) stays skipped. Bounded:
past ``limit`` URLs it forgets the oldest, which stays skipped, as before the log existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from crawler.rules.book import Prediction
from crawler.rules.differing import DifferingPairs
from crawler.rules.fetched import Fetched
from crawler.rules.policy import State
from crawler.rules.shared import SharedRules

#: URLs remembered (~200 bytes each with their keys): past this the log starts over.
SKIP_LIMIT = 200_000


@dataclass(frozen=True)
class Skip:
    counterpart: str
    rules: tuple[str, ...]
    group: str | None = None  # the rewrite of the group that dropped it, if a group did


class SkipLog:
    """URLs skipped by rule in this process (see the module docstring). Not thread-safe."""

    def __init__(self, limit: int = SKIP_LIMIT) -> None:
        self.limit = limit
        self._skips: dict[str, Skip] = {}
        self._by_rule: dict[str, set[str]] = {}
        self._by_group: dict[str, set[str]] = {}  # a group's rewrite -> URLs it dropped
        self._by_pair: dict[tuple[str, str], set[str]] = {}  # DifferingPairs.key -> URLs

    def __len__(self) -> int:
        return len(self._skips)

    def skipped(
        self, url: str, counterpart: str, rules: Iterable[str], group: str | None = None
    ) -> None:
        """``url`` was skipped by ``rules``, or dropped with a ``group`` of this rewrite."""
        self._forget([url])
        if len(self._skips) >= self.limit:  # the oldest goes (a wipe forgot young rules' too)
            self._forget([next(iter(self._skips))])
        skip = Skip(counterpart, tuple(rules), group)
        self._skips[url] = skip
        for key in skip.rules:
            self._by_rule.setdefault(key, set()).add(url)
        if group is not None:
            self._by_group.setdefault(group, set()).add(url)
        self._by_pair.setdefault(DifferingPairs.key(url, counterpart), set()).add(url)

    def fetched(self, url: str) -> None:
        """``url`` was fetched after all (another link to it, a check): nothing to fetch back."""
        if url in self._skips:
            self._forget([url])

    def rules(self) -> list[str]:
        """The rules that skipped a URL still remembered."""
        return list(self._by_rule)

    def of_rules(self, keys: Iterable[str]) -> dict[str, Skip]:
        """The URLs these rules skipped, forgotten as they are returned."""
        return self._forget(sorted({url for key in keys for url in self._by_rule.get(key, ())}))

    def groups(self) -> list[str]:
        """The rewrites of the groups that dropped a URL still remembered."""
        return list(self._by_group)

    def of_groups(self, keys: Iterable[str]) -> dict[str, Skip]:
        """The URLs the groups of these rewrites dropped, forgotten as they are returned."""
        return self._forget(sorted({url for key in keys for url in self._by_group.get(key, ())}))

    def on_pairs(self, pairs: Iterable[tuple[str, str]]) -> dict[str, Skip]:
        """The URLs whose pair with their counterpart is one of ``pairs``
        (:meth:`DifferingPairs.key`), forgotten as they are returned."""
        return self._forget(sorted({url for pair in pairs for url in self._by_pair.get(pair, ())}))

    def _forget(self, urls: Iterable[str]) -> dict[str, Skip]:
        forgotten = {}
        for url in urls:
            skip = self._skips.pop(url, None)
            if skip is None:
                continue
            forgotten[url] = skip
            for key in skip.rules:
                _discard(self._by_rule, key, url)
            if skip.group is not None:
                _discard(self._by_group, skip.group, url)
            pair = DifferingPairs.key(url, skip.counterpart)
            urls_of_pair = self._by_pair.get(pair)
            if urls_of_pair is not None:
                urls_of_pair.discard(url)
                if not urls_of_pair:
                    del self._by_pair[pair]
        return forgotten


def _discard(index: dict[str, set[str]], key: str, url: str) -> None:
    left = index.get(key)
    if left is not None:
        left.discard(url)
        if not left:
            del index[key]


def due(log: SkipLog, rules: SharedRules, fetched: Fetched) -> dict[str, Skip]:
    """The skips of ``log`` to fetch back now, forgotten by the log: those of rules dropped (or
    forgotten by a reset of the store) or in doubt, those of groups whose rewrite failed a
    check since (``SharedRules.refuted``), and those on a path pair noted as differing since
    the last call, but for the ones another rule still vouches for (:func:`vouching`)."""
    book = rules.book
    # A rule skips only while active, and an active rule only ever goes on to dropped; one the
    # book no longer knows was forgotten with the store's log (a reset): its evidence is gone.
    wrong = [
        key for key in log.rules() if book.state(key) is not State.ACTIVE or rules.in_doubt(key)
    ]
    refuted = [key for key in log.groups() if key in rules.refuted]
    skips = log.of_rules(wrong) | log.of_groups(refuted) | log.on_pairs(rules.differing.fresh())
    back = {}
    for url, skip in skips.items():
        prediction = vouching(url, rules, fetched)
        if prediction is None:
            back[url] = skip
        else:  # stays skipped on the word of the rules that vouch: logged again under them,
            # or their own failure later would not fetch it back (it was lost that way)
            log.skipped(url, prediction.counterpart, [rule.key for rule in prediction.rules])
    return back


def vouching(url: str, rules: SharedRules, fetched: Fetched) -> Prediction | None:
    """The prediction of active rules not in doubt that map ``url`` onto a page fetched, on
    two paths that never differed elsewhere: it stays skipped. None: it does not."""
    prediction = rules.predict(url)
    if prediction is None or fetched.keeper_of(prediction.counterpart) is None:
        return None
    if rules.differing.known(url, prediction.counterpart):
        return None
    if any(rules.in_doubt(rule.key) for rule in prediction.rules):
        return None
    return prediction
