"""The policy keeps each owner's cap on hosts held at once (``[limits] held_hosts``): an
application whose start would pass it starts later, when the owner's others leave room.

The property is checked by running the policy as the bridge does, pass after pass over a random
sequence of requests, starts and dones: at every pass and every instant, what an owner holds
(started applications and ghosts) plus what the pass starts never passes the owner's cap; and
the owners without a cap are placed as if no cap existed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coorm_bridge.core.model import Request
from coorm_bridge.core.policy import Application, Policy, PolicyConfig
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import HOLDING, AppState
from tests.profiles import fewer

NOW = 1_000_000
CLUSTERS = {"a": 8, "b": 4}
FAIR_START = 5


def app(i: int, owner: str, nodes: dict[str, int], duration: int, **more) -> Application:
    return Application.model_validate(
        {
            "id": f"s{i}",
            "owner": owner,
            "order": i,
            "clusters": tuple(CLUSTERS),
            "state": AppState.WAITING,
            "request": Request(nodes=nodes, duration=duration),
            **more,
        }
    )


def free() -> dict[str, Profile]:
    return {name: Profile.constant(hosts) for name, hosts in CLUSTERS.items()}


def test_the_third_session_of_a_capped_owner_waits_for_the_first_to_end():
    apps = [app(i, "alice", {"a": 4}, 600) for i in range(3)]
    apps.append(app(3, "bob", {"b": 1}, 600))
    plan = Policy(PolicyConfig(fair_start=FAIR_START)).plan(free(), apps, NOW, {"alice": 8})
    assert plan.to_start == ("s0", "s1", "s3")  # bob's starts; alice's third would pass 8
    assert plan.outcomes["s2"].estimated_start == NOW + 600  # when her first ones end
    # What a new subscriber sees: alice's third does not sit on hosts now.
    assert plan.left["a"].value_at(NOW) == 0
    assert plan.left["a"].value_at(NOW + 600) == 4


def test_held_hosts_and_ghosts_count_against_the_cap():
    started = app(0, "alice", {"a": 6}, 600, state=AppState.STARTED, started_at=NOW - 100)
    ghost = app(
        1,
        "alice",
        {"b": 2},
        600,
        state=AppState.GHOST,
        started_at=NOW - 100,
        done_at=NOW - 1,
    )
    waiting = app(2, "alice", {"a": 1}, 60)
    plan = Policy(PolicyConfig(fair_start=FAIR_START)).plan(
        free(), [started, ghost, waiting], NOW, {"alice": 8}
    )
    assert plan.to_start == ()
    assert plan.outcomes["s2"].estimated_start == NOW - 1 + FAIR_START  # the ghost's end


def test_without_caps_the_plan_is_unchanged():
    apps = [app(i, "alice", {"a": 4}, 600) for i in range(3)]
    plain = Policy().plan(free(), apps, NOW)
    capped = Policy().plan(free(), apps, NOW, {"bob": 1})  # a cap of someone else's
    assert plain.outcomes == capped.outcomes
    assert plain.to_start == capped.to_start == ("s0", "s1")


@st.composite
def steps(draw):
    """A sequence of passes: before each, some new requests (owner, clusters, duration), and
    the time moving on."""
    count = draw(st.integers(1, 8))
    result = []
    for _ in range(count):
        news = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["alice", "bob", "carol"]),
                    st.dictionaries(
                        st.sampled_from(sorted(CLUSTERS)), st.integers(1, 4), min_size=1
                    ),
                    st.integers(10, 400),
                ),
                max_size=4,
            )
        )
        result.append((news, draw(st.integers(0, 300)), draw(st.booleans())))
    return result


def held_at(apps: list[Application], owner: str, t: int) -> int:
    return sum(
        a.request.hosts
        for a in apps
        if a.owner == owner
        and a.state in HOLDING
        and a.started_at is not None
        and a.request is not None
        and a.started_at <= t < a.hold_end(FAIR_START)
    )


@settings(max_examples=fewer(80), deadline=None)
@given(steps(), st.integers(1, 8), st.integers(4, 12))
def test_an_owners_held_hosts_never_pass_the_cap(sequence, alice_cap, bob_cap):
    caps = {"alice": alice_cap, "bob": bob_cap}  # carol has none
    policy = Policy(PolicyConfig(fair_start=FAIR_START))
    apps: dict[str, Application] = {}
    now, order = NOW, 0
    for news, wait, finish_one in sequence:
        for owner, nodes, duration in news:
            if sum(nodes.values()) > caps.get(owner, 10**9):
                continue  # refused at request time: never placed
            apps[f"s{order}"] = app(order, owner, nodes, duration)
            order += 1
        if finish_one:
            started = [a for a in apps.values() if a.state is AppState.STARTED]
            if started:
                apps[started[0].id] = Application.model_validate(
                    {**dict(started[0]), "state": AppState.FINISH_SENT, "done_at": now}
                )
        plan = policy.plan(free(), list(apps.values()), now, caps)
        for app_id in plan.expired:  # the bridge kills them
            del apps[app_id]
        for app_id, outcome in plan.outcomes.items():
            if app_id not in apps:
                continue
            old = apps[app_id]
            fields = {**dict(old), "state": outcome.state}
            if app_id in plan.to_start:
                fields["started_at"] = now
            if outcome.state in (AppState.FINISHED, AppState.CANCELLED):
                del apps[app_id]
                continue
            apps[app_id] = Application.model_validate(fields)
        live = list(apps.values())
        for owner, cap in caps.items():
            for t in {now, *(a.hold_end(FAIR_START) for a in live if a.state in HOLDING)}:
                assert held_at(live, owner, t) <= cap
        now += wait
