"""What "a change that can matter" means for each built-in selector (the quiet protocol).

A selector's horizon is exact or it is wrong: on any view that agrees with the one it chose on
before the horizon, at any moment until its choice would start, it must choose the same. These
properties are what let the bridge leave such changes unsent (tests/service/test_quiet.py, and
the simulator compares whole runs with and without: tests/sim/test_quiet_engine.py).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Interconnect, Request
from coorm_bridge.core.profile import Profile, earliest_start
from coorm_bridge.launchers.selectors.cem import CEM
from coorm_bridge.launchers.selectors.memo import Memoized
from coorm_bridge.launchers.selectors.moldable import Moldable
from coorm_bridge.launchers.selectors.rigid import Rigid
from tests.launchers.platforms import HOUR, NOW, infos
from tests.launchers.test_selectors_moldable import views
from tests.profiles import fewer

NONE = Interconnect()


@st.composite
def later(draw: st.DrawFn, profile: Profile, since: int, high: int) -> Profile:
    """``profile`` as it is before ``since``, anything from then on."""
    steps = [(t, v) for t, v in profile.steps(NOW - 200) if t < since]
    t = since
    for _ in range(draw(st.integers(1, 5))):
        steps.append((t, draw(st.integers(0, high))))
        t += draw(st.integers(1, 2 * HOUR))
    return Profile.from_steps(steps)


@settings(max_examples=fewer(300))
@given(
    case=views(),
    work=st.floats(1, 50 * HOUR),
    f=st.floats(0, 1),
    low=st.integers(1, 4),
    data=st.data(),
)
def test_moldable_chooses_the_same_whatever_changes_from_the_end_of_its_choice(
    case, work, f, low, data
):
    clusters, view = case
    selector = Moldable(Moldable.Params(work=work, serial_fraction=f, min_hosts=low))
    request = selector.select(clusters, NONE, view, NOW)
    if request is None:
        return
    horizon = selector.horizon(clusters, NONE, view, NOW, request)
    assert horizon is not None
    start = earliest_start(view, request.nodes, request.duration, NOW)
    assert start is not None
    assert horizon == start + request.duration
    changed = {
        name: data.draw(later(profile, horizon, clusters[name].hosts))
        for name, profile in view.items()
    }
    moment = data.draw(st.integers(NOW, start))  # any time until the choice would start
    assert selector.select(clusters, NONE, changed, moment) == request


@settings(max_examples=fewer(100))
@given(case=views(), data=st.data())
def test_rigid_reads_nothing_of_the_view(case, data):
    clusters, view = case
    name = next(iter(clusters))
    selector = Rigid(Rigid.Params(nodes={name: 1}, duration=60))
    request = selector.select(clusters, NONE, view, NOW)
    assert selector.horizon(clusters, NONE, view, NOW, request) == NOW
    changed = {c: data.draw(later(p, NOW - 100, clusters[c].hosts)) for c, p in view.items()}
    assert selector.select(clusters, NONE, changed, NOW + 30) == request


def test_cem_says_no_horizon_its_search_depends_on_the_whole_view_and_on_now():
    clusters = infos(c1=8, c2=8)
    view = {name: Profile.constant(8) for name in clusters}
    selector = CEM(CEM.Params(elements=10**6, iterations=100))
    memo = Memoized(selector)
    choice = memo.choose(clusters, NONE, view, NOW)
    assert choice.request is not None
    assert choice.horizon is None


def test_the_memo_keeps_each_answer_with_its_horizon_shifted_with_the_view():
    clusters = infos(c1=8)
    selector = Moldable(Moldable.Params(work=HOUR, serial_fraction=0.0, max_hosts=4))
    memo = Memoized(selector)
    busy = Profile.from_steps([(NOW - 10, 0), (NOW + 600, 8)])
    first = memo.choose(clusters, NONE, {"c1": busy}, NOW)
    assert first == memo.choose(clusters, NONE, {"c1": busy}, NOW)
    assert first.request == Request(nodes={"c1": 4}, duration=900)
    assert first.horizon == NOW + 600 + 900
    slid = Profile.from_steps([(NOW + 90, 0), (NOW + 700, 8)])  # the same view 100 s later
    again = memo.choose(clusters, NONE, {"c1": slid}, NOW + 100)
    assert (memo.computed, memo.hits) == (1, 2)
    assert again.horizon == NOW + 100 + 600 + 900


def test_a_level_the_profile_takes_only_after_the_choice_ends_changes_nothing():
    """Ten hosts or more run the work in 1 s: 25 and 14 hosts tie. Found in a simulated run:
    ties were broken among every level of the profile, so a later level of 14 changed it."""
    clusters = infos(c1=32)
    selector = Moldable(Moldable.Params(work=10.0, serial_fraction=0.0))
    window = [(NOW, 0), (NOW + 60, 25), (NOW + 70, 0)]
    view = {"c1": Profile.from_steps([*window, (NOW + 85, 25)])}
    request = selector.select(clusters, NONE, view, NOW)
    assert request == Request(nodes={"c1": 25}, duration=1)
    assert selector.horizon(clusters, NONE, view, NOW, request) == NOW + 61
    later_level = {"c1": Profile.from_steps([*window, (NOW + 85, 14)])}
    assert selector.select(clusters, NONE, later_level, NOW) == request
