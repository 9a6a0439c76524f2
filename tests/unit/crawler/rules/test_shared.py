"""A store and a local book kept in step: learn, refresh, recover from a lost store."""

from __future__ import annotations

from crawler.rules.policy import State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore

M, D = "http://mirror.example", "http://docs.example"
ALIAS = PathRewrite(M, "", D, "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def learn_mirror(rules: SharedRules, pages: range) -> None:
    keeper = {f"{D}/p{i}": f"{D}/p{i}" for i in range(100)}.get
    for i in pages:
        rules.learn(f"{M}/p{i}", f"{D}/p{i}", keeper)


def test_learning_activates_locally_at_once() -> None:
    rules = SharedRules(MemoryRuleStore())
    learn_mirror(rules, range(10))
    assert rules.predict(f"{M}/x") is None and rules.book.state(ALIAS.key) is State.CANDIDATE
    learn_mirror(rules, range(10, 11))
    prediction = rules.predict(f"{M}/x")
    assert prediction is not None and prediction.counterpart == f"{D}/x"
    assert rules.book.state(ALIAS.inverse().key) is State.ACTIVE  # learned both ways


def test_a_unique_page_whose_counterpart_is_known_counts_against_the_rule() -> None:
    rules = SharedRules(MemoryRuleStore())
    learn_mirror(rules, range(5))
    keeper = {f"{D}/q{i}": f"{D}/q{i}" for i in range(2)} | {
        f"{M}/q{i}": f"{M}/q{i}" for i in range(2)
    }
    for i in range(2):  # the mirror has its own page here: not a copy
        rules.learn(f"{M}/q{i}", None, keeper.get)
    assert rules.book.state(ALIAS.key) is State.DROPPED
    learn_mirror(rules, range(5, 40))
    assert rules.predict(f"{M}/x") is None


def test_refresh_is_due_every_interval() -> None:
    clock = Clock()
    store = MemoryRuleStore()
    writer, reader = SharedRules(store), SharedRules(store, refresh_every=1.0, clock=clock)
    assert reader.refresh_if_due()  # due at start
    learn_mirror(writer, range(11))
    assert not reader.refresh_if_due() and reader.predict(f"{M}/x") is None
    clock.now += 1.0
    assert reader.refresh_if_due() and reader.predict(f"{M}/x") is not None


def test_refresh_pages_through_a_long_log() -> None:
    store = MemoryRuleStore()
    writer, reader = SharedRules(store), SharedRules(store)
    keeper = {f"{D}/x": f"{D}/x"}.get
    for i in range(25):
        writer.learn(f"{D}/x?s{i}=1", f"{D}/x", keeper)  # two candidates each
    original_sync = store.sync
    store.sync = lambda cursor, limit=7: original_sync(cursor, 7)  # type: ignore[method-assign]
    assert reader.refresh() == 50 and len(reader.book) == 50


def test_a_store_that_lost_its_data_rebuilds_the_book() -> None:
    rules = SharedRules(MemoryRuleStore())
    learn_mirror(rules, range(11))
    rules.refresh()
    rules.store = MemoryRuleStore()  # Redis restarted without its data
    rules.store.record([])
    rules.refresh()
    assert len(rules.book) == 0 and rules.predict(f"{M}/x") is None


def test_saved_fetches_reach_the_store() -> None:
    rules = SharedRules(MemoryRuleStore())
    learn_mirror(rules, range(11))
    rules.saved({ALIAS.key: 2})
    rules.saved({})
    assert rules.store.statuses()[ALIAS.key].saved == 2


def test_an_unreadable_key_in_the_store_is_skipped() -> None:
    store = MemoryRuleStore()
    rules = SharedRules(store)
    learn_mirror(rules, range(11))
    store._log.insert(0, store._log[0].__class__("mirror junk", State.ACTIVE))
    fresh = SharedRules(store)
    fresh.refresh()
    assert fresh.book.state(ALIAS.key) is State.ACTIVE and fresh.book.state("mirror junk") is None


def test_an_active_rule_in_doubt_has_every_prediction_fetched_until_checks_vouch_again() -> None:
    """One failed check after 11 clean ones puts the lower bound under the activation bar:
    the rule stays active in the store (two recent failures drop it) but skips nothing, until
    enough successes bring the bound back."""
    rules = SharedRules(MemoryRuleStore())
    learn_mirror(rules, range(11))
    assert not rules.in_doubt(ALIAS.key)
    prediction = rules.predict(f"{M}/x")
    assert prediction is not None
    explored = [rules.explore(prediction) for _ in range(40)]
    assert 1 <= sum(explored) <= 3  # the 5% exploration
    keeper = {f"{D}/q0": f"{D}/q0", f"{M}/q0": f"{M}/q0"}.get
    rules.learn(f"{M}/q0", None, keeper)  # the mirror has its own page here: a failed check
    assert rules.book.state(ALIAS.key) is State.ACTIVE and rules.in_doubt(ALIAS.key)
    assert all(rules.explore(prediction) for _ in range(40))
    learn_mirror(rules, range(11, 19))  # 19 of 20 checks passed: the bound is back at 0.8
    assert rules.book.state(ALIAS.key) is State.ACTIVE and not rules.in_doubt(ALIAS.key)
    assert sum(rules.explore(prediction) for _ in range(40)) <= 3
