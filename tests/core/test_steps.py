"""Steps (the numpy-free step function of free hosts from ``now`` on) against a brute-force twin:
a list of free hosts per whole second over ``[now, now + H)``, the last value forever after; and
against the Profile it is read from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coorm_bridge.core.profile import Profile
from coorm_bridge.core.steps import Steps, common_start

NOW = 1_700_000_000
H = 120


@st.composite
def functions(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Breakpoints within ``[NOW, NOW + H)`` and values (negative ones too: over-commitment)."""
    offsets = sorted(set(draw(st.lists(st.integers(1, H - 1), max_size=8))))
    times = [NOW, *(NOW + o for o in offsets)]
    values = draw(st.lists(st.integers(-3, 12), min_size=len(times), max_size=len(times)))
    return times, values


def twin(times: list[int], values: list[int]) -> list[int]:
    """Free hosts at each second ``NOW + i`` for ``i`` in ``[0, H]`` (index H: forever after)."""
    out = []
    for i in range(H + 1):
        k = max(j for j, t in enumerate(times) if t <= NOW + i)
        out.append(max(0, values[k]))
    return out


def twin_fit(free: list[int], hosts: int, duration: int, after: int) -> int | None:
    for s in range(max(0, after - NOW), H + 1):
        if all(free[min(s + d, H)] >= hosts for d in range(duration)):
            return NOW + s
    return None


@given(functions(), st.integers(0, 13), st.integers(1, 40), st.integers(NOW - 5, NOW + H))
def test_earliest_fit_is_the_twins(fn, hosts, duration, after):
    times, values = fn
    free = twin(times, values)
    assert Steps(list(times), list(values)).earliest_fit(hosts, duration, after) == twin_fit(
        free, hosts, duration, after
    )


@given(functions(), st.integers(NOW, NOW + H - 1), st.integers(1, 40))
def test_value_and_minimum_are_the_twins(fn, start, length):
    times, values = fn
    free, steps = twin(times, values), Steps(list(times), list(values))
    assert steps.value_at(start) == free[start - NOW]
    assert steps.value_at(NOW - 100) == free[0]  # before now: as at now
    expected = min(free[min(i, H)] for i in range(start - NOW, start - NOW + length))
    assert steps.min_over(start, start + length) == expected


@given(
    functions(),
    st.lists(st.tuples(st.integers(0, H - 1), st.integers(1, 30), st.integers(0, 4)), max_size=6),
)
def test_taking_plans_in_place_as_the_twin_does(fn, takes):
    times, values = fn
    free, steps = twin(times, values), Steps(list(times), list(values))
    for offset, length, hosts in takes:
        steps.take(hosts, NOW + offset, NOW + offset + length)
        for i in range(offset, offset + length):
            if i < H:
                free[i] = max(0, free[i] - hosts)
        assert [steps.value_at(NOW + i) for i in range(H)] == free[:H]
        assert all(a != b for a, b in zip(steps.values, steps.values[1:], strict=False))


@given(functions())
def test_read_from_a_profile_it_is_the_profile_from_now_on(fn):
    times, values = fn
    profile = Profile.from_steps(list(zip(times, values, strict=True)))
    steps = Steps.of(profile, NOW + 7)
    assert steps.now == NOW + 7
    for t in range(NOW + 7, NOW + H + 5):
        assert steps.value_at(t) == max(0, profile.value_at(t))


def test_rises_and_levels():
    steps = Steps([NOW, NOW + 10, NOW + 20, NOW + 30], [2, 5, 1, 8])
    assert steps.rises() == [NOW, NOW + 10, NOW + 30]
    assert steps.levels(6) == [1, 2, 5, 6]


def test_a_common_start_is_the_first_where_every_cluster_fits():
    a = Steps([NOW, NOW + 50], [1, 4])
    b = Steps([NOW, NOW + 20, NOW + 60, NOW + 100], [4, 0, 4, 0])
    assert common_start([(a, 2), (b, 2)], 30, NOW) == NOW + 60
    assert common_start([(a, 2), (b, 2)], 50, NOW) is None  # b never has 50 s of 2 hosts again


def test_bad_functions_are_refused():
    with pytest.raises(ValueError, match="as many values"):
        Steps([], [])
    with pytest.raises(ValueError, match="must increase"):
        Steps([NOW, NOW], [1, 2])
    with pytest.raises(ValueError, match="cannot take"):
        Steps([NOW], [3]).take(1, NOW - 1, NOW + 5)
    with pytest.raises(ValueError, match="empty interval"):
        Steps([NOW], [3]).min_over(NOW + 5, NOW + 5)
