"""Profile against a brute-force reference: an int array over whole seconds.

The reference stores a function of time as ``arr[0..H]`` relative to an ``offset``: every
breakpoint the tests create lies in ``offset + [1, H]``, so ``arr[0]`` is the value at and before
``offset`` and ``arr[H]`` the value from ``offset + H`` on, forever.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.profile import (
    FOREVER,
    OverAllocation,
    Profile,
    earliest_common_start,
    earliest_start,
)

H = 200
OFFSETS = st.sampled_from([0, 1_000, 1_700_000_000])
SETTINGS = settings()  # the profile's (tests/profiles.py)


# -- reference ------------------------------------------------------------------------------


def ref_index(rel: np.ndarray | int) -> np.ndarray:
    return np.clip(rel, 0, H)


def ref_span(start: int, end: int | None) -> slice:
    """Indices of ``[start, end)`` in the reference (``end=None``: forever, i.e. up to H)."""
    return slice(start, H + 1 if end is None else end)


def ref_breakpoints(arr: np.ndarray) -> list[int]:
    return [i for i in range(1, H + 1) if arr[i] != arr[i - 1]]


def ref_value(arr: np.ndarray, rel: int) -> int:
    return int(arr[min(max(rel, 0), H)])


def fits_mask(arr: np.ndarray, hosts: int, duration: int, lo: int, hi: int) -> np.ndarray:
    """For each relative start s in [lo, hi]: are ``hosts`` free all over [s, s + duration)?"""
    n = hi - lo + 1
    vals = arr[ref_index(np.arange(lo, hi + duration))]
    cnt = np.concatenate(([0], np.cumsum(vals < hosts)))
    return (cnt[duration : duration + n] - cnt[:n]) == 0


def intervals_of(bounds) -> list[int]:
    """The bounds fitting_starts returns, as Python ints (it may hand back numpy arrays)."""
    return [int(b) for b in np.asarray(bounds, dtype=np.int64).tolist()]


def starts(profile: Profile, hosts: int, duration: int, after: int) -> tuple[list, list]:
    lows, highs = profile.fitting_starts(hosts, duration, after)
    return intervals_of(lows), intervals_of(highs)


def profile_from_ref(arr: np.ndarray, offset: int) -> Profile:
    times = [offset + i for i in range(1, H + 1)]
    return Profile(int(arr[0]), times, arr[1:].tolist())


def assert_matches(p: Profile, arr: np.ndarray, offset: int, full: bool = False) -> None:
    rel = np.arange(-3, H + 4)
    expected = arr[ref_index(rel)]
    assert p.values_at(offset + rel).tolist() == expected.tolist()
    assert p.breakpoints == [offset + i for i in ref_breakpoints(arr)]
    assert len(p) == len(ref_breakpoints(arr))
    assert p.initial == int(arr[0])
    assert p.final == int(arr[H])
    assert p.max_value() == int(arr.max())
    assert p.min_value() == int(arr.min())
    if full:
        for r, value in zip(rel.tolist(), expected.tolist(), strict=True):
            assert p.value_at(offset + r) == value
        assert p.value_at(offset + 10**9) == int(arr[H])
        assert p.value_at(FOREVER - 1) == int(arr[H])
        assert p.value_at(offset - 10**6) == int(arr[0])


# -- strategies -----------------------------------------------------------------------------


@st.composite
def intervals(draw: st.DrawFn, allow_empty: bool = False) -> tuple[int, int | None]:
    s = draw(st.integers(1, H - 1))
    if allow_empty and draw(st.integers(0, 9)) == 0:
        return s, draw(st.integers(1, s))
    e = draw(st.none() | st.integers(s + 1, H))
    return s, e


adds = st.tuples(st.integers(-4, 4), intervals())

ops = st.one_of(
    st.tuples(st.just("add"), st.integers(-5, 5), intervals(allow_empty=True)),
    st.tuples(st.just("reserve"), st.integers(0, 6), intervals(allow_empty=True)),
    st.tuples(st.just("release"), st.integers(0, 6), intervals(allow_empty=True)),
    st.tuples(
        st.just("truncate"),
        st.none() | st.integers(0, H),
        st.none() | st.integers(0, H),
    ),
    st.tuples(st.just("clamp"), st.integers(-3, 3), st.none() | st.integers(0, 8)),
    st.tuples(st.just("complement"), st.integers(-5, 10)),
    st.tuples(
        st.sampled_from(["plus", "minus"]),
        st.integers(-3, 6),
        st.lists(adds, max_size=4),
    ),
)


def apply_op(p: Profile, arr: np.ndarray, op: tuple, offset: int) -> tuple[Profile, np.ndarray]:
    kind = op[0]
    if kind in ("add", "reserve", "release"):
        amount, (s, e) = op[1], op[2]
        end = None if e is None else offset + e
        new = arr.copy()
        empty = e is not None and e <= s
        if kind == "add":
            if not empty:
                new[ref_span(s, e)] += amount
            return p.add(amount, offset + s, end), new
        if kind == "release":
            if not empty:
                new[ref_span(s, e)] += amount
            return p.release(amount, offset + s, end), new
        if not empty and amount > 0 and arr[ref_span(s, e)].min() < amount:
            before = Profile.from_steps(p.steps(offset - 10))
            with pytest.raises(OverAllocation):
                p.reserve(amount, offset + s, end)
            # Nothing changed: the profile is the same function as before.
            assert p == before
            assert_matches(p, arr, offset)
            return p, arr
        if not empty:
            new[ref_span(s, e)] -= amount
        return p.reserve(amount, offset + s, end), new
    if kind == "truncate":
        s, e = op[1], op[2]
        if s is not None and e is not None and e < s:
            s, e = e, s
        lo = 0 if s is None else s
        hi = H if e is None else e
        new = arr[np.clip(np.arange(H + 1), lo, hi)]
        return p.truncated(
            None if s is None else offset + s, None if e is None else offset + e
        ), new
    if kind == "clamp":
        low, high = op[1], op[2]
        if high is not None:
            high = max(high, low)
        return p.clamped(low, high), np.clip(arr, low, high)
    if kind == "complement":
        return p.complement(op[1]), op[1] - arr
    # plus / minus: another profile built from a constant and additions
    other, other_arr = Profile.constant(op[1]), np.full(H + 1, op[1], dtype=np.int64)
    for delta, (s, e) in op[2]:
        other = other.add(delta, offset + s, None if e is None else offset + e)
        other_arr[ref_span(s, e)] += delta
    if kind == "plus":
        return p + other, arr + other_arr
    return p - other, arr - other_arr


@st.composite
def profiles(draw: st.DrawFn, offset: int | None = None, max_ops: int = 8) -> tuple:
    """(profile, reference array, offset) built by a random sequence of operations."""
    if offset is None:
        offset = draw(OFFSETS)
    initial = draw(st.integers(-2, 10))
    p, arr = Profile.constant(initial), np.full(H + 1, initial, dtype=np.int64)
    for op in draw(st.lists(ops, max_size=max_ops)):
        p, arr = apply_op(p, arr, op, offset)
    return p, arr, offset


@st.composite
def step_profiles(draw: st.DrawFn, offset: int | None = None) -> tuple:
    """(profile, reference array, offset) given directly by a few breakpoints with small values:
    many short runs, so searches meet several fitting intervals per profile."""
    if offset is None:
        offset = draw(OFFSETS)
    times = sorted(draw(st.sets(st.integers(1, H), max_size=10)))
    values = draw(st.lists(st.integers(0, 5), min_size=len(times), max_size=len(times)))
    initial = draw(st.integers(0, 5))
    arr = np.full(H + 1, initial, dtype=np.int64)
    for t, v in zip(times, values, strict=True):
        arr[t:] = v
    return Profile(initial, [offset + t for t in times], values), arr, offset


def searchable(offset: int | None = None) -> st.SearchStrategy[tuple]:
    return st.one_of(step_profiles(offset=offset), profiles(offset=offset, max_ops=6))


@st.composite
def search_durations(draw: st.DrawFn, arr: np.ndarray) -> int:
    """A duration, often exactly the length of one of the profile's runs (the tight case)."""
    runs = np.diff(np.concatenate(([0], np.flatnonzero(np.diff(arr)) + 1, [H])))
    runs = [int(r) for r in runs if r > 0]
    if runs and draw(st.booleans()):
        return draw(st.sampled_from(runs))
    return draw(st.integers(1, 80))


