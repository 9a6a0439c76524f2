"""The local rule index: predictions per outlink, checks per decision."""

from __future__ import annotations

from hypothesis import given

from crawler.rules.book import RuleBook
from crawler.rules.learning import derive_rules
from crawler.rules.policy import RulePolicy, State
from crawler.rules.rewrite import ParamRule, PathRewrite, Rule
from tests.support.url_strategies import related_pairs, urls

M, D = "http://mirror.example", "http://docs.example"


def book_with(*rules: Rule, state: State = State.ACTIVE, checks: int = 20) -> RuleBook:
    book = RuleBook()
    for rule in rules:
        book.apply(rule, state, checks)
    return book


def test_only_active_rules_predict() -> None:
    rule = PathRewrite(M, "/pub", D, "")
    for state in (State.CANDIDATE, State.DROPPED):
        assert book_with(rule, state=state).predict(f"{M}/pub/a") is None
    prediction = book_with(rule).predict(f"{M}/pub/a")
    assert prediction is not None
    assert (prediction.counterpart, prediction.rules) == (f"{D}/a", (rule,))


def test_the_longest_prefix_wins() -> None:
    short, long = PathRewrite(M, "", D, ""), PathRewrite(M, "/pub/v1", D, "/docs")
    book = book_with(short, long)
    assert book.predict(f"{M}/pub/v1/a").counterpart == f"{D}/docs/a"  # type: ignore[union-attr]
    assert book.predict(f"{M}/pub/v2/a").counterpart == f"{D}/pub/v2/a"  # type: ignore[union-attr]
    assert book.predict(f"{M}/").counterpart == f"{D}/"  # type: ignore[union-attr]
    assert book.predict(f"{D}/a") is None


def test_parameters_compose_and_a_value_specific_rule_wins() -> None:
    sid, sort_any, sort_desc = (
        ParamRule(D, "sid"),
        ParamRule(D, "sort", None, "asc"),
        ParamRule(D, "sort", "desc"),
    )
    book = book_with(sid, sort_any, sort_desc)
    prediction = book.predict(f"{D}/x?a=1&sid=9&sort=desc")
    assert prediction is not None
    assert prediction.counterpart == f"{D}/x?a=1"
    assert prediction.rules == (sid, sort_desc)
    assert book.predict(f"{D}/x?sort=name").counterpart == f"{D}/x?sort=asc"  # type: ignore[union-attr]
    assert book.predict(f"{D}/x?a=1") is None


def test_parameters_then_path_in_one_prediction() -> None:
    book = book_with(ParamRule(M, "sid"), PathRewrite(M, "", D, ""))
    prediction = book.predict(f"{M}/a?sid=1&x=2")
    assert prediction is not None and prediction.counterpart == f"{D}/a?x=2"
    assert [rule.kind for rule in prediction.rules] == ["param", "host"]


def test_a_dropped_rule_never_comes_back_and_active_is_never_demoted() -> None:
    rule = ParamRule(D, "sid")
    book = book_with(rule)
    book.apply(rule, State.CANDIDATE)  # a stale report
    assert book.state(rule.key) is State.ACTIVE
    book.apply(rule, State.DROPPED)
    book.apply(rule, State.ACTIVE)
    assert book.state(rule.key) is State.DROPPED and book.predict(f"{D}/x?sid=1") is None
    assert book.keys(State.DROPPED) == [rule.key] and len(book) == 1


def test_applicable_lists_live_rules_alone_and_the_composed_prediction() -> None:
    sid, alias = ParamRule(M, "sid"), PathRewrite(M, "", D, "")
    candidate, dropped = PathRewrite(M, "/a", D, "/b"), ParamRule(M, "x")
    book = book_with(sid, alias)
    book.apply(candidate, State.CANDIDATE)
    book.apply(dropped, State.DROPPED)
    found = book.applicable(f"{M}/a/p?sid=1&x=2")
    assert set(found) == {
        (candidate, f"{D}/b/p?sid=1&x=2"),
        (alias, f"{M}/a/p?sid=1&x=2".replace(M, D)),
        (sid, f"{M}/a/p?x=2"),
        (sid, f"{D}/a/p?x=2"),  # the composed prediction, credited to both of its rules
        (alias, f"{D}/a/p?x=2"),
    }


def test_exploration_samples_one_in_twenty_of_the_youngest_rules_predictions() -> None:
    young, old = ParamRule(D, "sid"), PathRewrite(D, "/v1", D, "/v2")
    urls = [f"{D}/v1/p{i}?sid=1" for i in range(400)]

    def picks(book: RuleBook) -> list[bool]:
        return [book.explore(p) for u in urls if (p := book.predict(u)) is not None]

    book = book_with(old, checks=10_000)
    sampled = picks(book)
    # Systematic: exactly 5%, the 10th, 30th, 50th, ... prediction (no luck of the URLs).
    assert len(sampled) == 400
    assert [i for i, explored in enumerate(sampled, 1) if explored] == list(range(10, 401, 20))
    book.apply(young, State.ACTIVE, checks=1)  # both rules predict: the youngest one's count
    assert sum(picks(book)) == 20
    scaled = RuleBook(RulePolicy(exploration_scale=1.0))  # young rules explored more
    scaled.apply(old, State.ACTIVE, checks=10_000)
    scaled.apply(young, State.ACTIVE, checks=1)  # rate 1: every prediction is a check
    assert all(picks(scaled))
    assert sum(picks(book_with(old, checks=10_000))) == 20  # a fresh book starts over


@given(related_pairs())
def test_an_active_derived_rule_predicts_its_own_pair(pair: tuple[str, str]) -> None:
    duplicate, original = pair
    for rule in derive_rules(duplicate, original, RulePolicy(never_learn=frozenset())):
        prediction = book_with(rule).predict(duplicate)
        assert prediction is not None and prediction.counterpart == original


@given(urls())
def test_an_empty_book_predicts_nothing(url: str) -> None:
    assert RuleBook().predict(url) is None and RuleBook().applicable(url) == []


def test_rules_sharing_a_source_are_all_kept_and_removed_one_by_one() -> None:
    to_d, to_x = PathRewrite(M, "", D, ""), PathRewrite(M, "", "http://x.example", "")
    drop, set_asc = ParamRule(D, "sort"), ParamRule(D, "sort", None, "asc")
    book = book_with(to_x, to_d, drop, set_asc)
    assert book.predict(f"{M}/a").rules == (to_d,)  # type: ignore[union-attr]  # smallest key
    assert {r for r, _ in book.applicable(f"{M}/a")} == {to_d, to_x}
    assert {r for r, _ in book.applicable(f"{D}/a?sort=z")} == {drop, set_asc}
    book.apply(to_d, State.DROPPED)
    book.apply(drop, State.DROPPED)
    assert book.predict(f"{M}/a").counterpart == "http://x.example/a"  # type: ignore[union-attr]
    assert book.predict(f"{D}/a?sort=z").counterpart == f"{D}/a?sort=asc"  # type: ignore[union-attr]
