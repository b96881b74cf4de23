"""A long-lived policy engine never answers differently from a fresh one.

The engine keeps a memo of its previous pass (per application, and per position in priority
order: a pass takes over the leading applications that are as they were). Its results must not
depend on it. One engine is driven through a random sequence of table edits, as a bridge's life
makes them: requests appended, a request changed in the middle, applications withdrawn, started,
done, time moving forward, a cluster's free hosts changing, owners' caps changing, a rejected
table, passes re-run on the same inputs. After every pass its plan is compared with:

- a fresh engine's (no memo at all): every outcome but "has the view changed", the applications
  to start and to kill, what is left and free from ``now`` on, every view from ``now`` on;
- a fresh engine first given the same previous pass: which views changed (``changed`` and each
  decision's ``view_changed`` are relative to the previous pass), and the views' changes
  recomputed here from the two plans' views.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Plan, Policy, PolicyConfig
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import PLACED, AppState
from tests.profiles import fewer

CAPACITY = {"a": 8, "b": 4, "c": 6}
OWNERS = ("alice", "bob", None)
FAIR_START = 20
SETTINGS = settings(max_examples=fewer(100))


def validated(app: Application, **changes: object) -> Application:
    """A validated copy of ``app`` with some fields changed."""
    return Application.model_validate({**dict(app), **changes})


@st.composite
def requests(draw, clusters: tuple[str, ...]) -> Request:
    chosen = draw(st.lists(st.sampled_from(clusters), min_size=1, unique=True))
    # Now and then one host more than the cluster has: such a request never fits.
    nodes = {
        c: draw(st.integers(1, CAPACITY[c] + draw(st.sampled_from((0, 0, 0, 1))))) for c in chosen
    }
    return Request(nodes=nodes, duration=draw(st.integers(1, 300)))


@st.composite
def applications(draw, app_id: str, order: int, now: int) -> Application:
    clusters = tuple(draw(st.lists(st.sampled_from(sorted(CAPACITY)), min_size=1, unique=True)))
    state = draw(st.sampled_from((AppState.SUBMITTED, AppState.REQUEST_SENT, AppState.WAITING)))
    request = None if state is AppState.SUBMITTED else draw(requests(clusters))
    not_before = draw(st.none() | st.integers(now - 50, now + 400))
    return Application(
        id=app_id,
        owner=draw(st.sampled_from(OWNERS)),
        order=order,
        clusters=clusters,
        state=state,
        request=request,
        not_before=not_before,
    )


@st.composite
def foreign(draw, profile: Profile, now: int) -> Profile:
    """Some foreign load starting or ending around ``now`` (over-commitment included)."""
    start = now + draw(st.integers(-100, 400))
    length = draw(st.none() | st.integers(1, 300))
    delta = draw(st.integers(-3, 3))
    return profile.add(delta, start, None if length is None else start + length)


class Bridge:
    """The inputs of a pass, edited between passes the way a bridge's life edits them."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.free = {name: Profile.constant(hosts) for name, hosts in CAPACITY.items()}
        self.apps: list[Application] = []
        self.caps: dict[str, int] = {}
        self.count = 0

    def edit(self, data: st.DataObject, last: Plan | None) -> None:
        kind = data.draw(
            st.sampled_from(
                (
                    "append",
                    "append",
                    "request",
                    "withdraw",
                    "start",
                    "done",
                    "time",
                    "time",
                    "free",
                    "caps",
                    "caps",
                    "persist",
                    "same",
                    "not_before",
                )
            )
        )
        placed = [i for i, app in enumerate(self.apps) if app.state in PLACED]
        started = [i for i, app in enumerate(self.apps) if app.state is AppState.STARTED]
        if kind == "append" or not self.apps:
            order = (self.apps[-1].order if self.apps else 0) + data.draw(st.integers(1, 3))
            self.apps.append(data.draw(applications(f"app{self.count}", order, self.now)))
            self.count += 1
        elif kind == "request" and placed:
            i = data.draw(st.sampled_from(placed))
            request = data.draw(requests(self.apps[i].clusters))
            self.apps[i] = validated(self.apps[i], state=AppState.REQUEST_SENT, request=request)
        elif kind == "withdraw":
            del self.apps[data.draw(st.integers(0, len(self.apps) - 1))]
        elif kind == "start" and placed:
            # Started outside the policy's advice (say by an administrator), now or before.
            i = data.draw(st.sampled_from(placed))
            if self.apps[i].request is not None:
                at = self.now - data.draw(st.integers(0, 100))
                self.apps[i] = validated(self.apps[i], state=AppState.STARTED, started_at=at)
        elif kind == "done" and started:
            i = data.draw(st.sampled_from(started))
            done_at = data.draw(st.integers(self.apps[i].started_at or 0, self.now))
            self.apps[i] = validated(self.apps[i], state=AppState.FINISH_SENT, done_at=done_at)
        elif kind == "time":
            # Often just to, or just past, an estimated start of the last pass.
            starts = sorted(
                {
                    o.estimated_start
                    for o in (last.outcomes.values() if last is not None else ())
                    if o.estimated_start is not None and o.estimated_start > self.now
                }
            )
            steps = [start - self.now + extra for start in starts[:3] for extra in (0, 1)]
            self.now += data.draw(st.sampled_from([1, 10, 60, 200, *steps]))
        elif kind == "free":
            name = data.draw(st.sampled_from(sorted(CAPACITY)))
            self.free[name] = data.draw(foreign(self.free[name], self.now))
        elif kind == "caps":
            owner = data.draw(st.sampled_from(OWNERS[:2]))
            cap = data.draw(st.none() | st.integers(0, 6))
            self.caps.pop(owner, None)
            if cap is not None:
                self.caps[owner] = cap
        elif kind == "persist" and last is not None:
            self.apps = persisted(self.apps, last)
        elif kind == "not_before" and placed:
            i = data.draw(st.sampled_from(placed))
            after = data.draw(st.none() | st.integers(self.now, self.now + 400))
            self.apps[i] = validated(self.apps[i], not_before=after)
        # "same": the next pass runs on the very same inputs

    def plan(self, policy: Policy) -> Plan:
        return policy.plan(self.free, self.apps, self.now, self.caps)


