"""Memoization per view: a selector runs once per distinct input (the paper's computed
configurations), and a cached answer is always the one it would have given."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import ClusterInfo, Interconnect, Request
from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import Memoized
from coorm_bridge.launchers.selectors.cem import CEM
from tests.launchers.platforms import NOW, infos, linked, small_cases, steps
from tests.profiles import fewer

CLUSTERS = infos(c1=8, c2=8)
WAN = linked(["c1", "c2"], latency_s=0.01, bandwidth_bps=1e9)


class Recorder:
    """Asks for what c1 has free at ``now``, and records what it was shown."""

    time_invariant = False

    def __init__(self) -> None:
        self.seen: list[tuple[int, dict[str, Profile]]] = []

    def select(self, clusters, interconnect, view, now):
        self.seen.append((now, dict(view)))
        free = view["c1"].value_at(now)
        return Request(nodes={"c1": free}, duration=60) if free else None


class Shifting(Recorder):
    time_invariant = True


def view(*c1: tuple[int, int]) -> dict[str, Profile]:
    return {"c1": steps(*c1), "c2": Profile.constant(8)}


def test_the_same_view_runs_the_selector_once():
    memo = Memoized(Recorder())
    first = memo.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW)
    again = memo.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW)
    assert first == again == Request(nodes={"c1": 4}, duration=60)
    assert (memo.computed, memo.hits) == (1, 1)
    memo.select(CLUSTERS, WAN, view((0, 4), (900, 8)), NOW)
    assert (memo.computed, memo.hits) == (2, 1)


def test_what_lies_before_now_is_not_part_of_the_key_nor_shown():
    selector = Recorder()
    memo = Memoized(selector)
    memo.select(CLUSTERS, WAN, view((-900, 1), (0, 4)), NOW)
    memo.select(CLUSTERS, WAN, view((-300, 7), (0, 4)), NOW)
    assert (memo.computed, memo.hits) == (1, 1)
    ((_, shown),) = selector.seen
    assert shown["c1"].value_at(NOW - 900) == 4  # truncated at now: the past is not shown


def test_a_later_now_is_a_new_input_unless_the_selector_is_time_invariant():
    plain = Memoized(Recorder())
    plain.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW)
    plain.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW + 60)
    plain.select(CLUSTERS, WAN, view((60, 4), (660, 8)), NOW + 60)
    assert (plain.computed, plain.hits) == (3, 0)

    invariant = Memoized(Shifting())
    invariant.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW)
    # The same view 60 s later, slid along: a hit; the same absolute view 60 s later: not.
    invariant.select(CLUSTERS, WAN, view((60, 4), (660, 8)), NOW + 60)
    assert (invariant.computed, invariant.hits) == (1, 1)
    invariant.select(CLUSTERS, WAN, view((0, 4), (600, 8)), NOW + 60)
    assert (invariant.computed, invariant.hits) == (2, 1)


def test_other_clusters_or_links_are_new_inputs():
    memo = Memoized(Shifting())
    memo.select(CLUSTERS, WAN, view((0, 4)), NOW)
    memo.select(
        {**CLUSTERS, "c2": ClusterInfo(name="c2", hosts=8, speed=2.0)}, WAN, view((0, 4)), NOW
    )
    memo.select(CLUSTERS, Interconnect(), view((0, 4)), NOW)
    memo.select(CLUSTERS, WAN, {"c1": steps((0, 4))}, NOW)
    assert (memo.computed, memo.hits) == (4, 0)


def test_no_answer_is_remembered_too():
    memo = Memoized(Recorder())
    assert memo.select(CLUSTERS, WAN, view((0, 0)), NOW) is None
    assert memo.select(CLUSTERS, WAN, view((0, 0)), NOW) is None
    assert (memo.computed, memo.hits) == (1, 1)


def test_a_failing_selector_is_counted_and_not_remembered():
    class Failing(Recorder):
        def select(self, clusters, interconnect, view, now):
            raise ValueError("no")

    memo = Memoized(Failing())
    for _ in range(2):
        with pytest.raises(ValueError, match="no"):
            memo.select(CLUSTERS, WAN, view((0, 4)), NOW)
    assert (memo.computed, memo.hits, len(memo)) == (2, 0, 0)


def test_the_cache_is_bounded_and_keeps_the_recently_used():
    memo = Memoized(Recorder(), maxsize=2)
    a, b, c = view((0, 1)), view((0, 2)), view((0, 3))
    for v in (a, b, a, c):  # a is used again, so b is the one to go
        memo.select(CLUSTERS, WAN, v, NOW)
    assert len(memo) == 2
    memo.select(CLUSTERS, WAN, a, NOW)
    assert (memo.computed, memo.hits) == (3, 2)
    memo.select(CLUSTERS, WAN, b, NOW)
    assert (memo.computed, memo.hits) == (4, 2)


@pytest.mark.parametrize("size", [0, -1, 10**7])
def test_the_bound_is_bounded(size):
    with pytest.raises(ValueError, match="entries"):
        Memoized(Recorder(), maxsize=size)


@settings(max_examples=fewer(40))  # each example runs every selector on up to 16 views
@given(st.lists(small_cases(), min_size=1, max_size=4), st.lists(st.integers(0, 7), max_size=12))
def test_a_memoized_selector_answers_what_the_selector_would(cases, replays):
    """Views seen again, and views slid in time, get exactly the selector's own answer."""
    inputs = []
    for case in cases:
        inputs.append((case, case.view, case.now))
        slid = {
            n: Profile.from_steps([(t + 3600, v) for t, v in p.steps(NOW - 60)])
            for n, p in case.view.items()
        }
        inputs.append((case, slid, case.now + 3600))
    memo = Memoized(CEM(cases[0].params))
    plain = CEM(cases[0].params)
    order = list(range(len(inputs))) + [i % len(inputs) for i in replays]
    for i in order:
        case, v, now = inputs[i]
        expected = plain.select(case.clusters, case.interconnect, v, now)
        assert memo.select(case.clusters, case.interconnect, v, now) == expected
    assert memo.computed + memo.hits == len(order)
    assert memo.computed <= len(cases)  # a slid view is the same input for a time-invariant one
