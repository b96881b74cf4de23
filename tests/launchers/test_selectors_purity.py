"""The built-in selectors are pure functions of their inputs, and keep their promise of time
invariance (the memo relies on both)."""

from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.core.profile import Profile
from coorm_bridge.launchers.selectors import Rigid
from coorm_bridge.launchers.selectors.cem import CEM
from coorm_bridge.launchers.selectors.moldable import Moldable
from tests.launchers.platforms import Case, small_cases


def built_ins(case: Case) -> list[object]:
    names = sorted(case.clusters)
    return [
        CEM(case.params),
        Moldable(Moldable.Params(work=3000.0, serial_fraction=0.1, max_hosts=4)),
        Rigid(Rigid.Params(nodes={names[0]: 1}, duration=60)),
    ]


def snapshot(case: Case) -> tuple:
    view = tuple((name, profile.steps(0)) for name, profile in case.view.items())
    return (dict(case.clusters), case.interconnect, view)


@given(small_cases(), st.randoms(use_true_random=False))
def test_built_ins_are_pure_functions_of_their_inputs(case, rng):
    """Same inputs, same answer, whatever the mappings' order; nothing mutated."""
    before = snapshot(case)
    for selector in built_ins(case):
        first = selector.select(case.clusters, case.interconnect, case.view, case.now)
        shuffled = dict(rng.sample(list(case.view.items()), len(case.view)))
        clusters = dict(rng.sample(list(case.clusters.items()), len(case.clusters)))
        again = selector.select(clusters, case.interconnect, shuffled, case.now)
        assert first == again, type(selector).__name__
        assert snapshot(case) == before


@given(small_cases(), st.integers(-(10**6), 10**6))
def test_built_ins_keep_their_time_invariance_promise(case, shift):
    """Shifting ``now`` and the view together shifts nothing in the answer (the memo relies on
    it to recognise views that only slid in time)."""
    moved = {
        name: Profile.from_steps([(t + shift, v) for t, v in profile.steps(case.now - 60)])
        for name, profile in case.view.items()
    }
    for selector in built_ins(case):
        assert type(selector).time_invariant
        here = selector.select(case.clusters, case.interconnect, case.view, case.now)
        there = selector.select(case.clusters, case.interconnect, moved, case.now + shift)
        assert here == there, type(selector).__name__