# -- operations against the reference ---------------------------------------------------------


@SETTINGS
@given(offset=OFFSETS, initial=st.integers(-2, 10), sequence=st.lists(ops, max_size=12))
def test_operations_match_reference(offset, initial, sequence):
    p, arr = Profile.constant(initial), np.full(H + 1, initial, dtype=np.int64)
    for op in sequence:
        previous, previous_arr = p, arr.copy()
        p, arr = apply_op(p, arr, op, offset)
        assert_matches(p, arr, offset)
        # Immutability: the operand still is the function it was.
        assert_matches(previous, previous_arr, offset)
    assert_matches(p, arr, offset, full=True)


@SETTINGS
@given(built=profiles(), queries=st.lists(intervals(), min_size=1, max_size=8))
def test_min_over(built, queries):
    p, arr, offset = built
    for s, e in queries:
        assert p.min_over(offset + s, None if e is None else offset + e) == int(
            arr[ref_span(s, e)].min()
        )
    # Intervals reaching outside the horizon on both sides.
    assert p.min_over(offset - 50, offset + H + 50) == int(arr.min())
    assert p.min_over(offset - 50, None) == int(arr.min())
    assert p.min_over(offset + H + 7, None) == int(arr[H])
    assert p.min_over(offset - 9, offset - 3) == int(arr[0])


