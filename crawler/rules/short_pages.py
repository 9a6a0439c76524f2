"""A rule's short pages need their own evidence before the rule skips one.

Between two releases a short page changes in proportion to its length: its version string,
date and pager titles weigh more in 100 words than in 1,000. On the held-out documentation sites
(README, "Held-out sites") 53 % of the release pairs of one page under 150 words were not alike
(J < 0.9), 10 % at 150-300 words, 1-4 % above. A release rule there holds on its long pages and
fails on a share of its short ones, yet its precision over all of them (pytest 8.3.3 -> 8.3.4:
230 of 246 pages; Flask 3.0.2 -> 3.1.0: 65 of 75) clears the activation bar, and the pages it
then skips and loses are short ones (up to 21 in a crawl of 1,103 unique pages).

So the checks of a rule whose counterpart is short (under :data:`SHORT_SHINGLES` word
4-shingles, about 300 words) are also counted apart (:class:`ShortPageChecks`), and a
prediction onto a short counterpart is skipped only while that count alone would activate the
rule: the Wilson lower bound of its short successes at the activation bar, as
:func:`crawler.rules.policy.next_state` asks of the whole rule (11 clean short checks, 20 with
one failure). Until then such a prediction is fetched, as a check, which builds the count or
shows the short pages differ. A rule whose pages are all short is unaffected (its short checks
are its checks); a mirror or a renderer of one release gets its 11 short checks and skips its
short pages like the rest.

Measured by turns on the held-out sites (4 crawls each): unique pages missed 2 / 0 / 0 / 2
against 7 / 17 / 2 / 5 without it, duplicates fetched 1,183-1,237 against 980-1,144 (+11 %:
about 18 duplicate fetches per unique page kept). Fetching every short page instead cost
+30 %; fetching them only after a rule failed on one (the first form of this) missed 3-12.

Every process counts from the checks it records (each process reads all decisions), so nothing
is stored; an observation counts once (its id). A page's length comes from its sketch
(:meth:`crawler.rules.sketches.PageComparer.shingle_count`); a page whose length this process
does not know counts as long: the rule's own evidence decides, as before.
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.rules.learning import Observation
from crawler.rules.policy import DEFAULT_POLICY, RulePolicy, wilson_lower_bound

#: A counterpart with fewer word 4-shingles than this (about 300 words) is a short page: where
#: the held-out release pairs stop differing (10 % not alike at 150-300 words, 1-4 % above).
SHORT_SHINGLES = 300
#: Observation ids a process remembers to count each once; past this it starts over.
ID_LIMIT = 200_000

#: The shingle count of a fetched page, if known without I/O.
ShingleCount = Callable[[str], int | None]


class ShortPageChecks:
    """Each rule's checks on short counterparts: (successes, failures). Not thread-safe."""

    def __init__(self, shingles_of: ShingleCount, policy: RulePolicy = DEFAULT_POLICY) -> None:
        self.shingles_of = shingles_of
        self.policy = policy
        self._counts: dict[str, tuple[int, int]] = {}
        self._seen: set[str] = set()

    def short(self, url: str) -> bool:
        shingles = self.shingles_of(url)
        return shingles is not None and shingles < SHORT_SHINGLES

    def note(self, observation: Observation) -> None:
        """Count a check if its counterpart is a short page (once per observation)."""
        if not self.short(observation.counterpart):
            return
        if len(self._seen) >= ID_LIMIT:
            self._seen.clear()
        if observation.id in self._seen:
            return
        self._seen.add(observation.id)
        successes, failures = self._counts.get(observation.rule.key, (0, 0))
        if observation.success:
            successes += 1
        else:
            failures += 1
        self._counts[observation.rule.key] = (successes, failures)

    def vouched(self, key: str) -> bool:
        """Do the rule's short checks alone clear the activation bar?"""
        successes, failures = self._counts.get(key, (0, 0))
        bound = wilson_lower_bound(successes, successes + failures, self.policy.z)
        return bound >= self.policy.activate_at

    def fetch(self, keys: list[str], counterpart: str) -> bool:
        """Fetch a prediction onto ``counterpart`` by these rules, as a check?"""
        return self.short(counterpart) and not all(self.vouched(key) for key in keys)

    def counts(self, key: str) -> tuple[int, int]:
        return self._counts.get(key, (0, 0))
