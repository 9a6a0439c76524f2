"""A duplicate's outlinks judged against its keeper's: new content, groups, samples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.rules.book import RuleBook
from crawler.rules.counterparts import GroupCheck, GroupVerdict, RewriteEvidence, judge_outlinks
from crawler.rules.policy import DEFAULT_POLICY, State, group_sample_size
from crawler.rules.rewrite import ParamRule, PathRewrite

M, D = "http://mirror.example", "http://docs.example"
REWRITE = PathRewrite(M, "/v1", D, "/v2")


def test_outlinks_with_a_known_counterpart_form_a_group_the_rest_is_followed() -> None:
    keeper_links = {f"{D}/v2/a", f"{D}/v2/b", f"{D}/v2/c"}
    outlinks = [f"{M}/v1/a", f"{M}/v1/b", f"{M}/v1/c", f"{M}/v1/new", f"{M}/about", "http://x/"]
    judged = judge_outlinks(f"{M}/v1/", f"{D}/v2/", outlinks, keeper_links.__contains__)
    assert judged.rewrite == REWRITE
    assert judged.follow == (f"{M}/v1/new", f"{M}/about", "http://x/")
    assert judged.group is not None
    assert judged.group.members == {f"{M}/v1/{x}": f"{D}/v2/{x}" for x in "abc"}


def test_no_rewrite_or_no_counterpart_follows_everything() -> None:
    links = [f"{D}/a", f"{D}/b"]
    judged = judge_outlinks(f"{D}/x?a=1", f"{D}/y?a=2", links, lambda url: True)
    assert judged.rewrite is None and judged.follow == tuple(links) and judged.group is None
    judged = judge_outlinks(f"{M}/v1/", f"{D}/v2/", [f"{M}/v1/a"], lambda url: False)
    assert judged.follow == (f"{M}/v1/a",) and judged.group is None


def test_a_parameter_rewrite_finds_counterparts_too() -> None:
    judged = judge_outlinks(
        f"{D}/item?sid=7",
        f"{D}/item",
        [f"{D}/reviews?sid=7", f"{D}/reviews?sid=8", f"{D}/help"],
        {f"{D}/reviews"}.__contains__,
    )
    assert judged.rewrite == ParamRule(D, "sid", "7")
    assert judged.group is not None and judged.group.members == {
        f"{D}/reviews?sid=7": f"{D}/reviews"
    }
    assert judged.follow == (f"{D}/reviews?sid=8", f"{D}/help")


def test_a_dropped_rewrite_follows_without_sampling() -> None:
    book = RuleBook()
    book.apply(REWRITE, State.DROPPED)
    judged = judge_outlinks(f"{M}/v1/", f"{D}/v2/", [f"{M}/v1/a"], lambda url: True, book=book)
    assert judged.follow == (f"{M}/v1/a",) and judged.group is None


def test_a_rewrite_that_failed_a_check_follows_its_groups() -> None:
    """Black 24.8.0 on a held-out host: the release rewrite failed 2 of its 11 checks, and yet
    a group of it sampled 10 pages that all matched and dropped the rest, 6 unique pages."""
    refuted: set[str] = set()
    evidence = RewriteEvidence()
    waiting = GroupCheck(REWRITE, {f"{M}/v1/p{i}": f"{D}/v2/p{i}" for i in range(40)},
                         evidence=evidence, refuted=refuted.__contains__)  # fmt: skip
    for url in waiting.sample[:-1]:
        waiting.record(url, True)
    refuted.add(REWRITE.key)  # a check of the rule, not one of the samples, fails
    assert waiting.record(waiting.sample[-1], True) is GroupVerdict.FOLLOW
    judged = judge_outlinks(
        f"{M}/v1/", f"{D}/v2/", [f"{M}/v1/a"], lambda url: True, refuted=refuted.__contains__
    )
    assert judged.follow == (f"{M}/v1/a",) and judged.group is None  # no sampling at all
    assert judged.refuted
    plain = judge_outlinks(f"{M}/v1/", f"{D}/v2/", [f"{M}/v1/a"], lambda url: True)
    assert plain.group is not None and not plain.refuted


def test_a_young_rewrites_group_samples_as_much_as_its_rule_needs_to_activate() -> None:
    """The pandoc / mistune README hosts: the hub's group of 22 members (4 of them differ)
    sampled 8 while the alias rule had few checks, and lost the 4 when all 8 matched."""
    book = RuleBook()
    links = [f"{M}/v1/p{i}" for i in range(22)]
    young = judge_outlinks(f"{M}/v1/", f"{D}/v2/", links, lambda url: True, book=book).group
    assert young is not None and len(young.sample) == 11  # no check yet: 11 samples
    book.apply(REWRITE, State.CANDIDATE, checks=7)
    judged = judge_outlinks(f"{M}/v1/", f"{D}/v2/", links, lambda url: True, book=book)
    assert judged.group is not None and len(judged.group.sample) == 8  # 11 - 7 < 5 + 10%
    unknown = judge_outlinks(f"{M}/v1/", f"{D}/v2/", links, lambda url: True).group
    assert unknown is not None and len(unknown.sample) == 8  # no book: the base size


def group_of(n: int) -> GroupCheck:
    return GroupCheck(REWRITE, {f"{M}/v1/p{i}": f"{D}/v2/p{i}" for i in range(n)})


def test_a_group_is_suppressed_when_every_sample_matches() -> None:
    group = group_of(30)
    assert len(group.sample) == group_sample_size(30, DEFAULT_POLICY) == 8
    assert set(group.sample) | set(group.held) == set(group.members)
    for url in group.sample[:-1]:
        assert group.record(url, True) is GroupVerdict.PENDING
    assert group.waiting_for == group.sample[-1:]
    assert group.record(group.sample[-1], True) is GroupVerdict.SUPPRESS


def test_one_sample_that_does_not_match_releases_the_group_at_once() -> None:
    group = group_of(30)
    assert group.record(group.sample[3], False) is GroupVerdict.FOLLOW
    assert group.record(group.sample[0], True) is GroupVerdict.FOLLOW  # final
    assert group.record(group.held[0], True) is GroupVerdict.FOLLOW  # not a sample: ignored


def test_the_first_report_of_a_sample_counts() -> None:
    group = group_of(3)
    assert group.held == ()
    group.record(group.sample[0], True)
    group.record(group.sample[0], False)
    assert group.verdict is GroupVerdict.PENDING


@given(st.integers(1, 300), st.randoms(use_true_random=False))
def test_every_process_picks_the_same_sample(n: int, rng: object) -> None:
    members = {f"{M}/v1/p{i}": f"{D}/v2/p{i}" for i in range(n)}
    shuffled = list(members.items())
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert GroupCheck(REWRITE, dict(shuffled)).sample == group_of(n).sample


def test_an_empty_group_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        GroupCheck(REWRITE, {})


def test_the_groups_of_one_rewrite_share_their_samples() -> None:
    """Every page of a mirrored section links to its siblings: each one fetched makes a group
    of much the same members, which must not each fetch a sample of their own."""
    evidence = RewriteEvidence()
    members = {f"{M}/v1/p{i}": f"{D}/v2/p{i}" for i in range(30)}
    first = GroupCheck(REWRITE, members, evidence=evidence)
    assert len(first.sample) == 8
    # A sibling with 20 of the members, while the first group's samples are in flight: it
    # waits for them and fetches nothing of its own.
    sibling = GroupCheck(REWRITE, dict(list(members.items())[5:25]), evidence=evidence)
    assert sibling.sample == () and set(sibling.waiting_for) == set(first.sample)
    assert set(sibling.held) == set(list(members)[5:25])
    for url in first.sample:
        assert first.record(url, True) in (GroupVerdict.PENDING, GroupVerdict.SUPPRESS)
    assert first.verdict is sibling.verdict is GroupVerdict.SUPPRESS
    # A bigger group needs more samples: only the ones it lacks.
    bigger = {**members, **{f"{M}/v1/q{i}": f"{D}/v2/q{i}" for i in range(40)}}
    third = GroupCheck(REWRITE, bigger, evidence=evidence)
    assert len(third.sample) == group_sample_size(70, DEFAULT_POLICY) - 8 == 4
    assert not set(third.sample) & set(first.sample)
    assert third.verdict is GroupVerdict.PENDING


def test_one_sample_of_a_rewrite_that_does_not_match_releases_all_its_groups() -> None:
    evidence = RewriteEvidence()
    first = group_of_shared(30, evidence)
    first.record(first.sample[0], False)
    later = group_of_shared(12, evidence)
    assert later.sample == () and later.verdict is first.verdict is GroupVerdict.FOLLOW


def test_a_sample_that_never_comes_back_is_no_evidence() -> None:
    evidence = RewriteEvidence()
    group = group_of_shared(30, evidence)
    for url in group.sample[1:]:
        group.record(url, True)
    evidence.withdraw(group.sample[0])
    assert not evidence.failed
    assert group.verdict is GroupVerdict.FOLLOW  # short of its samples: everything fetched
    assert group.record(group.sample[0], True) is GroupVerdict.FOLLOW  # too late to count
    assert len(GroupCheck(REWRITE, {f"{M}/x": f"{D}/x"}, evidence=evidence).sample) == 0


def group_of_shared(n: int, evidence: RewriteEvidence) -> GroupCheck:
    return GroupCheck(
        REWRITE, {f"{M}/v1/p{i}": f"{D}/v2/p{i}" for i in range(n)}, evidence=evidence
    )


def test_judging_keeps_each_rewrites_evidence_under_its_key() -> None:
    kept: dict[str, RewriteEvidence] = {}
    for page in ("a", "b"):
        judged = judge_outlinks(
            f"{M}/v1/{page}", f"{D}/v2/{page}", [f"{M}/v1/p{i}" for i in range(10)],
            lambda url: True, evidence=kept,
        )  # fmt: skip
        assert judged.group is not None and judged.group.evidence is kept[REWRITE.key]
    assert len(kept) == 1 and len(kept[REWRITE.key].pending) == 6