def persisted(apps: list[Application], plan: Plan) -> list[Application]:
    """What the bridge does after a pass: persist states, start the started, drop the ended."""
    table = []
    for app in apps:
        outcome = plan.outcomes.get(app.id)
        if outcome is None:
            table.append(app)
        elif app.id in plan.expired or outcome.state is AppState.FINISHED:
            continue
        elif app.id in plan.to_start:
            table.append(validated(app, state=AppState.STARTED, started_at=plan.now))
        elif outcome.state is not app.state:
            table.append(validated(app, state=outcome.state))
        else:
            table.append(app)
    return table


def from_now(profiles: dict[str, Profile], now: int) -> dict[str, Profile]:
    return {name: profile.truncated(now) for name, profile in profiles.items()}


def views(plan: Plan) -> dict[str, dict[str, Profile]]:
    return {app_id: from_now(plan.view(app_id), plan.now) for app_id in plan._views}


def assert_same_plan(kept: Plan, fresh: Plan) -> None:
    """Equal but for which views changed (relative to each engine's previous pass)."""
    assert list(kept.outcomes) == list(fresh.outcomes)
    for app_id, decision in kept.outcomes.items():
        other = fresh.outcomes[app_id]
        assert (decision.state, decision.estimated_start, decision.hold_until) == (
            other.state,
            other.estimated_start,
            other.hold_until,
        ), app_id
    assert kept.to_start == fresh.to_start
    assert kept.expired == fresh.expired
    assert from_now(kept.left, kept.now) == from_now(fresh.left, fresh.now)
    assert from_now(kept.free, kept.now) == from_now(fresh.free, fresh.now)
    assert views(kept) == views(fresh)


