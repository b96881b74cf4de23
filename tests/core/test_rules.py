"""A user's rules on a cluster (core/rules.py): combining two never allows more than either, and
a refusal is given exactly when a bound is passed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.core.rules import Bound, UserRules

bounds = st.none() | st.builds(
    Bound, value=st.integers(1, 1000), setting=st.sampled_from(["A is 1", "B is 2"])
)
rules = st.builds(
    UserRules, denied=st.none() | st.just("denied by X"), hosts=bounds, duration=bounds
)


@given(rules, rules, st.integers(1, 2000), st.integers(1, 2000))
def test_both_rules_at_once_refuse_what_either_refuses(a, b, hosts, duration):
    both = a.tightest(b)
    either = a.refusal("c1", hosts, duration) or b.refusal("c1", hosts, duration)
    assert (both.refusal("c1", hosts, duration) is None) == (either is None)


@given(rules, st.integers(1, 2000), st.integers(1, 2000))
def test_a_refusal_is_given_exactly_past_a_bound_and_names_the_cluster(rule, hosts, duration):
    past = (
        rule.denied is not None
        or (rule.hosts is not None and hosts > rule.hosts.value)
        or (rule.duration is not None and duration > rule.duration.value)
    )
    refusal = rule.refusal("c1", hosts, duration)
    assert (refusal is not None) == past
    if refusal is not None:
        assert refusal.startswith("c1: ")