def test_min_over_rejects_empty_interval():
    p = Profile(3, [10], [1])
    with pytest.raises(ValueError, match="empty interval"):
        p.min_over(5, 5)
    with pytest.raises(ValueError, match="empty interval"):
        p.min_over(5, 4)


@SETTINGS
@given(built=profiles(), origin=st.integers(-5, H + 5))
def test_steps_round_trip(built, origin):
    p, arr, offset = built
    steps = p.steps(offset + origin)
    assert steps[0] == (offset + origin, ref_value(arr, origin))
    times = [t for t, _ in steps]
    assert times == sorted(set(times))
    back = Profile.from_steps(steps)
    assert back == p.truncated(offset + origin)
    assert hash(back) == hash(p.truncated(offset + origin))
    # From the origin on, the JSON form is the same function.
    rel = np.arange(origin, H + 4)
    assert back.values_at(offset + rel).tolist() == arr[ref_index(rel)].tolist()
    # ... and before it the value at the origin stands.
    assert back.value_at(offset + origin - 1000) == ref_value(arr, origin)
    # JSON lists (not tuples) are accepted too.
    assert Profile.from_steps([list(step) for step in steps]) == back
    if origin <= 0:
        assert back == p


def test_from_steps_rejects_empty():
    with pytest.raises(ValueError, match="at least one step"):
        Profile.from_steps([])


@SETTINGS
@given(a=profiles(offset=0), b=profiles(offset=0), origin=st.integers(0, H))
def test_truncated_equality_means_agreement_from_origin(a, b, origin):
    p, arr_p, _ = a
    q, arr_q, _ = b
    agree = bool(np.array_equal(arr_p[origin:], arr_q[origin:]))
    assert (p.truncated(origin) == q.truncated(origin)) == agree
    if agree:
        assert hash(p.truncated(origin)) == hash(q.truncated(origin))


# -- searching --------------------------------------------------------------------------------


def check_fitting_starts(p, arr, offset, hosts, duration, after):
    found_lows, found_highs = p.fitting_starts(hosts, duration, offset + after)
    lows, highs = intervals_of(found_lows), intervals_of(found_highs)
    assert len(lows) == len(highs)
    horizon = max(after, H) + 2
    brute = fits_mask(arr, hosts, duration, after, horizon)
    member = np.zeros(horizon - after + 1, dtype=bool)
    for k, (lo, hi) in enumerate(zip(lows, highs, strict=True)):
        assert offset + after <= lo <= hi
        if k:
            assert lo > highs[k - 1] + 1, "intervals must be increasing and disjoint"
        if hi >= FOREVER:
            assert k == len(lows) - 1, "only the last interval lasts forever"
            assert arr[H] >= hosts
        else:
            assert hi <= offset + horizon
        rel_lo = lo - offset
        assert rel_lo <= horizon
        if rel_lo > after:
            # The second before the interval does not fit (else the interval starts earlier).
            assert not fits_mask(arr, hosts, duration, rel_lo - 1, rel_lo - 1)[0]
        rel_hi = min(hi - offset, horizon)
        member[rel_lo - after : rel_hi - after + 1] = True
    # Exactly the fitting starts, within the horizon...
    assert member.tolist() == brute.tolist()
    # ... and beyond it (where everything is the final value), forever or never.
    forever = bool(highs) and highs[-1] >= FOREVER
    assert forever == bool(arr[H] >= hosts)
    first = np.flatnonzero(brute)
    expected = offset + after + int(first[0]) if first.size else None
    assert p.earliest_fit(hosts, duration, offset + after) == expected
    return lows, highs