def view_changes(previous: Plan | None, plan: Plan) -> dict[str, bool]:
    """Per placed application, whether its view differs from ``now`` on from the previous
    pass's (any view is news to an application the previous pass did not place)."""
    changed = {}
    for app_id, (seen, state) in plan._views.items():
        if previous is None or app_id not in previous._views:
            changed[app_id] = True
            continue
        before = previous._views[app_id][1]
        changed[app_id] = any(
            before[i].truncated(plan.now) != state[i].truncated(plan.now) for i in seen
        )
    return changed


@SETTINGS
@given(
    now=st.sampled_from((1_000, 1_700_000_000)),
    steps=st.integers(1, 25),
    data=st.data(),
)
def test_a_long_lived_engine_plans_as_a_fresh_one(now, steps, data):
    config = PolicyConfig(fair_start=FAIR_START)
    kept = Policy(config)
    bridge = Bridge(now)
    for _ in range(data.draw(st.integers(0, 6))):
        bridge.edit(data, None)
    last: Plan | None = None
    inputs: tuple | None = None  # the previous pass's
    for _ in range(steps):
        if bridge.apps and data.draw(st.integers(0, 9)) == 0:
            # A table the engine refuses leaves it as it was.
            duplicate = [*bridge.apps, data.draw(st.sampled_from(bridge.apps))]
            with pytest.raises(ValueError, match="must be unique"):
                kept.plan(bridge.free, duplicate, bridge.now, bridge.caps)
        plan = bridge.plan(kept)
        assert_same_plan(plan, bridge.plan(Policy(config)))
        twin = Policy(config)
        if inputs is not None:
            twin.plan(*inputs)
        again = bridge.plan(twin)
        assert_same_plan(plan, again)
        assert plan.changed == again.changed
        assert [d.view_changed for d in plan.outcomes.values()] == [
            d.view_changed for d in again.outcomes.values()
        ]
        changes = view_changes(last, plan)
        assert {a: plan.outcomes[a].view_changed for a in changes} == changes
        assert plan.changed == tuple(
            a for a, changed in changes.items() if changed and a not in plan.to_start
        )
        inputs = (dict(bridge.free), list(bridge.apps), bridge.now, dict(bridge.caps))
        last = plan
        bridge.edit(data, plan)


def test_an_engine_takes_over_the_unchanged_queue():
    """Appending one request after 200 costs one search; re-running costs none; a change in
    the middle costs the applications from there on that its reservation moves."""
    free = {name: Profile.constant(hosts) for name, hosts in CAPACITY.items()}
    apps = [
        Application(
            id=f"app{i}",
            order=i,
            clusters=("a", "b"),
            state=AppState.WAITING,
            request=Request(nodes={"a": 1 + i % 3}, duration=100 + i),
        )
        for i in range(200)
    ]
    policy = Policy(PolicyConfig())
    first = policy.plan(free, apps, 1_000)
    assert first.recomputed == 200
    assert policy.plan(free, apps, 1_000).recomputed == 0
    newcomer = Application(
        id="new",
        order=500,
        clusters=("a",),
        state=AppState.REQUEST_SENT,
        request=Request(nodes={"a": 8}, duration=50),
    )
    appended = policy.plan(free, [*apps, newcomer], 1_000)
    assert appended.recomputed == 1
    assert appended.changed == ("new",)
    assert appended.outcomes["new"].state is AppState.WAITING
    assert appended.view("app3") == first.view("app3")
    persisted = [*apps, newcomer.model_copy(update={"state": AppState.WAITING})]
    assert policy.plan(free, persisted, 1_000).recomputed == 0
    # The 100th request changes: those after it whose reservation it moves are searched again.
    middle = apps[100].model_copy(update={"request": Request(nodes={"a": 8}, duration=10)})
    changed = policy.plan(free, [*apps[:100], middle, *apps[101:]], 1_000)
    assert 1 <= changed.recomputed <= 101
    assert changed.changed[0] == "app101"  # its own view is what was left before it
