"""When a rule may skip fetches, how it keeps being checked, and when it is dropped.

A rule's evidence is a stream of *checks*: a page the rule applies to was fetched anyway and its
decision says whether it is a duplicate of the rule's counterpart (success) or not (failure).
Every supporting pair is a check (the duplicate was fetched and matched the counterpart); so is
every later fetch of a page the rule applies to whose counterpart is known. A rule is:

- a **candidate** from its first check: it predicts nothing yet;
- **active** once the Wilson lower bound of its precision reaches ``activate_at`` and its
  support is diverse enough (``min_paths`` distinct paths; an any-value parameter rule also
  ``min_values`` distinct values): its predictions may skip fetches, except a sample it keeps
  fetching (``exploration_rate``) to stay checked;
- **dropped**, for good, as soon as ``window_failures`` of its last ``window`` checks failed.

An active rule whose failed checks bring its lower bound back under ``activate_at`` stays active
in the store but is *in doubt* to every process (``crawler.rules.shared.SharedRules.in_doubt``):
it skips nothing, each prediction is fetched as a check, until the bound is back.

The numbers, and why (defaults of :class:`RulePolicy`):

- ``z = 1.645``, ``activate_at = 0.8``: a one-sided 95% lower bound (only the low side matters)
  of at least 0.8. With no failure that takes 11 checks (11 / (11 + z**2) = 0.803); with one,
  20. Real rules are bimodal: a mirror or a session id holds on nearly every page, a
  pagination or language parameter fails on most; 11 straight successes happen by chance with
  probability 0.8**11 = 8.6% for a rule of precision 0.8 and 0.05% for one of 0.5.
- ``window = 8``, ``window_failures = 2``: "starts failing" is 2 failures among the last 8
  checks. A rule of precision 0.98 trips it with probability ~1% per check window, one of 0.875
  within a few windows. Dropping is permanent: a pagination parameter that collected some lucky
  successes must never come back, and a wrongly dropped rule only costs fetches, never content.
- ``min_paths = 3``, ``min_values = 3``: a rule seen on one or two paths is page-specific; an
  any-value parameter rule seen with one or two values (``page=1`` is the plain listing) says
  nothing about the others.
- exploration: 5% of an active rule's predictions are still fetched as checks (MaybeDont's
  figure; systematic, one in twenty of each rule's predictions, see
  :meth:`crawler.rules.book.RuleBook.explore`),
  ``max(min_exploration, min(1, exploration_scale / checks))`` with
  ``exploration_scale = 0``. A rule that turns bad is dropped after about ``window_failures``
  sampled failures, i.e. after losing about ``window_failures / rate`` = 40 pages at most. A
  young rule used to get more (scale 1: 9% right after activation), to drop a bad one after
  ~22 pages; but the 11 clean checks it took to activate already make a bad young rule rare
  (0.05% for precision 0.5), while the extra checks cost every good rule fetches just when most
  of its predictions happen: on the subtree test site, crawled for real (fetches ahead of their
  decisions), they were about a sixth of all wasted fetches, enough to miss waste <= W0 / 2.
- groups (:mod:`crawler.rules.counterparts`): ``5 + ceil(0.1 n)`` of ``n`` predicted duplicates
  are fetched first. If a share q of the group is in fact new, all samples still match with
  probability (1 - q)**s; the expected share lost, q (1 - q)**s, peaks at q = 1 / (s + 1), a
  little above 1 / (e (s + 1)): 5.7% for the smallest group that holds pages back (n = 7,
  s = 6), 3.2% at n = 60; and a single failing sample releases the whole group, as does a
  single failed check of the rule of its rewrite (which also fetches back what its groups
  dropped before). ``group_trust_checks = 11``: while the rewrite's rule has c < 11 checks
  (all clean, or no group forms), a group samples at least 11 - c of its members, so a group
  never drops pages on less evidence than a rule needs to skip them (11 clean checks activate
  a rule). The sampling risk is worst for a young rule's first group: with 8 samples of 22
  members of which 4 differ, all samples match with probability C(18, 8) / C(22, 8) = 0.14
  (a pair of real README hosts lost 4 pages that way), with 11 samples 0.045.
- ``NEVER_LEARN``: parameters that select content by convention (pagination, language) never
  become rules, whatever the evidence: a wrong rule loses pages (skipped pages are never
  fetched), a missing rule only costs fetches. Evidence alone also rejects them (the tests
  turn the list off); the list covers a crawl too short for evidence to accumulate.
- ``CHANGES_BY_RELEASE``: pages named like release notes (``changelog``, ``changes``,
  ``release``, ...) differ between releases by convention, however well the release's rule
  holds on its other pages: a prediction or group member of such a name between two different
  paths is fetched (:mod:`crawler.rules.differing`). Same path (a host alias) is unaffected.
- ``release_front_pages``: so is the front page of a release (the index page of a directory
  named like a release, ``RELEASE_DIRECTORY``) against another release's: it is the table of
  contents and the introduction, which change with any page added or reworded in the release.

With these numbers a simulated crawl of the test site ``neardup/demo/subtrees.py`` (oracle
decisions, breadth-first, depth-first and shuffled orders) keeps coverage 1.0, skips no trap
page, and wastes 0.45-0.48 of what a crawl without suppression wastes
(``tests/unit/crawler/rules/test_policy_on_sites.py``).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from enum import StrEnum

from dedup_worker.errors import ConfigError

#: Parameter names (lowercase) that never become rules: pagination and language selectors.
NEVER_LEARN: frozenset[str] = frozenset(
    {
        "page",
        "pg",
        "paged",
        "pagenum",
        "page_num",
        "pageno",
        "offset",
        "start",
        "lang",
        "language",
        "hl",
        "locale",
        "lng",
    }
)


#: Page names (lowercase, without extension) that change between releases by convention: each
#: release's notes gain an entry. Never skipped between two paths (see ``crawler.rules.differing``).
#: Directory names of a release: a dotted version (``3.0.2``, ``v24.10.0``, ``1.2rc1``), a ``v``
#: and a number (``v20``), or a release channel. A session id or a date has no dots, a
#: language no digit, so neither matches.
RELEASE_DIRECTORY = re.compile(
    r"v?\d{1,4}(?:\.\d+)+[a-z0-9.+-]*|v\d{1,4}"
    r"|latest|stable|dev|devel|development|master|main|current|nightly|next|trunk|unstable",
    re.IGNORECASE,
)

CHANGES_BY_RELEASE: frozenset[str] = frozenset(
    {
        "changelog",
        "changes",
        "history",
        "news",
        "whatsnew",
        "whats-new",
        "whats_new",
        "release",
        "releases",
        "release-notes",
        "release_notes",
        "releasenotes",
        "relnotes",
    }
)


class State(StrEnum):
    CANDIDATE = "c"
    ACTIVE = "a"
    DROPPED = "d"


@dataclass(frozen=True, slots=True)
class Evidence:
    """A rule's counters: checks that succeeded and failed, the last ``window`` outcomes (bit i
    set = the check i steps back failed), distinct successful values and paths (capped)."""

    successes: int = 0
    failures: int = 0
    recent: int = 0
    values: int = 0
    paths: int = 0

    @property
    def checks(self) -> int:
        return self.successes + self.failures


@dataclass(frozen=True)
class RulePolicy:
    """The learning policy of one crawl; every process of the crawl must use the same one (the
    Redis store refuses a different one). See the module docstring for the numbers."""

    z: float = 1.645
    activate_at: float = 0.8
    min_paths: int = 3
    min_values: int = 3
    window: int = 8
    window_failures: int = 2
    min_exploration: float = 0.05
    exploration_scale: float = 0.0
    diversity_cap: int = 16
    group_min_sample: int = 5
    group_sample_fraction: float = 0.1
    group_trust_checks: int = 11
    never_learn: frozenset[str] = NEVER_LEARN
    changes_by_release: frozenset[str] = CHANGES_BY_RELEASE
    release_front_pages: bool = True

    def __post_init__(self) -> None:
        checks = [
            (self.z > 0, "z must be > 0"),
            (0 < self.activate_at < 1, "activate_at must be in (0, 1)"),
            (self.min_paths >= 1 and self.min_values >= 1, "min_paths, min_values must be >= 1"),
            (1 <= self.window <= 30, "window must be 1..30 checks"),
            (1 <= self.window_failures <= self.window, "window_failures must be 1..window"),
            (0 < self.min_exploration <= 1, "min_exploration must be in (0, 1]"),
            (self.exploration_scale >= 0, "exploration_scale must be >= 0"),
            (
                self.diversity_cap >= max(self.min_paths, self.min_values),
                "diversity_cap must be >= min_paths and min_values",
            ),
            (self.group_min_sample >= 1, "group_min_sample must be >= 1"),
            (0 <= self.group_sample_fraction <= 1, "group_sample_fraction must be in [0, 1]"),
            (self.group_trust_checks >= 0, "group_trust_checks must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"rule policy: {message}")
        object.__setattr__(self, "never_learn", frozenset(n.lower() for n in self.never_learn))
        names = frozenset(n.lower() for n in self.changes_by_release)
        object.__setattr__(self, "changes_by_release", names)

    def learnable(self, name: str) -> bool:
        return name.lower() not in self.never_learn

    def as_dict(self) -> dict[str, object]:
        """JSON-ready, to compare the policies of processes sharing a crawl."""
        return {
            "z": self.z,
            "activate_at": self.activate_at,
            "min_paths": self.min_paths,
            "min_values": self.min_values,
            "window": self.window,
            "window_failures": self.window_failures,
            "min_exploration": self.min_exploration,
            "exploration_scale": self.exploration_scale,
            "diversity_cap": self.diversity_cap,
            "group_min_sample": self.group_min_sample,
            "group_sample_fraction": self.group_sample_fraction,
            "group_trust_checks": self.group_trust_checks,
            "never_learn": sorted(self.never_learn),
            "changes_by_release": sorted(self.changes_by_release),
            "release_front_pages": self.release_front_pages,
        }


DEFAULT_POLICY = RulePolicy()


def wilson_lower_bound(successes: int, checks: int, z: float) -> float:
    """Wilson score lower bound of a proportion (0 without checks). The Redis script computes
    it with the same operations in the same order, so both stores agree to the last bit."""
    if checks <= 0:
        return 0.0
    n = float(checks)
    p = successes / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return (centre - margin) / (1 + z2 / n)


def recent_failures(recent: int) -> int:
    return bin(recent).count("1")


def push_outcome(recent: int, success: bool, window: int) -> int:
    """The window after one more check (newest outcome in bit 0)."""
    return ((recent << 1) | (0 if success else 1)) & ((1 << window) - 1)


def next_state(state: State, evidence: Evidence, needs_values: bool, policy: RulePolicy) -> State:
    """The state after a check (mirrored in :data:`crawler.rules.redis_lua.RECORD`)."""
    if state is State.DROPPED or recent_failures(evidence.recent) >= policy.window_failures:
        return State.DROPPED
    if state is State.CANDIDATE and _confident(evidence, needs_values, policy):
        return State.ACTIVE
    return state


def _confident(evidence: Evidence, needs_values: bool, policy: RulePolicy) -> bool:
    if evidence.paths < policy.min_paths:
        return False
    if needs_values and evidence.values < policy.min_values:
        return False
    bound = wilson_lower_bound(evidence.successes, evidence.checks, policy.z)
    return bound >= policy.activate_at


def checks_to_activate(
    evidence: Evidence, needs_values: bool, policy: RulePolicy, cap: int = 64
) -> int:
    """How many more successful checks (each on a new path, and a new value if it needs values)
    a candidate needs to become active; ``cap`` if not within ``cap``. What the crawler fetches
    of a candidate's predictions at once (:mod:`crawler.rules.pacing`)."""
    for more in range(1, cap):
        if evidence.paths + more < policy.min_paths:
            continue
        if needs_values and evidence.values + more < policy.min_values:
            continue
        checks = evidence.checks + more
        if wilson_lower_bound(evidence.successes + more, checks, policy.z) >= policy.activate_at:
            return more
    return cap


def exploration_rate(checks: int, policy: RulePolicy) -> float:
    """Share of an active rule's predictions fetched anyway, as checks (see module docstring)."""
    if checks <= 0:
        return 1.0
    return max(policy.min_exploration, min(1.0, policy.exploration_scale / checks))


def stable_fraction(url: str) -> float:
    """A number in [0, 1) fixed by the URL alone: every process samples the same URLs."""
    digest = hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def group_sample_size(members: int, policy: RulePolicy, rule_checks: int | None = None) -> int:
    """How many of a group of predicted duplicates are fetched before the rest is judged.
    ``rule_checks``: the checks of the rule of the group's rewrite so far (all clean: a failed
    one forms no group); while they are fewer than ``group_trust_checks`` the sample makes up
    the difference. None: the rule is not known, the base size alone."""
    wanted = policy.group_min_sample + math.ceil(policy.group_sample_fraction * members)
    if rule_checks is not None:
        wanted = max(wanted, policy.group_trust_checks - rule_checks)
    return min(members, wanted)