@SETTINGS
@given(
    built=searchable(),
    hosts=st.integers(-1, 8),
    after=st.integers(0, H + 5),
    data=st.data(),
)
def test_fitting_starts_against_brute_force(built, hosts, after, data):
    p, arr, offset = built
    duration = data.draw(search_durations(arr))
    check_fitting_starts(p, arr, offset, hosts, duration, after)


def test_fitting_starts_examples():
    p = Profile(0, [10, 20, 30, 40], [4, 2, 4, 8])
    assert starts(p, 2, 5, 0) == ([10], [FOREVER])
    assert starts(p, 4, 5, 0) == ([10, 30], [15, FOREVER])
    assert starts(p, 4, 11, 0) == ([30], [FOREVER])
    assert starts(p, 5, 1, 0) == ([40], [FOREVER])
    assert starts(p, 9, 1, 0) == ([], [])
    assert p.earliest_fit(9, 1, 0) is None
    assert starts(p, 4, 5, 12) == ([12, 30], [15, FOREVER])
    assert p.earliest_fit(4, 5, 16) == 30
    assert starts(p, 0, 1, 5) == ([5], [FOREVER])
    # A run exactly as long as the duration fits at one start only.
    assert starts(p, 4, 10, 0) == ([10, 30], [10, FOREVER])
    assert starts(p, 4, 10, 11) == ([30], [FOREVER])
    assert p.earliest_fit(4, 10, 10) == 10


@SETTINGS
@given(
    data=st.data(),
    offset=OFFSETS,
    count=st.integers(1, 4),
    after=st.integers(0, H + 5),
)
def test_earliest_start_against_brute_force(data, offset, count, after):
    names = [f"c{i}" for i in range(count)]
    built = {name: data.draw(searchable(offset=offset)) for name in names}
    asked = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    nodes = {name: data.draw(st.integers(0, 6)) for name in asked}
    duration = data.draw(search_durations(built[asked[0]][1]))
    profs = {name: built[name][0] for name in names}
    horizon = max(after, H)
    both = np.ones(horizon - after + 1, dtype=bool)
    for name, hosts in nodes.items():
        both &= fits_mask(built[name][1], hosts, duration, after, horizon)
    first = np.flatnonzero(both)
    expected = offset + after + int(first[0]) if first.size else None
    assert earliest_start(profs, nodes, duration, offset + after) == expected
    assert (
        earliest_common_start(
            ((profs[name], hosts) for name, hosts in nodes.items()), duration, offset + after
        )
        == expected
    )
    # A cluster the profiles do not know never fits.
    assert earliest_start(profs, {**nodes, "unknown": 1}, duration, offset + after) is None


def test_earliest_start_examples():
    a = Profile(0, [10, 20, 30], [4, 1, 4])
    b = Profile(4, [12, 32], [0, 4])
    assert earliest_start({"a": a, "b": b}, {"a": 2}, 5, 0) == 10
    assert earliest_start({"a": a, "b": b}, {"b": 2}, 5, 0) == 0
    assert earliest_start({"a": a, "b": b}, {"a": 2, "b": 2}, 5, 0) == 32
    assert earliest_start({"a": a, "b": b}, {"a": 2, "b": 2}, 2, 0) == 10
    assert earliest_start({"a": a, "b": b}, {"a": 5, "b": 2}, 2, 0) is None
    # A later cluster moves the candidate out of an earlier cluster's interval: look again.
    c = Profile(2, [5, 20], [0, 2])
    d = Profile(0, [10], [2])
    assert earliest_start({"c": c, "d": d}, {"c": 1, "d": 1}, 3, 0) == 20
    assert earliest_start({"c": c, "d": d}, {"d": 1, "c": 1}, 3, 0) == 20
    assert earliest_start({"c": c, "d": d}, {"c": 1, "d": 1}, 3, 2) == 20
    assert earliest_start({"c": c, "d": d}, {"c": 1}, 3, 2) == 2
    with pytest.raises(ValueError, match="at least one cluster"):
        earliest_start({"a": a}, {}, 5, 0)


