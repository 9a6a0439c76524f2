"""One contract for every ``RuleStore``: the in-memory reference and Redis (server, cluster).

Each test runs on each backend with a fresh crawl; the property test checks that a random
sequence of observations leaves the same statuses on the backend as on ``MemoryRuleStore``.
Redis-only tests at the end: key layout, the stored policy, errors, concurrent processes.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from redis.crc import key_slot

from crawler.rules.book import RuleChange
from crawler.rules.learning import Observation
from crawler.rules.policy import DEFAULT_POLICY, Evidence, RulePolicy, State
from crawler.rules.redis_store import RedisRuleStore, rules_prefix
from crawler.rules.rewrite import ParamRule, PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore
from dedup_worker.adapters.redis_client import connect
from dedup_worker.errors import BackendUnavailable, ConfigError
from tests.support.rules_helpers import (  # noqa: F401  (fixtures register by import)
    ALIAS,
    BACKENDS,
    REDIS_BACKENDS,
    SESSION,
    D,
    M,
    RulesFactory,
    check,
    clean_checks,
    make_rules_fixture,
    new_crawl_id,
    rules_client_fixture,
)

all_backends = pytest.mark.parametrize("backend", BACKENDS)
redis_only = pytest.mark.parametrize("backend", REDIS_BACKENDS)


@all_backends
def test_a_first_check_makes_a_candidate(make_rules: RulesFactory) -> None:
    store = make_rules()
    [status] = store.record([check(ALIAS, 1)])
    assert (status.key, status.state) == (ALIAS.key, State.CANDIDATE)
    assert status.evidence == Evidence(successes=1, paths=1)
    assert store.statuses() == {ALIAS.key: status}
    sync = store.sync(0)
    assert sync.changes == [RuleChange(ALIAS.key, State.CANDIDATE)] and sync.active == {}
    assert (sync.cursor, sync.length, sync.reset, sync.complete) == (1, 1, False, True)


@all_backends
def test_an_observation_counts_once(make_rules: RulesFactory) -> None:
    store = make_rules()
    store.record([check(ALIAS, 1), check(ALIAS, 1)])
    [status] = store.record([check(ALIAS, 1)])
    assert status.evidence.checks == 1
    [status] = store.record([check(ALIAS, 1, success=False)])  # another outcome: another check
    assert (status.evidence.successes, status.evidence.failures) == (1, 1)


@all_backends
def test_eleven_clean_checks_on_three_paths_activate(make_rules: RulesFactory) -> None:
    store = make_rules()
    statuses = store.record(clean_checks(ALIAS, 11))
    assert [s.state for s in statuses] == [State.CANDIDATE] * 10 + [State.ACTIVE]
    sync = store.sync(0)
    assert [c.state for c in sync.changes] == [State.CANDIDATE, State.ACTIVE]
    assert sync.active[ALIAS.key].evidence == Evidence(11, 0, 0, 0, 11)
    assert sync.active[ALIAS.key].lower_bound() >= DEFAULT_POLICY.activate_at


@all_backends
def test_support_on_two_paths_or_two_values_does_not_activate(make_rules: RulesFactory) -> None:
    store = make_rules()
    queries = [f"q={i}" for i in range(20)]
    two_paths = [
        Observation(ALIAS, f"{M}/p{i % 2}?{q}", f"{D}/p{i % 2}?{q}", True)
        for i, q in enumerate(queries)
    ]
    [*_, status] = store.record(two_paths)
    assert status.state is State.CANDIDATE and status.evidence.paths == 2
    one_value = [check(SESSION, n, value="same") for n in range(20)]
    [*_, status] = store.record(one_value)
    assert status.state is State.CANDIDATE and status.evidence.values == 1
    assert status.evidence.paths == DEFAULT_POLICY.diversity_cap  # capped: only >= 3 matters
    [*_, status] = store.record([check(SESSION, 30, value="b"), check(SESSION, 31, value="c")])
    assert status.state is State.ACTIVE and status.evidence.values == 3


@all_backends
def test_two_recent_failures_drop_a_rule_for_good(make_rules: RulesFactory) -> None:
    store = make_rules()
    store.record(clean_checks(ALIAS, 11))
    [first, second] = store.record([check(ALIAS, 50, False), check(ALIAS, 51, False)])
    assert (first.state, second.state) == (State.ACTIVE, State.DROPPED)
    [*_, status] = store.record(clean_checks(ALIAS, 30, start=100))
    assert status.state is State.DROPPED and status.evidence == second.evidence  # closed
    assert store.statuses()[ALIAS.key].evidence.checks == 13
    sync = store.sync(0)
    assert [c.state for c in sync.changes] == [State.CANDIDATE, State.ACTIVE, State.DROPPED]
    assert sync.active == {}


@all_backends
def test_sync_pages_through_the_log_and_notices_a_lost_log(make_rules: RulesFactory) -> None:
    store = make_rules()
    rules = [ParamRule(D, f"p{i}") for i in range(5)]
    store.record([check(rule, 1) for rule in rules])
    first = store.sync(0, limit=2)
    assert [c.key for c in first.changes] == [r.key for r in rules[:2]]
    assert (first.cursor, first.length, first.complete) == (2, 5, False)
    rest = store.sync(first.cursor, limit=10)
    assert [c.key for c in rest.changes] == [r.key for r in rules[2:]] and rest.complete
    assert store.sync(5).changes == []
    lost = store.sync(99)
    assert lost.reset and lost.cursor == 5 and len(lost.changes) == 5


@all_backends
def test_saved_fetches_are_counted_per_rule(make_rules: RulesFactory) -> None:
    store = make_rules()
    store.record([check(ALIAS, 1), check(SESSION, 1)])
    store.add_saved({ALIAS.key: 3, SESSION.key: 1, "host http://x http://y": 5})
    store.add_saved({ALIAS.key: 2})
    store.add_saved({})
    saved = {key: s.saved for key, s in store.statuses().items()}
    assert saved == {ALIAS.key: 5, SESSION.key: 1}


@all_backends
def test_processes_of_one_crawl_share_rules_and_crawls_do_not(make_rules: RulesFactory) -> None:
    crawl = new_crawl_id()
    one, two, other = make_rules(crawl_id=crawl), make_rules(crawl_id=crawl), make_rules()
    one.record(clean_checks(ALIAS, 6))
    two.record(clean_checks(ALIAS, 5, start=6))
    assert two.statuses()[ALIAS.key].state is State.ACTIVE
    assert ALIAS.key in one.sync(0).active
    assert other.statuses() == {}


@all_backends
def test_shared_rules_of_two_processes_meet_through_the_store(make_rules: RulesFactory) -> None:
    crawl = new_crawl_id()
    learner, reader = (
        SharedRules(make_rules(crawl_id=crawl)),
        SharedRules(make_rules(crawl_id=crawl)),
    )
    keeper = {f"{D}/p{i}": f"{D}/p{i}" for i in range(20)}.get
    for i in range(11):
        learner.learn(f"http://mirror.example/p{i}", f"{D}/p{i}", keeper)
    assert learner.predict("http://mirror.example/new") is not None  # at once, locally
    assert reader.predict("http://mirror.example/new") is None  # not yet refreshed
    assert reader.refresh() == 4  # alias and its inverse: created, activated
    prediction = reader.predict("http://mirror.example/new")
    assert prediction is not None and prediction.counterpart == f"{D}/new"
    assert reader.book.checks(ALIAS.key) == 11


@st.composite
def observation_runs(draw: st.DrawFn) -> list[Any]:
    rules = [ALIAS, SESSION, PathRewrite(D, "/a", D, "/b"), ParamRule(D, "s", "1")]
    run = []
    for _ in range(draw(st.integers(1, 60))):
        rule = draw(st.sampled_from(rules))
        n = draw(st.integers(0, 15))
        ok = draw(st.booleans() | st.just(True))
        run.append(check(rule, n, ok, value=draw(st.sampled_from("abcd"))))
    return run


@all_backends
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(run=observation_runs(), batch=st.integers(1, 7))
def test_any_run_of_observations_ends_as_in_memory(
    make_rules: RulesFactory, run: list[Any], batch: int
) -> None:
    store, reference = make_rules(), MemoryRuleStore()
    got, want = [], []
    for start in range(0, len(run), batch):
        got += store.record(run[start : start + batch])
        want += reference.record(run[start : start + batch])
    assert got == want
    assert store.statuses() == reference.statuses()
    assert store.sync(0) == reference.sync(0)


# ---- Redis only -----------------------------------------------------------------------------


@redis_only
def test_every_key_carries_the_crawl_hash_tag(make_rules: RulesFactory, rules_client: Any) -> None:
    crawl = new_crawl_id()
    store = make_rules(crawl_id=crawl)
    store.record([*clean_checks(ALIAS, 11), *clean_checks(SESSION, 3)])
    store.add_saved({ALIAS.key: 1})
    keys = [k.decode() for k in rules_client.scan_iter(match=f"*{crawl}*", count=1000)]
    assert keys and all(k.startswith(rules_prefix(crawl)) for k in keys)
    assert rules_prefix(crawl) == f"neardup:crawl:{{{crawl}}}:rules:"
    assert len({key_slot(k.encode()) for k in keys}) == 1


@redis_only
def test_a_restarted_process_finds_the_rules(make_rules: RulesFactory, rules_client: Any) -> None:
    crawl = new_crawl_id()
    make_rules(crawl_id=crawl).record(clean_checks(ALIAS, 11))
    again = SharedRules(RedisRuleStore(rules_client, crawl))
    again.refresh()
    assert again.book.state(ALIAS.key) is State.ACTIVE


@redis_only
def test_another_policy_is_refused_at_start(make_rules: RulesFactory, rules_client: Any) -> None:
    crawl = new_crawl_id()
    make_rules(crawl_id=crawl)
    with pytest.raises(ConfigError, match="another policy"):
        RedisRuleStore(rules_client, crawl, RulePolicy(activate_at=0.9))
    RedisRuleStore(rules_client, crawl, RulePolicy())  # the same numbers: fine


@redis_only
def test_a_crawl_begun_before_a_policy_number_existed_resumes(rules_client: Any) -> None:
    """The policy of a crawl begun by an older version lacks the numbers added since: the
    numbers it has must still agree."""
    crawl = new_crawl_id()
    older = {k: v for k, v in RulePolicy().as_dict().items() if k != "group_trust_checks"}
    rules_client.set(rules_prefix(crawl) + "meta", json.dumps(older).encode())
    RedisRuleStore(rules_client, crawl, RulePolicy(group_trust_checks=0))
    RedisRuleStore(rules_client, crawl, RulePolicy())
    with pytest.raises(ConfigError, match="another policy"):
        RedisRuleStore(rules_client, crawl, RulePolicy(group_min_sample=6))


@redis_only
@pytest.mark.parametrize("crawl_id", ["", "a{b}", "x y", "z" * 201])
def test_a_crawl_id_that_cannot_name_keys_is_refused(rules_client: Any, crawl_id: str) -> None:
    with pytest.raises(ConfigError, match="NEARDUP_CRAWL_ID"):
        RedisRuleStore(rules_client, crawl_id)


@redis_only
def test_concurrent_records_lose_no_check(make_rules: RulesFactory) -> None:
    crawl = new_crawl_id()
    stores = [make_rules(crawl_id=crawl) for _ in range(4)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(50):
                stores[k].record([check(SESSION, 1000 * k + i, value=f"{k}.{i}")])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    status = stores[0].statuses()[SESSION.key]
    assert status.evidence.successes == 200 and status.state is State.ACTIVE
    activations = [c for c in stores[1].sync(0).changes if c.state is State.ACTIVE]
    assert len(activations) == 1  # exactly one process saw the transition


def test_an_unreachable_redis_is_reported_as_unavailable() -> None:
    client = connect("redis://127.0.0.1:1/0", connect_timeout=0.2)
    with pytest.raises(BackendUnavailable):
        RedisRuleStore(client, new_crawl_id())


@pytest.fixture(scope="module")
def site_truth() -> Any:
    from neardup.demo.server import ADDRESSES
    from neardup.demo.subtrees import build_subtree_site
    from neardup.demo.truth import subtree_truth

    base = {host: f"http://{ip}:8000" for host, ip in ADDRESSES.items()}
    return subtree_truth(build_subtree_site(), base)


@redis_only
def test_a_simulated_crawl_learns_the_same_on_redis(
    make_rules: RulesFactory, site_truth: Any
) -> None:
    """The test site's crawl (tests.support.simulate) with the store in Redis: same fetches,
    skips and rules as with the in-memory reference, decision after decision."""
    from tests.support.simulate import simulate

    reference = simulate(site_truth, "rules", order="random1")
    shared = simulate(site_truth, "rules", order="random1", store=make_rules)
    assert shared.fetch_log == reference.fetch_log and shared.skipped == reference.skipped
    assert shared.rules is not None and reference.rules is not None
    assert shared.rules.store.statuses() == reference.rules.store.statuses()
