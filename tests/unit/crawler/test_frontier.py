"""Decision bookkeeping: foreign, duplicated and correcting decisions; priorities; scope."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from crawler.frontier import (
    Action,
    Claim,
    Held,
    Ledger,
    PageKey,
    ResumeState,
    domain_allowed,
    request_priority,
)
from dedup_worker.contract.messages import Decision, Verdict

A = PageKey("http://a.test/", 100.0)
B = PageKey("http://a.test/b", 101.0)


def decision(
    key: PageKey,
    follow: bool = True,
    links: tuple[str, ...] = (),
    corrects: bool = False,
    verdict: Verdict = Verdict.UNIQUE,
) -> Decision:
    return Decision(
        url=key.url,
        host="a.test",
        verdict=verdict,
        simhash="0" * 16,
        priority=0.5,
        follow_outlinks=follow,
        fetched_at=key.fetched_at,
        decided_at=key.fetched_at + 1,
        outlinks=links,
        corrects=corrects,
    )


def test_only_this_process_pages_are_applied() -> None:
    ledger = Ledger()
    assert ledger.apply(decision(A)).action is Action.FOREIGN
    ledger.published(A, 0, ("http://a.test/x",))
    # Same URL, another fetch (another process or an earlier crawl): not ours.
    assert ledger.apply(decision(PageKey(A.url, 99.0))).action is Action.FOREIGN
    assert ledger.outstanding == 1


def test_follow_then_duplicates_are_ignored() -> None:
    ledger = Ledger()
    ledger.published(A, 2, ("http://a.test/x", "http://a.test/y"))
    outcome = ledger.apply(decision(A, links=("http://a.test/x",)))
    assert (outcome.action, outcome.depth, outcome.links) == (
        Action.FOLLOW,
        2,
        ("http://a.test/x",),
    )
    assert ledger.outstanding == 0
    assert ledger.apply(decision(A, links=("http://a.test/x",))).action is Action.DUPLICATE
    assert ledger.apply(decision(A, follow=False)).action is Action.DUPLICATE


def test_a_suppressed_page_reports_its_outlinks() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ("http://a.test/x",))
    outcome = ledger.apply(decision(A, follow=False, verdict=Verdict.NEAR_DUPLICATE))
    assert (outcome.action, outcome.suppressed) == (Action.SUPPRESS, ("http://a.test/x",))


def test_a_correction_cancels_pending_links_unless_another_page_wants_them() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ())
    ledger.published(B, 0, ())
    ledger.apply(decision(A, links=("http://x/1", "http://x/2", "http://x/3")))
    ledger.apply(decision(B, links=("http://x/2",)))
    for url in ("http://x/1", "http://x/2", "http://x/3"):
        assert ledger.claim(url, A) is Claim.NEW
        ledger.scheduled(url, A)
    assert ledger.claim("http://x/2", B) is Claim.PENDING  # B wants it too
    assert ledger.start_fetch("http://x/3")  # already on its way: cannot be saved
    outcome = ledger.apply(decision(A, follow=False, corrects=True))
    assert (outcome.action, outcome.cancelled) == (Action.CORRECT, ("http://x/1",))
    assert not ledger.start_fetch("http://x/1")
    assert ledger.start_fetch("http://x/2")


def test_a_correction_is_final_whatever_arrives_after_it() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ("http://x/1",))
    # The correction overtakes the page's own decision (two workers raced).
    outcome = ledger.apply(decision(A, follow=False, corrects=True))
    assert (outcome.action, outcome.suppressed) == (Action.CORRECT, ("http://x/1",))
    assert ledger.apply(decision(A, links=("http://x/1",))).action is Action.DUPLICATE
    assert ledger.apply(decision(A, follow=False, corrects=True)).action is Action.DUPLICATE


def test_a_cancelled_link_is_revived_by_a_later_source() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ())
    ledger.apply(decision(A, links=("http://x/1",)))
    ledger.scheduled("http://x/1", A)
    ledger.apply(decision(A, follow=False, corrects=True))
    # Still in Scrapy's queue: a followed page wanting it revives it instead of re-queueing.
    assert ledger.claim("http://x/1", B) is Claim.PENDING
    assert ledger.start_fetch("http://x/1")


def test_held_requests_go_with_the_decision() -> None:
    ledger = Ledger()
    ledger.published(A, 1, ("http://x/1", "http://x/2"), collecting=True)
    assert ledger.hold(A, Held("http://x/1", "request-1"))
    assert ledger.hold(A, Held("http://api/3", "request-3"))
    assert ledger.close(A) is None  # no decision yet: the page waits for it
    assert not ledger.hold(A, Held("http://x/2", "late"))  # closed: nothing more is held
    outcome = ledger.apply(decision(A, links=("http://x/1", "http://x/2")))
    assert outcome.action is Action.FOLLOW
    assert [h.request for h in outcome.held] == ["request-1", "request-3"]
    assert outcome.outlinks == ("http://x/1", "http://x/2")


def test_a_decision_that_overtakes_the_callback_applies_when_the_page_closes() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ("http://x/1",), collecting=True)
    ledger.hold(A, Held("http://x/1", "first"))
    assert ledger.apply(decision(A, links=("http://x/1",))).action is Action.WAITING
    # A correction while the callback still yields replaces the first decision.
    assert ledger.apply(decision(A, follow=False, corrects=True)).action is Action.WAITING
    ledger.hold(A, Held("http://x/2", "second"))
    outcome = ledger.close(A)
    assert outcome is not None and outcome.action is Action.CORRECT
    assert [h.request for h in outcome.held] == ["first", "second"]
    assert ledger.outstanding == 0
    assert ledger.apply(decision(A, links=("http://x/1",))).action is Action.DUPLICATE


def test_publish_failure_returns_the_held_requests() -> None:
    ledger = Ledger()
    ledger.published(A, 0, (), collecting=True)
    ledger.hold(A, Held("http://x/1", "r"))
    assert [h.request for h in ledger.publish_failed(A)] == ["r"]
    assert not ledger.hold(A, Held("http://x/2", "r2"))  # the caller lets it through
    assert ledger.close(A) is None and ledger.outstanding == 0


def test_publish_failure_forgets_the_page() -> None:
    ledger = Ledger()
    ledger.published(A, 0, ())
    ledger.publish_failed(A)
    assert ledger.outstanding == 0
    assert ledger.apply(decision(A)).action is Action.FOREIGN


@pytest.mark.parametrize(
    ("priority", "expected"),
    [(0.0, 0), (1.0, 100), (0.952, 95), (0.5, 50), (-3.0, 0), (7.0, 100), (math.nan, 0)],
)
def test_request_priority_buckets_and_clamps(priority: float, expected: int) -> None:
    assert request_priority(priority) == expected


def test_request_priority_keeps_the_order() -> None:
    values = [i / 1000 for i in range(1001)]
    levels = [request_priority(v, 20) for v in values]
    assert levels == sorted(levels) and set(levels) == set(range(21))


def test_domain_rule_matches_scrapy_offsite() -> None:
    allowed = ("example.org", "127.0.0.2")
    assert domain_allowed("example.org", allowed) and domain_allowed("a.example.org", allowed)
    assert not domain_allowed("badexample.org", allowed)
    assert domain_allowed("127.0.0.2", allowed) and not domain_allowed("127.0.0.20", allowed)
    assert domain_allowed("anything.test", ())


def test_resume_state_round_trips(tmp_path: Path) -> None:
    state = ResumeState(
        {0: 5, 1: 7},
        [("http://a/", 1.5, 2, ("http://a/x",))],
        [{"url": "http://a/y", "priority": 95}],
        12,
        [[{"url": "http://a/x", "body": b"", "_neardup_url": "http://a/x"}]],
    )
    state.save(tmp_path / "job" / "state.json")
    assert ResumeState.load(tmp_path / "job" / "state.json") == state
    assert ResumeState.load(tmp_path / "missing.json") is None
