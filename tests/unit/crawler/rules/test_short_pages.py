"""A rule skips a short page only once its checks on short pages alone would activate it."""

from __future__ import annotations

from crawler.rules.learning import Observation
from crawler.rules.policy import State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.short_pages import SHORT_SHINGLES, ShortPageChecks
from crawler.rules.store import MemoryRuleStore

A = "http://a.example"
OLD, NEW = "/8.3.3", "/latest"
RULE = PathRewrite(A, OLD, A, NEW)


def _short(i: int) -> str:
    return f"{A}{NEW}/announce/r{i}.html"


def _long(i: int) -> str:
    return f"{A}{NEW}/how-to/p{i}.html"


def _lengths(url: str) -> int | None:
    """Announcements are short (100 shingles), how-tos long, anything else unknown."""
    if "/announce/" in url:
        return 100
    if "/how-to/" in url:
        return 1_500
    return None


def _check(counterpart: str, success: bool) -> Observation:
    return Observation(RULE, counterpart.replace(NEW, OLD), counterpart, success)


def test_only_checks_of_short_counterparts_count_each_once() -> None:
    checks = ShortPageChecks(_lengths)
    failed = _check(_short(0), False)
    checks.note(failed)
    checks.note(failed)  # the same decision read twice
    checks.note(_check(_long(0), False))  # a long page: another stratum
    checks.note(_check(f"{A}{NEW}/unknown.html", False))  # length unknown here: not short
    assert checks.counts(RULE.key) == (0, 1)
    assert checks.short(_short(5)) and not checks.short(_long(5))
    assert not checks.short(f"{A}{NEW}/unknown.html")
    assert _lengths(_short(0)) == 100 < SHORT_SHINGLES


def test_short_pages_are_vouched_for_by_short_checks_alone_as_a_rule_is_activated() -> None:
    checks = ShortPageChecks(_lengths)
    for i in range(10):
        checks.note(_check(_short(i), True))
        checks.note(_check(_long(i), True))
    assert not checks.vouched(RULE.key)  # 10 clean short checks: the bound is 0.79
    assert checks.fetch([RULE.key], _short(99)) and not checks.fetch([RULE.key], _long(99))
    checks.note(_check(_short(10), True))
    assert checks.vouched(RULE.key) and not checks.fetch([RULE.key], _short(99))
    checks.note(_check(_short(11), False))  # 11 of 12: 0.66, fetched again
    assert checks.fetch([RULE.key], _short(99))
    for i in range(12, 20):  # 19 of 20 short checks passed: the bound is back at 0.8
        checks.note(_check(_short(i), True))
    assert not checks.fetch([RULE.key], _short(99))


def _learn(rules: SharedRules, counterpart: str, alike: bool) -> None:
    page = counterpart.replace(NEW, OLD)
    keeper = {counterpart: counterpart, page: page}.get
    rules.learn(page, counterpart if alike else None, keeper)


def test_a_release_rule_active_on_long_pages_fetches_its_short_ones_until_they_vouch() -> None:
    """pytest 8.3.3 -> latest on a held-out host: alike on its long pages, not on a share of
    its short release announcements, yet active on its precision over both."""
    rules = SharedRules(MemoryRuleStore(), shingles_of=_lengths)
    for i in range(11):
        _learn(rules, _long(i), True)
    assert rules.book.state(RULE.key) is State.ACTIVE and not rules.in_doubt(RULE.key)
    short = rules.predict(f"{A}{OLD}/announce/r50.html")
    long = rules.predict(f"{A}{OLD}/how-to/p50.html")
    assert short is not None and long is not None
    assert rules.short_in_doubt(short) and not rules.short_in_doubt(long)
    assert all(rules.explore(short) for _ in range(40))  # each fetched, as a check
    assert sum(rules.explore(long) for _ in range(40)) <= 3  # the 5% exploration only
    for i in range(5):
        _learn(rules, _short(i), True)
    _learn(rules, _short(5), False)  # an announcement that changed between the releases
    for i in range(6, 16):
        _learn(rules, _short(i), True)
    assert rules.short_pages is not None and rules.short_pages.counts(RULE.key) == (15, 1)
    assert rules.short_in_doubt(short)  # 15 of 16: 0.75
    for i in range(16, 20):
        _learn(rules, _short(i), True)
    assert not rules.short_in_doubt(short)  # 19 of 20
    assert sum(rules.explore(short) for _ in range(40)) <= 3


def test_without_page_lengths_nothing_changes() -> None:
    rules = SharedRules(MemoryRuleStore())
    for i in range(12):
        _learn(rules, _short(i), True)
    _learn(rules, _short(12), False)
    for i in range(13, 40):
        _learn(rules, _short(i), True)
    short = rules.predict(f"{A}{OLD}/announce/r50.html")
    assert short is not None and rules.short_pages is None and not rules.short_in_doubt(short)
