"""The policy numbers do what their docstring says."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.rules.policy import (
    DEFAULT_POLICY,
    Evidence,
    RulePolicy,
    State,
    checks_to_activate,
    exploration_rate,
    group_sample_size,
    next_state,
    push_outcome,
    recent_failures,
    stable_fraction,
    wilson_lower_bound,
)
from dedup_worker.errors import ConfigError

P = DEFAULT_POLICY


def run(outcomes: list[bool], *, needs_values: bool = False, diverse: bool = True) -> State:
    """The state after these checks, from a fresh candidate."""
    state, evidence = State.CANDIDATE, Evidence()
    for ok in outcomes:
        evidence = Evidence(
            evidence.successes + ok,
            evidence.failures + (not ok),
            push_outcome(evidence.recent, ok, P.window),
            values=evidence.successes + ok if diverse else 1,
            paths=evidence.successes + ok if diverse else 1,
        )
        state = next_state(state, evidence, needs_values, P)
    return state


def test_wilson_lower_bound_known_values() -> None:
    assert wilson_lower_bound(0, 0, 1.645) == 0.0
    assert wilson_lower_bound(11, 11, 1.645) == pytest.approx(11 / (11 + 1.645**2))
    assert wilson_lower_bound(50, 100, 1.96) == pytest.approx(0.4038, abs=1e-4)
    assert wilson_lower_bound(10, 10, 1.645) < P.activate_at <= wilson_lower_bound(11, 11, 1.645)


@given(st.integers(1, 500), st.data())
def test_wilson_lower_bound_is_below_the_measured_precision(n: int, data: st.DataObject) -> None:
    s = data.draw(st.integers(0, n))
    assert -1e-12 <= wilson_lower_bound(s, n, 1.645) <= s / n + 1e-12  # 0 up to rounding


def test_eleven_clean_checks_activate_a_rule_and_ten_do_not() -> None:
    assert run([True] * 10) is State.CANDIDATE
    assert run([True] * 11) is State.ACTIVE


def test_one_early_failure_delays_activation() -> None:
    assert run([False, *[True] * 18]) is State.CANDIDATE
    assert run([False, *[True] * 19]) is State.ACTIVE


def test_two_failures_among_the_last_eight_checks_drop_a_rule_for_good() -> None:
    assert run([False, *[True] * 6, False]) is State.DROPPED
    assert run([False, *[True] * 7, False]) is State.CANDIDATE  # the first left the window
    assert run([*[True] * 30, False, True, False]) is State.DROPPED  # active, then failing
    assert run([*[True] * 11, False, True, False, *[True] * 50]) is State.DROPPED


def test_support_must_be_diverse() -> None:
    assert run([True] * 40, diverse=False) is State.CANDIDATE
    evidence = Evidence(40, 0, 0, values=2, paths=40)
    assert next_state(State.CANDIDATE, evidence, True, P) is State.CANDIDATE
    assert next_state(State.CANDIDATE, evidence, False, P) is State.ACTIVE
    assert next_state(State.CANDIDATE, Evidence(40, 0, 0, 3, 3), True, P) is State.ACTIVE


def test_recent_outcomes_keep_the_window_only() -> None:
    recent = 0
    for ok in [False, False, *[True] * 8]:
        recent = push_outcome(recent, ok, 8)
    assert recent == 0 and recent_failures(push_outcome(recent, False, 8)) == 1


def test_exploration_rate_is_five_percent_unless_scaled_for_young_rules() -> None:
    assert exploration_rate(0, P) == 1.0
    assert exploration_rate(11, P) == 0.05
    assert exploration_rate(10_000, P) == 0.05
    young = RulePolicy(exploration_scale=1.0)
    assert exploration_rate(11, young) == pytest.approx(1 / 11)
    assert exploration_rate(20, young) == 0.05


def test_stable_fraction_is_fixed_by_the_url_and_spread_evenly() -> None:
    urls = [f"http://a.example/item-{i}" for i in range(20_000)]
    fractions = [stable_fraction(u) for u in urls]
    assert fractions == [stable_fraction(u) for u in urls]
    assert all(0.0 <= f < 1.0 for f in fractions)
    share = sum(f < 0.05 for f in fractions) / len(fractions)
    assert 0.045 < share < 0.055  # binomial sd 0.0015


def test_group_sample_sizes() -> None:
    assert [group_sample_size(n, P) for n in (1, 2, 6, 7, 10, 60, 200)] == [1, 2, 6, 6, 6, 11, 25]
    # the worst expected share lost, q (1 - q)**s at q = 1 / (s + 1), as documented
    worst = {}
    for n in (7, 60):
        s = group_sample_size(n, P)
        worst[n] = max(q / 1000 * (1 - q / 1000) ** s for q in range(1, 1000))
        assert worst[n] == pytest.approx(1 / (s + 1) * (s / (s + 1)) ** s, rel=1e-3)
        assert worst[n] > 1 / (math.e * (s + 1))
    assert round(worst[7], 3) == 0.057 and round(worst[60], 3) == 0.032


def test_a_young_rules_groups_sample_what_the_rule_lacks_to_activate() -> None:
    # group_trust_checks is the clean checks a rule needs to activate, from z and activate_at.
    assert P.group_trust_checks == checks_to_activate(Evidence(), False, P) == 11
    assert [group_sample_size(22, P, c) for c in (0, 1, 3, 8, 11, 40)] == [11, 10, 8, 8, 8, 8]
    assert group_sample_size(6, P, 0) == 6 and group_sample_size(200, P, 0) == 25
    assert group_sample_size(22, RulePolicy(group_trust_checks=0), 0) == 8
    # The README host pair: 4 of 22 members differ, all samples match with probability
    # C(18, s) / C(22, s): 0.14 with the base 8 samples, 0.045 with a young rule's 11.
    risk = [math.comb(18, s) / math.comb(22, s) for s in (8, group_sample_size(22, P, 0))]
    assert [round(r, 3) for r in risk] == [0.137, 0.045]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"z": 0}, "z"),
        ({"activate_at": 1.0}, "activate_at"),
        ({"window": 40}, "window"),
        ({"window_failures": 9}, "window_failures"),
        ({"min_exploration": 0}, "min_exploration"),
        ({"diversity_cap": 2}, "diversity_cap"),
        ({"group_sample_fraction": 2}, "group_sample_fraction"),
        ({"group_trust_checks": -1}, "group_trust_checks"),
    ],
)
def test_bad_policies_are_refused_naming_the_setting(
    change: dict[str, float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        RulePolicy(**change)  # type: ignore[arg-type]


def test_never_learn_is_case_insensitive() -> None:
    policy = RulePolicy(never_learn=frozenset({"Seite"}))
    assert not policy.learnable("SEITE") and policy.learnable("page")
    assert not P.learnable("Page") and P.learnable("sessid")
    assert P.as_dict()["never_learn"] == sorted(P.never_learn)