# -- identity -------------------------------------------------------------------------------


@SETTINGS
@given(
    offset=OFFSETS,
    initial=st.integers(-2, 6),
    changes=st.lists(adds, max_size=8),
    data=st.data(),
)
def test_operation_order_does_not_matter(offset, initial, changes, data):
    shuffled = data.draw(st.permutations(changes))

    def build(sequence):
        p = Profile.constant(initial)
        for delta, (s, e) in sequence:
            p = p.add(delta, offset + s, None if e is None else offset + e)
        return p

    p, q = build(changes), build(shuffled)
    assert p == q
    assert hash(p) == hash(q)
    arr = np.full(H + 1, initial, dtype=np.int64)
    for delta, (s, e) in changes:
        arr[ref_span(s, e)] += delta
    # A profile given with redundant breakpoints is the same canonical value.
    direct = profile_from_ref(arr, offset)
    assert direct == p
    assert hash(direct) == hash(p)
    assert {p, q, direct} == {p}
    # Adding then removing is the identity; so is + then -.
    assert p.add(3, offset + 5, offset + 50).add(-3, offset + 5, offset + 50) == p
    assert (p + q) - q == p
    assert hash((p + q) - q) == hash(p)
    assert p.complement(7).complement(7) == p


@SETTINGS
@given(a=profiles(offset=0, max_ops=4), b=profiles(offset=0, max_ops=4))
def test_equal_iff_same_function(a, b):
    p, arr_p, _ = a
    q, arr_q, _ = b
    same = bool(np.array_equal(arr_p, arr_q))
    assert (p == q) == same
    assert (p != q) == (not same)
    if same:
        assert hash(p) == hash(q)


@SETTINGS
@given(built=profiles(), delta=st.integers(-3, 3).filter(bool), span=intervals())
def test_never_equal_to_a_different_function(built, delta, span):
    p, _, offset = built
    s, e = span
    other = p.add(delta, offset + s, None if e is None else offset + e)
    assert other != p
    assert p != other
    assert p.complement(0) != p or p.max_value() == p.min_value() == 0
    assert p != Profile.constant(p.initial) or len(p) == 0


def test_equality_examples():
    assert Profile(1, [5, 7], [1, 1]) == Profile.constant(1)
    assert Profile(1, [5, 7], [2, 2]) == Profile(1, [5], [2])
    assert hash(Profile(1, [5, 7], [2, 2])) == hash(Profile(1, [5], [2]))
    assert Profile(1, [5], [2]) != Profile(1, [6], [2])
    assert Profile(1, [5], [2]) != Profile(2, [5], [1])
    assert Profile(0) != 0
    assert Profile(0) != "Profile(0)"


# -- reservations -------------------------------------------------------------------------------


@SETTINGS
@given(built=profiles(), hosts=st.integers(1, 8), span=intervals())
def test_reserve_refuses_overallocation_and_changes_nothing(built, hosts, span):
    p, arr, offset = built
    s, e = span
    end = None if e is None else offset + e
    snapshot = (p.initial, p.breakpoints, p.values_at(offset + np.arange(H + 1)).tolist())
    free = int(arr[ref_span(s, e)].min())
    if free < hosts:
        with pytest.raises(OverAllocation) as caught:
            p.reserve(hosts, offset + s, end)
        assert isinstance(caught.value, ValueError)
    else:
        taken = p.reserve(hosts, offset + s, end)
        expected = arr.copy()
        expected[ref_span(s, e)] -= hosts
        assert_matches(taken, expected, offset)
        assert taken.release(hosts, offset + s, end) == p
    assert snapshot == (p.initial, p.breakpoints, p.values_at(offset + np.arange(H + 1)).tolist())


