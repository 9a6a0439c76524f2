"""The duplicates a crawl of a site folder fetched, in classes by the best URL rule that could
have skipped each: one alike on every pair, on nearly every pair, on too few, none."""

from __future__ import annotations

from collections import defaultdict

from crawler.coverage import measure
from crawler.rules.policy import DEFAULT_POLICY, Evidence, checks_to_activate
from neardup.demo.static import SiteTruth
from neardup.demo.static_score import score_site, site_score_lines
from neardup.demo.static_waste import duplicates_by_rule

A, B = "http://a.test", "http://b.test"


def _truth(pages: list[str], pairs: list[tuple[str, str]]) -> SiteTruth:
    partners: dict[str, set[str]] = defaultdict(set)
    for one, other in pairs:
        partners[one].add(other)
        partners[other].add(one)
    return SiteTruth(
        base={"a": A, "b": B},
        seeds=(A + "/", B + "/"),
        pages=tuple(pages),
        host={url: "b" if url.startswith(B) else "a" for url in pages},
        rendered={},
        partners={url: frozenset(others) for url, others in partners.items()},
        page_bytes=0,
    )


def _site() -> tuple[SiteTruth, list[str]]:
    """Release 2 copies release 1 whole; release 3 copies 2 but for its last page; host b renders
    /9/ of host a, half of it alike; two list pages alike whose two parameters both differ."""
    one, two, three = ([f"{A}/{r}/p{i}.html" for i in range(10)] for r in (1, 2, 3))
    nine, mirror = [f"{A}/9/q{i}.html" for i in range(10)], [f"{B}/x/q{i}.html" for i in range(10)]
    lists = [f"{A}/list?x=1&y=2", f"{A}/list?x=3&y=4"]
    pairs = [*zip(two, one, strict=True), *zip(three[:9], two[:9], strict=True)]
    pairs += [*zip(mirror[:5], nine[:5], strict=True), (lists[1], lists[0])]
    log = [*one, *two, *three, *nine, *mirror, *lists, one[0]]
    return _truth([*one, *two, *three, *nine, *mirror, *lists], pairs), log


def test_each_duplicate_fetched_is_classed_by_the_best_rule_onto_an_earlier_partner() -> None:
    truth, log = _site()
    by_rule = duplicates_by_rule(truth, log)
    # Release 2 -> 1 is alike on all its 10 pairs, 3 -> 2 on 9 of 10, b's /x/ -> a's /9/ on 5
    # of 10; the list pages differ in two parameters (no rule); release 1's p0 fetched again.
    assert by_rule.as_dict() == {
        "rule_holds": 10,
        "rules_that_hold": 1,
        "rule_nearly": 9,
        "no_rule_holds": 5,
        "no_rule": 1,
        "fetched_again": 1,
        "checks_to_learn": checks_to_activate(Evidence(), False, DEFAULT_POLICY),
    }
    # The classes are the crawl's duplicates fetched, every one.
    assert measure(log, truth.pages, truth.partners).wasted == 26


def test_of_several_earlier_partners_the_best_rule_counts() -> None:
    truth, log = _site()
    # Release 3 fetched before release 2 (and after 1, which it has no partner in: not a
    # duplicate): each page of 2 has an earlier partner in 1 (alike on all 10 pairs) and, but
    # the last, one in 3 (9 of 10): the rule onto 1 counts.
    one, three = log[:10], log[20:30]
    reordered = [*one, *three, *log[10:20], *log[30:]]
    by_rule = duplicates_by_rule(truth, reordered)
    assert (by_rule.rule_holds, by_rule.rule_nearly) == (10, 0)
    assert measure(reordered, truth.pages, truth.partners).wasted == 10 + 0 + 5 + 1 + 1


def test_the_summary_shows_the_classes_under_the_duplicates_fetched() -> None:
    truth, log = _site()
    score = score_site(truth, log, {})
    plain = site_score_lines(score)
    lines = site_score_lines(score, duplicates_by_rule(truth, log))
    assert len(lines) == len(plain) + 7
    text = "\n".join(lines)
    assert "duplicates fetched:         26" in text
    assert "alike on every pair:          10 (1 rules; a rule needs 11+ clean checks" in text
    assert "alike on 90%-99%:              9" in text
    assert "alike on under 90%:            5" in text
    assert "no rule maps it:               1" in text
    assert "the same URL again:            1" in text
