"""A page pair a good rule got wrong is never skipped again, on any host of the crawl."""

from __future__ import annotations

from crawler.rules.counterparts import judge_outlinks
from crawler.rules.differing import DifferingPairs, telling
from crawler.rules.policy import DEFAULT_POLICY, State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore

A, B = "http://a.example", "http://b.example"
OLD, NEW = "/0.21.1", "/latest"


def test_only_a_rule_that_holds_elsewhere_tells_about_its_page() -> None:
    window, bar = DEFAULT_POLICY.window, DEFAULT_POLICY.activate_at
    assert telling(window - 1, window)  # 7 of 8 checks held
    assert not telling(window - 2, window - 1)  # too few checks to say the rule holds
    assert not telling(round(bar * window) - 1, window)  # 5 of 8: the rule fails everywhere
    assert telling(20, 25) and not telling(19, 25)  # precision 0.8 exactly, and just under


def test_pairs_are_kept_by_path_and_query_in_either_order() -> None:
    pairs = DifferingPairs()
    pairs.note(f"{A}{OLD}/dev/release.html", f"{A}{NEW}/dev/release.html")
    assert pairs.known(f"{B}{NEW}/dev/release.html", f"{B}{OLD}/dev/release.html")
    assert not pairs.known(f"{B}{OLD}/dev/hacking.html", f"{B}{NEW}/dev/hacking.html")
    pairs.note(f"{A}/x?s=1", f"{A}/x")
    assert pairs.known(f"{B}/x?s=1", f"{B}/x") and not pairs.known(f"{B}/x?s=2", f"{B}/x")


def test_past_its_limit_the_memory_starts_over() -> None:
    pairs = DifferingPairs(limit=2)
    for i in range(3):
        pairs.note(f"{A}/p{i}", f"{A}/q{i}")
    assert len(pairs) == 1 and pairs.known(f"{A}/p2", f"{A}/q2")


def _activate(rules: SharedRules, origin: str, pages: range) -> None:
    """Pages of ``origin``'s old release, each a duplicate of the new one's."""
    keeper = {f"{origin}{NEW}/p{i}": f"{origin}{NEW}/p{i}" for i in pages}.get
    for i in pages:
        rules.learn(f"{origin}{OLD}/p{i}", f"{origin}{NEW}/p{i}", keeper)


def _release_page_differs(rules: SharedRules, origin: str) -> None:
    old, new = f"{origin}{OLD}/dev/release.html", f"{origin}{NEW}/dev/release.html"
    rules.learn(old, None, {new: new, old: old}.get)


def test_a_prediction_between_paths_that_differed_on_another_host_is_always_fetched() -> None:
    rules = SharedRules(MemoryRuleStore())
    _activate(rules, A, range(11))
    _activate(rules, B, range(20))
    _release_page_differs(rules, B)  # B's rule: 20 of 21 checks held
    rule_a = PathRewrite(A, OLD, A, NEW)
    assert rules.book.state(rule_a.key) is State.ACTIVE and not rules.in_doubt(rule_a.key)
    release = rules.predict(f"{A}{OLD}/dev/release.html")
    assert release is not None
    assert all(rules.explore(release) for _ in range(30))  # fetched, as a check, every time
    other = rules.predict(f"{A}{OLD}/dev/hacking.html")
    assert other is not None
    assert sum(rules.explore(other) for _ in range(40)) == 2  # the 5% exploration only


def test_a_failure_of_a_rule_that_fails_everywhere_marks_nothing() -> None:
    rules = SharedRules(MemoryRuleStore())
    _activate(rules, B, range(2))
    _release_page_differs(rules, B)  # 2 of 3: a rule that says nothing about its pages
    assert len(rules.differing) == 0


def test_a_group_follows_a_member_whose_pair_is_known_to_differ() -> None:
    pairs = DifferingPairs()
    pairs.note(f"{B}{OLD}/dev/release.html", f"{B}{NEW}/dev/release.html")
    links = [f"{A}{OLD}/dev/release.html", f"{A}{OLD}/dev/hacking.html", f"{A}{OLD}/new.html"]
    known = {f"{A}{NEW}/dev/release.html", f"{A}{NEW}/dev/hacking.html"}.__contains__
    page, keeper = f"{A}{OLD}/index.html", f"{A}{NEW}/index.html"
    judged = judge_outlinks(page, keeper, links, known, differs=pairs.known)
    assert judged.group is not None and set(judged.group.members) == {links[1]}
    assert judged.follow == (links[0], links[2]) and judged.known_to_differ == 1
    plain = judge_outlinks(page, keeper, links, known)
    assert plain.group is not None and set(plain.group.members) == set(links[:2])
