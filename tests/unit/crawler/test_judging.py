"""The default outlink judge: the decision's word, per held request."""

from __future__ import annotations

from crawler.frontier import Held
from crawler.judging import AdmitAll, DecidedPage, DecisionJudge
from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.contract.reading import PageKey

KEY = PageKey("http://a.test/", 1.0)
OUTLINKS = ("http://a.test/1", "http://a.test/2")
HELD = (
    Held("http://a.test/1", "r1"),
    Held("http://a.test/2", "r2"),
    Held("http://api.a.test/search?q=1", "api"),  # not an outlink of the page
)


def page(follow: bool, links: tuple[str, ...] = OUTLINKS, corrects: bool = False) -> DecidedPage:
    decision = Decision(
        url=KEY.url, host="a.test", fetched_at=KEY.fetched_at, decided_at=2.0,
        verdict=Verdict.UNIQUE if follow else Verdict.NEAR_DUPLICATE, simhash="0" * 16,
        priority=0.5, follow_outlinks=follow, outlinks=links if follow else (), corrects=corrects,
    )  # fmt: skip
    return DecidedPage(KEY, 0, OUTLINKS, decision, HELD)


def test_a_new_page_releases_everything_the_decision_lists_and_what_it_cannot_know() -> None:
    judgement = DecisionJudge().judge(page(True))
    assert [h.request for h in judgement.follow] == ["r1", "r2", "api"]
    assert judgement.drop == ()
    # A decider that schedules only some outlinks keeps the others back; the API call the
    # decision knows nothing about still goes.
    judgement = DecisionJudge().judge(page(True, links=("http://a.test/2",)))
    assert [h.request for h in judgement.follow] == ["r2", "api"]
    assert [h.request for h in judgement.drop] == ["r1"]


def test_a_duplicate_or_corrected_page_drops_every_request() -> None:
    for decided in (page(False), page(False, corrects=True)):
        judgement = DecisionJudge().judge(decided)
        assert judgement.follow == () and judgement.drop == HELD


def test_the_default_gate_admits_everything() -> None:
    assert AdmitAll().admit("http://a.test/1", KEY) is None
