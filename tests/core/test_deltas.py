"""Deltas (``Change.since``): a changed profile from its first changed step on, applied by a
launcher to the profile it holds, gives exactly the new profile; and a delta is sent only when
it is shorter than the whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.core.messages import (
    CAP,
    DELTA_COST,
    applied,
    availability_changes,
    first_difference,
)
from coorm_bridge.core.profile import Profile

NOW = 1_000_000


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    t, steps = NOW - draw(st.integers(0, 50)), []
    for _ in range(draw(st.integers(1, 12))):
        steps.append((t, draw(st.integers(0, 6))))
        t += draw(st.integers(1, 500))
    return Profile.from_steps(steps)


@given(old=profiles(), new=profiles(), deltas=st.booleans())
def test_the_launcher_holds_the_new_profile_after_the_change(old, new, deltas):
    changes = availability_changes({"c": old}, {"c": new}, NOW, deltas=deltas)
    held = CAP.of("c", old, NOW)
    if old.truncated(NOW) == new.truncated(NOW):
        assert changes == []
        return
    (change,) = changes
    after = applied(held, change)
    assert after.profile().steps(NOW) == new.steps(NOW)
    whole = len(new.steps(NOW))
    since = first_difference(old.steps(NOW), new.steps(NOW))
    assert since is not None
    shorter = since > NOW and len(new.steps(since)) + DELTA_COST <= whole
    if deltas and shorter:
        assert change.since == since == change.profile.steps[0][0]
        # Before since, the two profiles agree: nothing a launcher holds there is wrong.
        before = [[s for s in p.steps(NOW) if s[0] < since] for p in (old, new)]
        assert before[0] == before[1]
    else:
        assert change.since is None
        assert change.profile.steps[0][0] == NOW


def test_a_first_view_is_whole_even_for_a_session_that_asked_for_deltas():
    profile = Profile.from_steps([(NOW, 2), (NOW + 10, 4), (NOW + 20, 6), (NOW + 30, 8)])
    (change,) = availability_changes({}, {"c": profile}, NOW, deltas=True)
    assert change.since is None
    assert change.profile.steps == tuple(profile.steps(NOW))