def test_reserve_and_release_refuse_negative_counts():
    p = Profile.constant(4)
    with pytest.raises(ValueError, match="negative"):
        p.reserve(-1, 0, 10)
    with pytest.raises(ValueError, match="negative"):
        p.release(-1, 0, 10)
    assert p == Profile.constant(4)


def test_reserve_examples():
    p = Profile.constant(4).reserve(3, 10, 20)
    assert p == Profile(4, [10, 20], [1, 4])
    with pytest.raises(OverAllocation, match="2 hosts"):
        p.reserve(2, 15, 25)
    with pytest.raises(OverAllocation):
        p.reserve(2, 0, None)
    assert p.reserve(1, 15, None) == Profile(4, [10, 15, 20], [1, 0, 3])
    assert p.reserve(4, 20, None) == Profile(4, [10, 20], [1, 0])
    assert p.reserve(0, 0, None) is p


@SETTINGS
@given(
    offset=OFFSETS,
    capacity=st.integers(0, 12),
    jobs=st.lists(
        st.tuples(st.integers(1, H - 1), st.none() | st.integers(1, H), st.integers(-2, 5)),
        max_size=10,
    ),
)
def test_from_intervals_matches_reference(offset, capacity, jobs):
    arr = np.full(H + 1, capacity, dtype=np.int64)
    one_by_one = Profile.constant(capacity)
    for start, end, hosts in jobs:
        if end is None or end > start:
            arr[ref_span(start, end)] -= hosts
        one_by_one = one_by_one.add(-hosts, offset + start, None if end is None else offset + end)
    shifted = [(offset + s, None if e is None else offset + e, h) for s, e, h in jobs]
    p = Profile.from_intervals(capacity, shifted)
    assert_matches(p, arr, offset)
    assert p == one_by_one
    assert hash(p) == hash(one_by_one)


# -- construction -------------------------------------------------------------------------------


def test_constructor_rejects_bad_breakpoints():
    with pytest.raises(ValueError, match="strictly increase"):
        Profile(0, [1, 1], [1, 2])
    with pytest.raises(ValueError, match="strictly increase"):
        Profile(0, [5, 3], [1, 2])
    with pytest.raises(ValueError, match="strictly increase"):
        Profile(0, [1, 2, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="as many values"):
        Profile(0, [1, 2], [1])
    with pytest.raises(ValueError, match="as many values"):
        Profile(0, [], [1])
    with pytest.raises(ValueError, match="as many values"):
        Profile(0, [[1, 2]], [[1, 2]])


@SETTINGS
@given(
    initial=st.integers(-5, 5),
    times=st.lists(st.integers(0, 50), max_size=8),
    values=st.lists(st.integers(-5, 5), max_size=8),
)
def test_constructor_accepts_exactly_increasing_breakpoints(initial, times, values):
    valid = len(times) == len(values) and all(a < b for a, b in pairwise(times))
    if not valid:
        with pytest.raises(ValueError, match=r"as many values|strictly increase"):
            Profile(initial, times, values)
        return
    p = Profile(initial, times, values)
    for t in range(-2, 53):
        k = sum(1 for bp in times if bp <= t)
        assert p.value_at(t) == (values[k - 1] if k else initial)
    # Canonical: no breakpoint repeats the value before it.
    full = [initial, *values]
    kept = [times[i] for i in range(len(times)) if full[i + 1] != full[i]]
    assert p.breakpoints == kept


def test_fractional_inputs_are_refused_not_truncated():
    with pytest.raises(TypeError, match="whole numbers"):
        Profile(0, [1.7], [2])
    with pytest.raises(TypeError, match="whole numbers"):
        Profile(0, [1], [2.9])
    with pytest.raises(TypeError):
        Profile(1.9)  # type: ignore[arg-type]


def test_from_steps_checks_the_first_step_too():
    with pytest.raises(ValueError, match="strictly increase"):
        Profile.from_steps([[10, 1], [5, 2]])
    assert Profile.from_steps([[5, 1], [10, 2]]) == Profile(1, [10], [2])


def test_truncating_to_an_interval_that_ends_before_it_starts_is_refused():
    with pytest.raises(ValueError, match="ends before it starts"):
        Profile(0, [5, 15], [3, 1]).truncated(20, 10)
