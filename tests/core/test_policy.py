"""The CooRM policy against a brute-force reference and its stated properties.

The reference replays the paper's algorithm (§III-C) on numpy arrays indexed by whole seconds from
``now`` up to a horizon past every breakpoint: subtract started applications and ghosts, then for
each placed application in subscription order record its view, find the first second where its
request fits every cluster for its whole duration, and reserve it there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Plan, Policy, PolicyConfig
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import AppState
from tests.profiles import fewer

SETTINGS = settings()  # the profile's (tests/profiles.py)
FEW = settings(max_examples=fewer(60))  # each example runs a pass per change, and a fresh one

PLACED = (AppState.SUBMITTED, AppState.REQUEST_SENT, AppState.WAITING)
HOLDING = (AppState.STARTED, AppState.FINISH_SENT, AppState.GHOST)
WITH_REQUEST = (AppState.REQUEST_SENT, AppState.WAITING)
FAR = 10**12  # a time past every breakpoint of every test


# -- scenarios --------------------------------------------------------------------------------


@dataclass
class Scenario:
    free: dict[str, Profile]
    apps: list[Application]
    now: int
    fair_start: int
    capacity: dict[str, int]

    def config(self) -> PolicyConfig:
        return PolicyConfig(fair_start=self.fair_start)


def replace(app: Application, **changes) -> Application:
    """A validated copy of ``app`` with some fields changed."""
    return Application.model_validate({**dict(app), **changes})


def draw_request(draw, clusters, capacity) -> Request:
    chosen = draw(st.lists(st.sampled_from(clusters), min_size=1, unique=True))
    # Now and then up to two hosts more than the cluster has: such a request never fits.
    nodes = {
        c: draw(st.integers(1, capacity.get(c, 4) + (2 if draw(st.integers(0, 7)) == 0 else 0)))
        for c in chosen
    }
    return Request(nodes=nodes, duration=draw(st.integers(1, 300)))


def draw_app(draw, app_id, order, names, capacity, remaining, now, fair_start, unknown):
    """One application in a random state with valid fields.

    Hosts held by started applications and ghosts are taken out of ``remaining`` (a dict it
    updates), so that the batch systems' free hosts always cover them: no clamping.
    """
    pool = [*names, "zz"] if unknown and draw(st.integers(0, 4)) == 0 else names
    clusters = tuple(draw(st.lists(st.sampled_from(pool), min_size=1, unique=True)))
    state = draw(st.sampled_from(list(AppState)))
    fields: dict = {"id": app_id, "order": order, "clusters": clusters}
    if state in HOLDING:
        started_at = now - draw(st.integers(0, 300))
        duration = draw(st.integers(1, 400))
        done_at = None if state is AppState.STARTED else draw(st.integers(started_at, now))
        end = started_at + duration
        if done_at is not None:
            end = min(end, done_at + fair_start)
        low = max(started_at, now)
        nodes = {}
        for c in draw(st.lists(st.sampled_from(clusters), min_size=1, unique=True)):
            if c not in remaining:
                nodes[c] = draw(st.integers(1, 4))
                continue
            limit = remaining[c].min_over(low, end) if end > low else capacity[c]
            if limit >= 1:
                nodes[c] = draw(st.integers(1, limit))
        if nodes:
            if end > low:
                for c, hosts in nodes.items():
                    if c in remaining:
                        remaining[c] = remaining[c].reserve(hosts, low, end)
            return Application(
                **fields,
                state=state,
                request=Request(nodes=nodes, duration=duration),
                started_at=started_at,
                done_at=done_at,
            )
        state = AppState.WAITING
    if state in (AppState.REQUEST_SENT, AppState.WAITING):
        return Application(**fields, state=state, request=draw_request(draw, clusters, capacity))
    return Application(**fields, state=state)  # submitted: no request sent yet


@st.composite
def scenarios(draw, min_apps=1, max_apps=12, unknown=True, foreign=True) -> Scenario:
    names = [f"c{i}" for i in range(draw(st.integers(2, 4)))]
    capacity = {c: draw(st.integers(1, 16)) for c in names}
    now = draw(st.sampled_from([400, 1_700_000_000]))
    fair_start = draw(st.integers(0, 60))
    free = {}
    for c in names:
        p = Profile.constant(capacity[c])
        for _ in range(draw(st.integers(0, 3)) if foreign else 0):
            s = now + draw(st.integers(-100, 400))
            length = draw(st.none() | st.integers(1, 300))
            e = None if length is None else s + length
            k = min(draw(st.integers(1, capacity[c])), p.min_over(s, e))
            if k > 0:
                p = p.reserve(k, s, e)
        free[c] = p
    count = draw(st.integers(min_apps, max_apps))
    orders = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count, unique=True))
    remaining = dict(free)
    apps = [
        draw_app(draw, f"app{i}", order, names, capacity, remaining, now, fair_start, unknown)
        for i, order in enumerate(orders)
    ]
    return Scenario(free, apps, now, fair_start, capacity)


# -- brute-force reference ----------------------------------------------------------------------


def hold_end(app: Application, fair_start: int) -> int:
    assert app.request is not None
    assert app.started_at is not None
    end = app.started_at + app.request.duration
    return end if app.done_at is None else min(app.done_at + fair_start, end)


def horizon(free, apps, now, fair_start) -> int:
    """A time by which every breakpoint, held interval and reservation has passed."""
    last = now
    for p in free.values():
        last = max(last, *p.breakpoints) if len(p) else last
    total = 0
    longest = 1
    for app in apps:
        if app.request is None:
            continue
        if app.state in HOLDING:
            last = max(last, hold_end(app, fair_start))
        total += app.request.duration
        longest = max(longest, app.request.duration)
    return last + total + longest + 2


def window_fits(values: np.ndarray, hosts: int, duration: int) -> np.ndarray:
    """For each start i in [0, len - duration]: values[i:i + duration] >= hosts throughout."""
    cnt = np.concatenate(([0], np.cumsum(values < hosts)))
    return (cnt[duration:] - cnt[: len(cnt) - duration]) == 0


@dataclass
class Expected:
    now: int
    end: int
    outcomes: dict[str, tuple[AppState, int | None, int | None]]
    to_start: tuple[str, ...]
    expired: tuple[str, ...]
    views: dict[str, dict[str, np.ndarray]]
    base: dict[str, np.ndarray]


def reference(free, apps, now, fair_start) -> Expected:
    end = horizon(free, apps, now, fair_start)
    grid = np.arange(now, end)
    base = {c: p.values_at(grid).astype(np.int64) for c, p in free.items()}
    table = sorted(apps, key=lambda a: a.order)
    outcomes: dict[str, tuple[AppState, int | None, int | None]] = {}
    expired = []
    for app in table:
        if app.state not in HOLDING:
            continue
        stop = hold_end(app, fair_start)
        if stop <= now:
            if app.state is AppState.STARTED:
                expired.append(app.id)
                outcomes[app.id] = (AppState.STARTED, None, stop)
            else:
                outcomes[app.id] = (AppState.FINISHED, None, None)
            continue
        held = AppState.STARTED if app.state is AppState.STARTED else AppState.GHOST
        outcomes[app.id] = (held, None, stop)
        for c, hosts in app.request.nodes.items():
            if c in base:
                base[c][max(app.started_at, now) - now : stop - now] -= hosts
    base = {c: np.maximum(a, 0) for c, a in base.items()}
    state = {c: a.copy() for c, a in base.items()}
    views = {}
    to_start = []
    for app in table:
        if app.state not in PLACED:
            continue
        views[app.id] = {c: state[c].copy() for c in app.clusters if c in state}
        start = None
        request = app.request
        if request is not None and all(c in state for c in request.nodes):
            ok = np.ones(len(grid) - request.duration + 1, dtype=bool)
            for c, hosts in request.nodes.items():
                ok &= window_fits(state[c], hosts, request.duration)
            first = np.flatnonzero(ok)
            if first.size:
                start = now + int(first[0])
                for c, hosts in request.nodes.items():
                    state[c][start - now : start - now + request.duration] -= hosts
        new_state = AppState.WAITING if app.state is AppState.REQUEST_SENT else app.state
        if start == now:
            new_state = AppState.STARTED
            to_start.append(app.id)
        outcomes[app.id] = (new_state, start, None)
    return Expected(now, end, outcomes, tuple(to_start), tuple(expired), views, base)


def summary(result: Plan) -> dict[str, tuple[AppState, int | None, int | None]]:
    return {
        app_id: (o.state, o.estimated_start, o.hold_until) for app_id, o in result.outcomes.items()
    }


def assert_matches_reference(result: Plan, expected: Expected, apps) -> None:
    assert summary(result) == expected.outcomes
    assert result.to_start == expected.to_start
    assert result.expired == expected.expired
    grid = np.arange(expected.now, expected.end)
    assert set(result.free) == set(expected.base)
    for c, values in expected.base.items():
        assert result.free[c].values_at(grid).tolist() == values.tolist()
        assert result.free[c].value_at(FAR) == int(values[-1])
    by_id = {app.id: app for app in apps}
    for app_id, view in expected.views.items():
        got = result.view(app_id)
        assert list(got) == [c for c in by_id[app_id].clusters if c in expected.base]
        for c, values in view.items():
            assert got[c].values_at(grid).tolist() == values.tolist(), (app_id, c)
            assert got[c].value_at(FAR) == int(values[-1])


def view_values(
    result: Plan, app_id: str, end: int, start: int | None = None
) -> dict[str, list[int]]:
    """A view from ``start`` (default: the pass's now) on: its values up to ``end``, then the one
    lasting forever."""
    grid = np.arange(result.now if start is None else start, end)
    return {
        c: [*p.values_at(grid).tolist(), p.value_at(FAR)] for c, p in result.view(app_id).items()
    }


def apply_states(apps: list[Application], result: Plan) -> list[Application]:
    """What the bridge does after a pass: persist states, start the started, kill the expired."""
    table = []
    for app in apps:
        outcome = result.outcomes.get(app.id)
        if outcome is None:
            table.append(app)
        elif app.id in result.expired:
            table.append(replace(app, state=AppState.FINISHED))
        elif app.id in result.to_start:
            table.append(replace(app, state=AppState.STARTED, started_at=result.now))
        else:
            table.append(replace(app, state=outcome.state))
    return table


# -- the pass against the reference -----------------------------------------------------------


@SETTINGS
@given(sc=scenarios())
def test_pass_matches_brute_force_reference(sc):
    result = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    assert_matches_reference(result, reference(sc.free, sc.apps, sc.now, sc.fair_start), sc.apps)
    # A fresh policy notifies every placed application that does not start right away.
    expected = tuple(
        app.id
        for app in sorted(sc.apps, key=lambda a: a.order)
        if app.state in PLACED and app.id not in result.to_start
    )
    assert result.changed == expected
    ignored = {a.id for a in sc.apps if a.state in (AppState.FINISHED, AppState.CANCELLED)}
    assert not ignored & set(result.outcomes)


# -- (a) no cluster over-allocated ----------------------------------------------------------


@SETTINGS
@given(sc=scenarios())
def test_no_cluster_is_over_allocated(sc):
    result = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    grid = np.arange(sc.now, horizon(sc.free, sc.apps, sc.now, sc.fair_start))
    left = {c: p.values_at(grid).astype(np.int64) for c, p in sc.free.items()}
    for app in sc.apps:
        outcome = result.outcomes.get(app.id)
        if outcome is None:
            continue
        if outcome.hold_until is not None and outcome.hold_until > sc.now:
            span = slice(max(app.started_at, sc.now) - sc.now, outcome.hold_until - sc.now)
        elif outcome.estimated_start is not None:
            assert outcome.estimated_start >= sc.now
            span = slice(
                outcome.estimated_start - sc.now,
                outcome.estimated_start + app.request.duration - sc.now,
            )
        else:
            continue
        for c, hosts in app.request.nodes.items():
            if c in left:
                left[c][span] -= hosts
    for c, values in left.items():
        assert values.min() >= 0, f"cluster {c} over-allocated at {sc.now + int(values.argmin())}"


# -- (b) a later subscriber never delays an earlier one -----------------------------------------


@SETTINGS
@given(sc=scenarios(max_apps=10), data=st.data())
def test_later_subscriber_never_delays_earlier_ones(sc, data):
    names = list(sc.free)
    clusters = tuple(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    late = Application(
        id="late",
        order=max(a.order for a in sc.apps) + data.draw(st.integers(1, 5)),
        clusters=clusters,
        state=data.draw(st.sampled_from([AppState.REQUEST_SENT, AppState.WAITING])),
        request=draw_request(data.draw, clusters, sc.capacity),
    )
    before = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    after = Policy(sc.config()).plan(sc.free, [*sc.apps, late], sc.now)
    assert {k: v for k, v in summary(after).items() if k != "late"} == summary(before)
    assert tuple(a for a in after.to_start if a != "late") == before.to_start
    assert after.expired == before.expired
    end = horizon(sc.free, [*sc.apps, late], sc.now, sc.fair_start)
    for app_id in before._views:
        assert view_values(after, app_id, end) == view_values(before, app_id, end)


# -- (c) what fits now starts now --------------------------------------------------------------


@SETTINGS
@given(sc=scenarios())
def test_request_that_fits_now_starts_now(sc):
    result = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    end = horizon(sc.free, sc.apps, sc.now, sc.fair_start)
    grid = np.arange(sc.now, end)
    left = {c: p.values_at(grid).astype(np.int64) for c, p in result.free.items()}
    fitted = 0
    for app in sorted(sc.apps, key=lambda a: a.order):
        if app.state not in PLACED or app.request is None:
            continue
        request = app.request
        fits_now = all(
            c in left and left[c][: request.duration].min() >= hosts
            for c, hosts in request.nodes.items()
        )
        outcome = result.outcomes[app.id]
        if fits_now:
            fitted += 1
            assert outcome.estimated_start == sc.now
            assert outcome.state is AppState.STARTED
            assert app.id in result.to_start
        else:
            assert outcome.estimated_start != sc.now
            assert app.id not in result.to_start
        if outcome.estimated_start is not None:
            offset = outcome.estimated_start - sc.now
            for c, hosts in request.nodes.items():
                left[c][offset : offset + request.duration] -= hosts
    assert len(result.to_start) == fitted


def test_fitting_request_starts_in_priority_order():
    free = {"a": Profile.constant(4), "b": Profile.constant(2)}
    apps = [
        Application(
            id="second",
            order=7,
            clusters=("a",),
            state=AppState.WAITING,
            request=Request(nodes={"a": 2}, duration=10),
        ),
        Application(
            id="first",
            order=3,
            clusters=("a", "b"),
            state=AppState.REQUEST_SENT,
            request=Request(nodes={"a": 2, "b": 2}, duration=100),
        ),
        Application(
            id="third",
            order=9,
            clusters=("b",),
            state=AppState.WAITING,
            request=Request(nodes={"b": 1}, duration=10),
        ),
    ]
    result = Policy().plan(free, apps, 50)
    assert result.to_start == ("first", "second")
    assert result.outcomes["third"].estimated_start == 150
    assert result.outcomes["third"].state is AppState.WAITING
    assert result.changed == ("third",)


# -- (d) ghosts ---------------------------------------------------------------------------------


@st.composite
def ghost_scenarios(draw):
    n = draw(st.integers(1, 16))
    m = draw(st.integers(1, 16))
    capacity = {"g": n, "h": m}
    now = draw(st.sampled_from([400, 1_700_000_000]))
    ran = draw(st.integers(0, 100))
    since_done = draw(st.integers(0, ran))
    fair_start = draw(st.integers(since_done + 1, since_done + 60))
    duration = draw(st.integers(ran + 1, ran + 400))
    k = draw(st.integers(1, n))
    ghost = Application(
        id="ghost",
        order=draw(st.integers(0, 1000)),
        clusters=("g", "h"),
        state=draw(st.sampled_from([AppState.FINISH_SENT, AppState.GHOST])),
        request=Request(nodes={"g": k}, duration=duration),
        started_at=now - ran,
        done_at=now - since_done,
    )
    count = draw(st.integers(1, 8))
    orders = draw(
        st.lists(
            st.integers(0, 1000).filter(lambda o: o != ghost.order),
            min_size=count,
            max_size=count,
            unique=True,
        )
    )
    apps = [ghost]
    for i, order in enumerate(orders):
        clusters = tuple(draw(st.lists(st.sampled_from(["g", "h"]), min_size=1, unique=True)))
        apps.append(
            Application(
                id=f"app{i}",
                order=order,
                clusters=clusters,
                state=draw(st.sampled_from(WITH_REQUEST)),
                request=draw_request(draw, clusters, capacity),
            )
        )
    free = {"g": Profile.constant(n), "h": Profile.constant(m)}
    return Scenario(free, apps, now, fair_start, capacity), k


@SETTINGS
@given(built=ghost_scenarios())
def test_ghost_hosts_are_not_given_away_before_it_expires(built):
    sc, k = built
    ghost = sc.apps[0]
    expires = min(ghost.done_at + sc.fair_start, ghost.started_at + ghost.request.duration)
    assert expires > sc.now
    n = sc.capacity["g"]
    result = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    assert result.outcomes["ghost"].state is AppState.GHOST
    assert result.outcomes["ghost"].hold_until == expires
    assert "ghost" not in result.changed
    assert "ghost" not in result.to_start
    assert result.free["g"].values_at(np.arange(sc.now, expires)).max() == n - k
    assert result.free["g"].value_at(expires) == n
    end = horizon(sc.free, sc.apps, sc.now, sc.fair_start)
    used = np.zeros(end - sc.now, dtype=np.int64)
    for app in sc.apps[1:]:
        start = result.outcomes[app.id].estimated_start
        if start is not None and "g" in app.request.nodes:
            used[start - sc.now : start - sc.now + app.request.duration] += app.request.nodes["g"]
    assert used[: expires - sc.now].max(initial=0) <= n - k
    assert used.max(initial=0) <= n
    # Once expired, the ghost is finished and its hosts are everyone's again.
    later = Policy(sc.config()).plan(sc.free, sc.apps, expires)
    assert later.outcomes["ghost"].state is AppState.FINISHED
    assert later.outcomes["ghost"].hold_until is None
    assert later.free["g"] == Profile.constant(n)
    assert later.expired == ()


def test_state_transitions_of_started_and_finished_applications():
    request = Request(nodes={"a": 2}, duration=100)
    apps = [
        Application(
            id="done",
            order=0,
            clusters=("a",),
            state=AppState.FINISH_SENT,
            request=request,
            started_at=0,
            done_at=40,
        ),
        Application(
            id="ghost",
            order=1,
            clusters=("a",),
            state=AppState.GHOST,
            request=request,
            started_at=0,
            done_at=20,
        ),
        Application(
            id="running",
            order=2,
            clusters=("a",),
            state=AppState.STARTED,
            request=request,
            started_at=0,
        ),
        Application(
            id="overdue",
            order=3,
            clusters=("a",),
            state=AppState.STARTED,
            request=Request(nodes={"a": 2}, duration=40),
            started_at=0,
        ),
    ]
    policy = Policy(PolicyConfig(fair_start=30))
    result = policy.plan({"a": Profile.constant(8)}, apps, 50)
    assert result.outcomes["done"].state is AppState.GHOST
    assert result.outcomes["done"].hold_until == 70
    assert result.outcomes["ghost"].state is AppState.FINISHED
    assert result.outcomes["running"].state is AppState.STARTED
    assert result.outcomes["running"].hold_until == 100
    assert result.outcomes["overdue"].state is AppState.STARTED
    assert result.expired == ("overdue",)
    assert result.free["a"].values_at(np.array([50, 69, 70, 99, 100])).tolist() == [4, 4, 6, 6, 8]
    # A ghost never outlives its allocation, whatever fair_start says.
    late_done = replace(apps[0], done_at=90)
    result = policy.plan({"a": Profile.constant(8)}, [late_done], 95)
    assert result.outcomes["done"].hold_until == 100
    result = policy.plan({"a": Profile.constant(8)}, [late_done], 100)
    assert result.outcomes["done"].state is AppState.FINISHED


# -- (e) order does not matter ----------------------------------------------------------------


@SETTINGS
@given(sc=scenarios(), seed=st.integers(0, 2**32 - 1), later=st.integers(0, 150))
def test_results_do_not_depend_on_input_order(sc, seed, later):
    rng = random.Random(seed)
    apps = sc.apps[:]
    rng.shuffle(apps)
    keys = list(sc.free)
    rng.shuffle(keys)
    free = {c: sc.free[c] for c in keys}
    end = horizon(sc.free, sc.apps, sc.now + later, sc.fair_start)

    def passes(table, profiles):
        policy = Policy(sc.config())
        first = policy.plan(profiles, table, sc.now)
        second = policy.plan(profiles, apply_states(table, first), sc.now + later)
        return [
            (
                summary(r),
                r.to_start,
                r.changed,
                r.expired,
                {a: view_values(r, a, end) for a in sorted(r._views)},
            )
            for r in (first, second)
        ]

    assert passes(apps, free) == passes(sc.apps, sc.free)


# -- (f) incremental == fresh ---------------------------------------------------------------------


def mutate(data, apps, free, now, capacity):
    """Between two passes: new subscribers, new requests, done, withdrawals, foreign load."""
    apps = list(apps)
    free = dict(free)
    names = list(free)
    for _ in range(data.draw(st.integers(0, 3))):
        kind = data.draw(st.sampled_from(["new", "request", "done", "withdraw", "foreign"]))
        placed = [i for i, a in enumerate(apps) if a.state in PLACED]
        started = [i for i, a in enumerate(apps) if a.state is AppState.STARTED]
        alive = [
            i for i, a in enumerate(apps) if a.state not in (AppState.FINISHED, AppState.CANCELLED)
        ]
        if kind == "new":
            clusters = tuple(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
            with_request = data.draw(st.booleans())
            apps.append(
                Application(
                    id=f"new{len(apps)}",
                    order=max(a.order for a in apps) + data.draw(st.integers(1, 3)),
                    clusters=clusters,
                    state=AppState.REQUEST_SENT if with_request else AppState.SUBMITTED,
                    request=draw_request(data.draw, clusters, capacity) if with_request else None,
                )
            )
        elif kind == "request" and placed:
            i = data.draw(st.sampled_from(placed))
            request = draw_request(data.draw, apps[i].clusters, capacity)
            apps[i] = replace(apps[i], state=AppState.REQUEST_SENT, request=request)
        elif kind == "done" and started:
            i = data.draw(st.sampled_from(started))
            done_at = data.draw(st.integers(apps[i].started_at, now))
            apps[i] = replace(apps[i], state=AppState.FINISH_SENT, done_at=done_at)
        elif kind == "withdraw" and alive:
            i = data.draw(st.sampled_from(alive))
            apps[i] = replace(apps[i], state=AppState.CANCELLED)
        elif kind == "foreign":
            c = data.draw(st.sampled_from(names))
            s = now + data.draw(st.integers(-50, 300))
            length = data.draw(st.none() | st.integers(1, 300))
            delta = data.draw(st.integers(-4, 4))
            free[c] = free[c].add(delta, s, None if length is None else s + length)
    return apps, free


@FEW
@given(sc=scenarios(), data=st.data())
def test_incremental_passes_equal_fresh_ones(sc, data):
    policy = Policy(sc.config())
    apps, free, now = list(sc.apps), dict(sc.free), sc.now
    previous: Plan | None = None
    previous_end = now
    for k in range(data.draw(st.integers(2, 5))):
        if previous is not None:
            apps = apply_states(apps, previous)
            now += data.draw(st.integers(0, 200))
            apps, free = mutate(data, apps, free, now, sc.capacity)
        result = policy.plan(free, apps, now)
        fresh = Policy(sc.config()).plan(free, apps, now)
        expected = reference(free, apps, now, sc.fair_start)
        assert_matches_reference(result, expected, apps)
        assert_matches_reference(fresh, expected, apps)
        assert summary(result) == summary(fresh)
        assert (result.to_start, result.expired) == (fresh.to_start, fresh.expired)
        # Which views changed: compared from ``now`` on with the previous pass's views.
        end = max(expected.end, previous_end)
        view_changed = {}
        for app_id in expected.views:
            if previous is None or app_id not in previous._views:
                view_changed[app_id] = True
            else:
                view_changed[app_id] = view_values(previous, app_id, end, now) != view_values(
                    result, app_id, end
                )
        assert {a: result.outcomes[a].view_changed for a in expected.views} == view_changed, k
        assert result.changed == tuple(
            a for a in expected.views if view_changed[a] and a not in result.to_start
        )
        assert fresh.changed == tuple(a for a in expected.views if a not in fresh.to_start)
        previous, previous_end = result, expected.end


# -- (g) requests larger than the platform ------------------------------------------------------


@SETTINGS
@given(sc=scenarios(unknown=False), data=st.data())
def test_request_larger_than_the_platform_never_starts_and_reserves_nothing(sc, data):
    names = list(sc.free)
    clusters = tuple(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    too_big = data.draw(st.sampled_from(clusters))
    nodes = {c: data.draw(st.integers(1, sc.capacity[c])) for c in clusters}
    nodes[too_big] = sc.capacity[too_big] + data.draw(st.integers(1, 5))
    orders = {a.order for a in sc.apps}
    order = data.draw(st.integers(0, 1100).filter(lambda o: o not in orders))
    huge = Application(
        id="huge",
        order=order,
        clusters=clusters,
        state=data.draw(st.sampled_from(WITH_REQUEST)),
        request=Request(nodes=nodes, duration=data.draw(st.integers(1, 300))),
    )
    without = Policy(sc.config()).plan(sc.free, sc.apps, sc.now)
    with_it = Policy(sc.config()).plan(sc.free, [*sc.apps, huge], sc.now)
    outcome = with_it.outcomes["huge"]
    assert outcome.estimated_start is None
    assert outcome.state is not AppState.STARTED
    assert "huge" not in with_it.to_start
    assert "huge" in with_it.changed
    # Everybody else is placed exactly as if it did not exist.
    assert {k: v for k, v in summary(with_it).items() if k != "huge"} == summary(without)
    assert with_it.to_start == without.to_start
    assert tuple(a for a in with_it.changed if a != "huge") == without.changed
    end = horizon(sc.free, [*sc.apps, huge], sc.now, sc.fair_start)
    for app_id in without._views:
        assert view_values(with_it, app_id, end) == view_values(without, app_id, end)


def test_request_on_a_cluster_the_platform_lacks_never_starts():
    free = {"a": Profile.constant(4)}
    apps = [
        Application(
            id="lost",
            order=0,
            clusters=("a", "gone"),
            state=AppState.WAITING,
            request=Request(nodes={"a": 1, "gone": 1}, duration=10),
        ),
        Application(
            id="next",
            order=1,
            clusters=("a",),
            state=AppState.WAITING,
            request=Request(nodes={"a": 4}, duration=10),
        ),
    ]
    result = Policy().plan(free, apps, 0)
    assert result.outcomes["lost"].estimated_start is None
    assert list(result.view("lost")) == ["a"]
    assert result.to_start == ("next",)


# -- (h) no spurious notifications --------------------------------------------------------------


@SETTINGS
@given(sc=scenarios(), data=st.data())
def test_no_change_when_time_passes_as_predicted(sc, data):
    """Re-running on the same inputs (states persisted) at a later ``now`` that reaches no
    application's estimated start: foreign jobs and ghosts end as predicted, nothing changes.

    Only an application started by the previous pass may change views: its hosts, reserved below
    the applications before it, are now held for everyone (a backfilled start is news to them).
    """
    policy = Policy(sc.config())
    result = policy.plan(sc.free, sc.apps, sc.now)
    apps, now = sc.apps, sc.now
    order = {app.id: app.order for app in sc.apps}
    for _ in range(data.draw(st.integers(1, 3))):
        upcoming = [
            o.estimated_start
            for o in result.outcomes.values()
            if o.estimated_start is not None and o.estimated_start > now
        ]
        apps = apply_states(apps, result)
        previous = result
        now = data.draw(st.integers(now, min(upcoming) if upcoming else now + 1000))
        result = policy.plan(sc.free, apps, now)
        last_started = max((order[a] for a in previous.to_start), default=-1)
        assert all(order[a] < last_started for a in result.changed)
        if not previous.to_start:
            # "time passing a breakpoint neither recomputes nor notifies anyone"
            assert result.recomputed == 0
        for app_id in result._views:
            if order[app_id] > last_started:
                assert not result.outcomes[app_id].view_changed
            assert (
                result.outcomes[app_id].estimated_start == previous.outcomes[app_id].estimated_start
            )


@SETTINGS
@given(sc=scenarios(), data=st.data())
def test_no_change_when_rerun_without_starts(sc, data):
    """(h) with nothing started: any later ``now`` up to the next estimated start changes nothing,
    however many foreign jobs, allocations and ghosts end on the way."""
    sc.apps = [
        replace(a, state=AppState.SUBMITTED, request=None) if a.state in PLACED else a
        for a in sc.apps
    ]
    policy = Policy(sc.config())
    result = policy.plan(sc.free, sc.apps, sc.now)
    assert result.to_start == ()
    apps = apply_states(sc.apps, result)
    later = sc.now + data.draw(st.integers(0, 1000))
    again = policy.plan(sc.free, apps, later)
    assert again.changed == ()
    assert again.to_start == ()
    assert not any(o.view_changed for o in again.outcomes.values())


def test_foreign_job_ending_as_predicted_changes_nothing():
    free = {
        "a": Profile.constant(8).reserve(6, 0, 100),
        "b": Profile.constant(4).reserve(4, 0, 1000),
    }
    apps = [
        Application(
            id="big",
            order=1,
            clusters=("a", "b"),
            state=AppState.WAITING,
            request=Request(nodes={"a": 8, "b": 1}, duration=50),
        ),
        Application(
            id="small",
            order=0,
            clusters=("a", "b"),
            state=AppState.WAITING,
            request=Request(nodes={"a": 2}, duration=500),
        ),
        Application(id="idle", order=2, clusters=("a", "b")),
    ]
    policy = Policy(PolicyConfig(fair_start=5))
    first = policy.plan(free, apps, 10)
    assert first.to_start == ("small",)
    assert first.outcomes["big"].estimated_start == 1000
    assert first.changed == ("big", "idle")
    apps = apply_states(apps, first)
    # The foreign job on "a" ends at 100 as predicted; the bridge reads the new free hosts.
    for now, profile in ((50, free["a"]), (150, Profile.constant(8)), (400, free["a"])):
        result = policy.plan({"a": profile, "b": free["b"]}, apps, now)
        assert result.changed == ()
        assert result.outcomes["big"].estimated_start == 1000
    # A real change is notified: another foreign job comes.
    busy = Profile.constant(8).reserve(1, 2000, 2100)
    result = policy.plan({"a": busy, "b": free["b"]}, apps, 500)
    assert result.changed == ("big", "idle")
    assert result.outcomes["big"].estimated_start == 1000


def test_time_passing_does_not_recompute_with_a_running_application():
    """The module promises: an application is recomputed only when the profiles of the clusters
    it asks for, or its request, differ; time passing neither recomputes nor notifies anyone."""
    free = {"a": Profile.constant(8)}
    apps = [
        Application(
            id="running",
            order=0,
            clusters=("a",),
            state=AppState.STARTED,
            request=Request(nodes={"a": 2}, duration=1000),
            started_at=0,
        ),
        Application(
            id="waiting",
            order=1,
            clusters=("a",),
            state=AppState.WAITING,
            request=Request(nodes={"a": 8}, duration=10),
        ),
    ]
    policy = Policy()
    assert policy.plan(free, apps, 10).recomputed == 1
    assert policy.plan(free, apps, 10).recomputed == 0
    later = policy.plan(free, apps, 11)
    assert later.changed == ()
    assert later.outcomes["waiting"].estimated_start == 1000
    assert later.recomputed == 0


# -- the paper's fairness scenario (Fig. 5) ------------------------------------------------------


def fairness_apps():
    """App0 runs on all of cluster "c"; App1 (earlier) waits on "d", App2 wants 4 hosts of "c"."""
    return [
        Application(
            id="app0",
            order=0,
            clusters=("c", "d"),
            state=AppState.STARTED,
            request=Request(nodes={"c": 8}, duration=1000),
            started_at=0,
        ),
        Application(
            id="app1",
            order=1,
            clusters=("c", "d"),
            state=AppState.WAITING,
            request=Request(nodes={"d": 8}, duration=100),
        ),
        Application(
            id="app2",
            order=2,
            clusters=("c", "d"),
            state=AppState.WAITING,
            request=Request(nodes={"c": 4}, duration=50),
        ),
    ]


FAIRNESS_FREE = {"c": Profile.constant(8), "d": Profile.constant(8).reserve(8, 0, 500)}


def test_fairness_without_fair_start_lets_the_quick_selector_win():
    policy = Policy(PolicyConfig(fair_start=0))
    apps = fairness_apps()
    first = policy.plan(FAIRNESS_FREE, apps, 90)
    assert first.to_start == ()
    assert first.outcomes["app2"].estimated_start == 1000
    apps = apply_states(apps, first)
    apps[0] = replace(apps[0], state=AppState.FINISH_SENT, done_at=100)
    result = policy.plan(FAIRNESS_FREE, apps, 100)
    assert result.outcomes["app0"].state is AppState.FINISHED
    # The freed hosts go to App2 at once: App1 never gets the chance to ask for them.
    assert result.to_start == ("app2",)


def test_fairness_ghost_keeps_freed_hosts_for_the_earlier_application():
    policy = Policy(PolicyConfig(fair_start=30))
    apps = fairness_apps()
    first = policy.plan(FAIRNESS_FREE, apps, 90)
    assert first.to_start == ()
    apps = apply_states(apps, first)
    # App0 sends done at 100: its ghost holds cluster "c" until 130.
    apps[0] = replace(apps[0], state=AppState.FINISH_SENT, done_at=100)
    result = policy.plan(FAIRNESS_FREE, apps, 100)
    assert result.outcomes["app0"].state is AppState.GHOST
    assert result.outcomes["app0"].hold_until == 130
    assert result.to_start == ()
    assert result.outcomes["app2"].estimated_start == 130
    assert set(result.changed) == {"app1", "app2"}
    assert result.view("app1")["c"].values_at(np.array([100, 129, 130])).tolist() == [0, 0, 8]
    apps = apply_states(apps, result)
    # App1's slow selector answers within fair_start: it now wants the freed cluster.
    apps[1] = replace(
        apps[1], state=AppState.REQUEST_SENT, request=Request(nodes={"c": 8}, duration=60)
    )
    result = policy.plan(FAIRNESS_FREE, apps, 120)
    assert result.to_start == ()
    assert result.outcomes["app1"].estimated_start == 130
    assert result.outcomes["app2"].estimated_start == 190
    assert result.changed == ("app2",)
    apps = apply_states(apps, result)
    result = policy.plan(FAIRNESS_FREE, apps, 130)
    assert result.outcomes["app0"].state is AppState.FINISHED
    assert result.to_start == ("app1",)
    assert result.outcomes["app2"].estimated_start == 190
    assert result.changed == ()


# -- input checks -------------------------------------------------------------------------------


def test_duplicate_ids_or_orders_are_refused():
    request = Request(nodes={"a": 1}, duration=10)
    a = Application(id="x", order=1, clusters=("a",), state=AppState.WAITING, request=request)
    with pytest.raises(ValueError, match="unique"):
        Policy().plan({"a": Profile.constant(2)}, [a, replace(a, order=2)], 0)
    with pytest.raises(ValueError, match="unique"):
        Policy().plan({"a": Profile.constant(2)}, [a, replace(a, id="y")], 0)


def test_over_committed_free_hosts_count_as_none():
    free = {"a": Profile.constant(2).add(-3, 0, 50)}
    apps = [
        Application(
            id="run",
            order=0,
            clusters=("a",),
            state=AppState.STARTED,
            request=Request(nodes={"a": 2}, duration=100),
            started_at=0,
        ),
        Application(
            id="wait",
            order=1,
            clusters=("a",),
            state=AppState.WAITING,
            request=Request(nodes={"a": 2}, duration=10),
        ),
    ]
    result = Policy().plan(free, apps, 10)
    assert result.free["a"].values_at(np.array([10, 49, 50, 99, 100])).tolist() == [0, 0, 0, 0, 2]
    assert result.outcomes["wait"].estimated_start == 100


def test_application_table_refuses_impossible_rows():
    request = Request(nodes={"a": 1}, duration=10)
    with pytest.raises(ValueError, match="no request yet"):
        Application(id="x", order=0, clusters=("a",), state=AppState.SUBMITTED, request=request)
    with pytest.raises(ValueError, match="has not sent done"):
        Application(
            id="x",
            order=0,
            clusters=("a",),
            state=AppState.STARTED,
            request=request,
            started_at=0,
            done_at=5,
        )
    with pytest.raises(ValueError, match="outside the view"):
        Application(id="x", order=0, clusters=("b",), state=AppState.WAITING, request=request)


def test_an_application_not_before_its_next_attempt_leaves_the_hosts_to_those_behind_it():
    def waiting(name, order, hosts, **fields):
        request = Request(nodes={"a": hosts}, duration=100)
        return Application(
            id=name,
            order=order,
            clusters=("a",),
            state=AppState.WAITING,
            request=request,
            **fields,
        )

    free = {"a": Profile.constant(4)}
    policy = Policy()
    failing, behind = waiting("failing", 1, 4, not_before=500), waiting("behind", 2, 4)
    result = policy.plan(free, [failing, behind], 10)
    assert result.outcomes["failing"].estimated_start == 500
    assert result.outcomes["behind"].estimated_start == 10  # done by 110, before 500
    assert result.to_start == ("behind",)
    # Once its attempt is due again it goes first, as its subscription order says.
    again = policy.plan(free, [replace(failing, not_before=None), behind], 10)
    assert again.outcomes["failing"].estimated_start == 10
    assert again.outcomes["behind"].estimated_start == 110
    assert again.recomputed == 2
