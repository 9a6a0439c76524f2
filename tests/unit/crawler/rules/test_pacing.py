"""Pacing a candidate rule's checks: no more in flight than it needs, nothing lost."""

from __future__ import annotations

from crawler.rules.pacing import Pacer
from crawler.rules.policy import DEFAULT_POLICY, Evidence, checks_to_activate
from crawler.rules.rewrite import ParamRule

D = "http://docs.test"
PRINT = ParamRule(D, "print", "1")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_checks_to_activate_follows_the_policy() -> None:
    assert checks_to_activate(Evidence(), False, DEFAULT_POLICY) == 11
    assert checks_to_activate(Evidence(successes=10, paths=10), False, DEFAULT_POLICY) == 1
    assert checks_to_activate(Evidence(successes=11, paths=2), False, DEFAULT_POLICY) == 1
    with_failure = Evidence(successes=5, failures=1, recent=1, paths=6)
    assert checks_to_activate(with_failure, False, DEFAULT_POLICY) == 14  # 19 of 20
    assert checks_to_activate(Evidence(successes=20, paths=20, values=1), True, DEFAULT_POLICY) == 2


def test_a_candidate_gets_what_it_needs_in_flight_and_the_rest_waits() -> None:
    clock = Clock()
    pacer = Pacer(DEFAULT_POLICY, expiry=10.0, clock=clock)
    pacer.learned({PRINT.key: Evidence(successes=8, paths=8)})  # 3 more needed
    urls = [f"{D}/item-{i}?print=1" for i in range(6)]
    admitted = [url for url in urls if pacer.admit(url, [PRINT])]
    assert admitted == urls[:3] and pacer.held == 3
    assert pacer.admit(f"{D}/other", []) and pacer.held == 3  # no candidate: never held
    assert pacer.release(lambda url: [PRINT]) == []  # nothing decided yet
    pacer.decided(urls[:1])
    pacer.learned({PRINT.key: Evidence(successes=9, paths=9)})  # still 2 needed, 2 in flight
    assert pacer.release(lambda url: [PRINT]) == []
    pacer.decided(urls[1:3])
    pacer.learned({PRINT.key: Evidence(successes=9, failures=2, recent=3, paths=9)})
    # The rule is gone (dropped: not a candidate any more): everything held goes.
    assert pacer.release(lambda url: []) == urls[3:] and pacer.held == 0


def test_nothing_waits_for_a_decision_that_never_comes() -> None:
    clock = Clock()
    pacer = Pacer(DEFAULT_POLICY, expiry=10.0, clock=clock)
    pacer.learned({PRINT.key: Evidence(successes=10, paths=10)})  # 1 more needed
    assert pacer.admit(f"{D}/a?print=1", [PRINT]) and not pacer.admit(f"{D}/b?print=1", [PRINT])
    clock.now = 9.0
    assert pacer.release(lambda url: [PRINT]) == []
    clock.now = 10.0  # the first check's fetch failed: it stops counting, the next one goes
    assert pacer.release(lambda url: [PRINT]) == [f"{D}/b?print=1"]
    assert not pacer.admit(f"{D}/c?print=1", [PRINT])
    assert pacer.release_all() == [f"{D}/c?print=1"] and pacer.held == 0


def test_pages_sent_before_a_rule_was_known_count_as_its_checks() -> None:
    pacer = Pacer(DEFAULT_POLICY, clock=Clock())
    for i in range(11):  # a first burst, before any decision proposed the rule
        pacer.sent(f"{D}/item-{i}?print=1")
    pacer.sent(f"{D}/unrelated")
    pacer.adopt(PRINT, lambda url: url != f"{D}/item-10")  # no counterpart known for one
    assert pacer.admit(f"{D}/item-20?print=1", [PRINT])  # 10 in flight: one more goes
    assert not pacer.admit(f"{D}/item-21?print=1", [PRINT])
    pacer.decided([f"{D}/item-0?print=1"])
    pacer.learned({PRINT.key: Evidence(successes=1, paths=1)})  # 10 needed, 10 in flight
    assert pacer.release(lambda url: [PRINT]) == []
