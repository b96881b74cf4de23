"""Validation rules of the data model (paper §III-B)."""

from __future__ import annotations

import contextlib
import json
import math
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from coorm_bridge.core.messages import (
    CAP,
    Allocation,
    Change,
    ChangeEvent,
    ChangeKind,
    EndedEvent,
    Event,
    KilledEvent,
    StartEvent,
    View,
)
from coorm_bridge.core.model import ClusterInfo, Link, Request, Submission
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import AppState

SETTINGS = settings()  # the profile's (tests/profiles.py)
EVENTS = TypeAdapter(Event)


def error_locations(caught: pytest.ExceptionInfo[ValidationError]) -> list[tuple]:
    return [tuple(error["loc"]) for error in caught.value.errors()]


def refused(field: str, build) -> ValidationError:
    """``build()`` raises a ValidationError whose message and location name ``field``."""
    with pytest.raises(ValidationError) as caught:
        build()
    assert any(loc and loc[0] == field for loc in error_locations(caught)), error_locations(caught)
    assert field in str(caught.value)
    return caught.value


# -- Request ------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [-1, -5, 1.5, "2x", None, True])
def test_request_refuses_bad_host_counts(count):
    refused("nodes", lambda: Request(nodes={"a": count}, duration=10))


@pytest.mark.parametrize("duration", [0, -1, -3600])
def test_request_refuses_non_positive_durations(duration):
    error = refused("duration", lambda: Request(nodes={"a": 1}, duration=duration))
    assert "greater than 0" in str(error)


@pytest.mark.parametrize("duration", [1.0, 10.5, math.nan, math.inf, -math.inf, True, "10"])
def test_request_durations_are_strict_integers(duration):
    refused("duration", lambda: Request(nodes={"a": 1}, duration=duration))


@pytest.mark.parametrize("duration", ["10.0", "10.5", "NaN", "Infinity", "1e3", '"10"', "true"])
def test_request_durations_are_strict_integers_in_json(duration):
    text = f'{{"nodes": {{"a": 1}}, "duration": {duration}}}'
    refused("duration", lambda: Request.model_validate_json(text))


@pytest.mark.parametrize("nodes", [{}, {"a": 0}, {"a": 0, "b": 0}])
def test_request_refuses_empty_requests(nodes):
    error = refused("nodes", lambda: Request(nodes=nodes, duration=10))
    assert "no host" in str(error)


def test_request_drops_zero_counts_and_sorts_clusters():
    request = Request(nodes={"b": 2, "z": 0, "a": 1}, duration=10)
    assert request.nodes == {"a": 1, "b": 2}
    assert request.clusters == ("a", "b")
    other = Request(nodes={"a": 1, "b": 2}, duration=10)
    assert request == other
    assert hash(request) == hash(other)
    assert request != Request(nodes={"a": 1, "b": 2}, duration=11)
    assert request != Request(nodes={"a": 1, "b": 3}, duration=10)


def test_request_refuses_unknown_clusters_in_context():
    data = {"nodes": {"a": 1, "b": 2, "c": 0}, "duration": 10}
    error = refused("nodes", lambda: Request.model_validate(data, context={"clusters": ["a"]}))
    assert "unknown cluster(s) b" in str(error)
    # A dropped zero count may name any cluster; without a context any name is fine.
    assert Request.model_validate(data, context={"clusters": ["a", "b"]}).nodes == {"a": 1, "b": 2}
    assert Request.model_validate(data).nodes == {"a": 1, "b": 2}
    refused("nodes", lambda: Request.model_validate(data, context={"clusters": []}))


def test_request_refuses_bad_cluster_names_and_unknown_fields():
    refused("nodes", lambda: Request(nodes={"a b": 1}, duration=10))
    refused("nodes", lambda: Request(nodes={"-a": 1}, duration=10))
    refused("walltime", lambda: Request(nodes={"a": 1}, duration=10, walltime=5))


def test_request_is_frozen():
    request = Request(nodes={"a": 1}, duration=10)
    with pytest.raises(ValidationError):
        request.duration = 20


def test_request_nodes_cannot_be_changed_in_place():
    """A frozen, hashable value must not change under its hash. The policy's memo relies on it:
    it reuses the previous start when ``old.request == app.request``, which an in-place edit of
    the same Request object makes trivially true (see the report)."""
    request = Request(nodes={"a": 1}, duration=10)
    before = hash(request)
    with contextlib.suppress(TypeError):
        request.nodes["a"] = 7
    assert request == Request(nodes={"a": 1}, duration=10)
    assert hash(request) == before


@SETTINGS
@given(
    nodes=st.dictionaries(st.sampled_from(["a", "b", "c", "x1", "y.2"]), st.integers(-2, 5)),
    duration=st.integers(-5, 10**6),
)
def test_request_accepts_exactly_the_valid_ones(nodes, duration):
    valid = all(n >= 0 for n in nodes.values()) and any(nodes.values()) and duration > 0
    if not valid:
        with pytest.raises(ValidationError):
            Request(nodes=nodes, duration=duration)
        return
    request = Request(nodes=nodes, duration=duration)
    assert request.nodes == {c: n for c, n in sorted(nodes.items()) if n}
    assert Request.model_validate_json(request.model_dump_json()) == request


# -- CAP and View ---------------------------------------------------------------------------------


def test_cap_refuses_empty_and_non_increasing_steps():
    refused("steps", lambda: CAP(cluster="a", steps=[]))
    error = refused("steps", lambda: CAP(cluster="a", steps=[(5, 1), (5, 2)]))
    assert "strictly increase" in str(error)
    refused("steps", lambda: CAP(cluster="a", steps=[(5, 1), (7, 2), (6, 3)]))
    refused("steps", lambda: CAP(cluster="a", steps=[(0, -1)]))
    refused("steps", lambda: CAP(cluster="a", steps=[(-1, 1)]))
    refused("steps", lambda: CAP(cluster="a", steps=[(1.5, 1)]))
    assert CAP(cluster="a", steps=[(0, 1), (5, 1)]).profile() == Profile.constant(1)


@SETTINGS
@given(
    times=st.lists(st.integers(0, 100), min_size=1, max_size=6),
    values=st.lists(st.integers(0, 9), min_size=6, max_size=6),
)
def test_cap_accepts_exactly_increasing_times(times, values):
    steps = list(zip(times, values, strict=False))
    if all(a < b for a, b in pairwise(times)):
        cap = CAP(cluster="a", steps=steps)
        assert CAP.model_validate_json(cap.model_dump_json()) == cap
        p = cap.profile()
        for t, n in steps:
            assert p.value_at(t) == n
        assert p.value_at(times[0] - 1000) == values[0]
    else:
        refused("steps", lambda: CAP(cluster="a", steps=steps))


@SETTINGS
@given(
    changes=st.lists(
        st.tuples(st.integers(1, 5), st.integers(0, 300), st.integers(1, 300)), max_size=6
    ),
    origin=st.integers(0, 400),
)
def test_view_round_trips_profiles_from_origin(changes, origin):
    p = Profile.constant(5)
    for hosts, start, length in changes:
        if p.min_over(start, start + length) >= hosts:
            p = p.reserve(hosts, start, start + length)
    q = Profile.constant(3).reserve(2, origin, origin + 10)
    view = View.of({"a": p, "b": q}, origin)
    again = View.model_validate_json(view.model_dump_json())
    assert again == view
    assert again.as_profiles() == {"a": p.truncated(origin), "b": q.truncated(origin)}


def test_view_refuses_duplicate_clusters():
    cap = CAP(cluster="a", steps=[(0, 1)])
    with pytest.raises(ValidationError, match="a repeat"):
        View(profiles=[cap, CAP(cluster="a", steps=[(0, 2)])])
    with pytest.raises(ValidationError, match="; b repeat"):
        View.model_validate_json(
            '{"profiles": [{"cluster": "b", "steps": [[0, 1]]},'
            ' {"cluster": "a", "steps": [[0, 1]]}, {"cluster": "b", "steps": [[5, 1]]}]}'
        )
    assert View(profiles=[cap, CAP(cluster="b", steps=[(0, 2)])]).as_profiles() == {
        "a": Profile.constant(1),
        "b": Profile.constant(2),
    }


# -- ClusterInfo -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "a b", "a;b", "-a", ".a", "_a", "a\n", "a/b", "x" * 64, "a$", "é"]
)
def test_cluster_info_refuses_bad_names(name):
    refused("name", lambda: ClusterInfo(name=name, hosts=4))


@pytest.mark.parametrize("name", ["a", "A-1", "graphene_2.nancy", "0cluster", "x" * 63])
def test_cluster_info_accepts_good_names(name):
    assert ClusterInfo(name=name, hosts=4).name == name


@pytest.mark.parametrize("hosts", [0, -1, 1.5, True])
def test_cluster_info_refuses_non_positive_hosts(hosts):
    refused("hosts", lambda: ClusterInfo(name="a", hosts=hosts))


def test_cluster_info_says_how_to_submit_or_nothing():
    assert ClusterInfo(name="a", hosts=4).submission is None  # older adapters, older answers
    slurm = Submission(kind="slurm", partition="p1", cluster="c1", front_end="fe.example.org")
    info = ClusterInfo(name="a", hosts=4, submission=slurm)
    assert ClusterInfo.model_validate_json(info.model_dump_json()) == info
    assert json.loads(info.model_dump_json())["submission"] == {
        "kind": "slurm",
        "partition": "p1",
        "cluster": "c1",
        "front_end": "fe.example.org",
        "slurm_conf": None,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "pbs"), ("partition", "a b"), ("cluster", "-M"), ("front_end", ""), ("x", 1)],
)
def test_submission_refuses_what_a_launcher_could_not_use(field, value):
    refused(field, lambda: Submission.model_validate({"kind": "slurm", field: value}))


def test_submission_names_oar_properties_only_for_oar_and_only_when_set():
    oar = Submission(kind="oar", cluster="alpha", cluster_property="site", host_property="node")
    info = ClusterInfo(name="a", hosts=4, submission=oar)
    assert ClusterInfo.model_validate_json(info.model_dump_json()) == info
    assert json.loads(info.model_dump_json())["submission"]["host_property"] == "node"
    # unset, they are left out: a launcher that predates them still reads the answer
    plain = Submission(kind="oar", cluster="alpha")
    assert set(plain.model_dump()) == {"kind", "partition", "cluster", "front_end", "slurm_conf"}
    assert Submission.model_validate(plain.model_dump()) == plain
    for field in ("cluster_property", "host_property"):
        refused(field, lambda f=field: Submission.model_validate({"kind": "slurm", f: "x"}))
        refused(field, lambda f=field: Submission.model_validate({"kind": "oar", f: "a'b"}))


def test_submission_schema_describes_every_field_despite_its_serializer():
    for mode in ("validation", "serialization"):
        schema = Submission.model_json_schema(mode=mode)
        assert {"kind", "cluster_property", "host_property"} <= set(schema["properties"]), mode


# -- Change --------------------------------------------------------------------------------------


def test_change_carries_a_profile_exactly_for_availability():
    cap = CAP(cluster="a", steps=[(0, 1)])
    assert Change(cluster="a", kind=ChangeKind.AVAILABILITY, profile=cap).profile == cap
    assert Change(cluster="a", kind="info").profile is None
    assert Change(cluster="a", kind="interconnect").profile is None
    for build in (
        lambda: Change(cluster="a", kind=ChangeKind.AVAILABILITY),
        lambda: Change(cluster="a", kind=ChangeKind.INFO, profile=cap),
        lambda: Change(cluster="a", kind=ChangeKind.INTERCONNECT, profile=cap),
    ):
        with pytest.raises(ValidationError, match="profile"):
            build()
    refused("kind", lambda: Change(cluster="a", kind="weather"))


def test_info_and_interconnect_changes_carry_only_their_own_news():
    info = ClusterInfo(name="a", hosts=4, speed=2.0)
    link = Link(clusters=("a", "b"), latency_s=0.001, bandwidth_bps=1e9)
    assert Change(cluster="a", kind="info", info=info).info == info
    assert Change(cluster="a", kind="interconnect", links=(link,)).links == (link,)
    assert Change(cluster="a", kind="interconnect", links=()).links == ()  # no link left
    with pytest.raises(ValidationError, match="cluster properties"):
        Change(cluster="a", kind="interconnect", info=info)
    with pytest.raises(ValidationError, match="links"):
        Change(cluster="a", kind="info", links=(link,))


# -- Events ------------------------------------------------------------------------------------


def test_event_union_parses_each_type_from_json():
    cap = {"cluster": "a", "steps": [[100, 4], [150, 2]]}
    change = EVENTS.validate_json(
        json.dumps(
            {
                "type": "change",
                "seq": 1,
                "time": 100,
                "changes": [{"cluster": "a", "kind": "availability", "profile": cap}],
                "estimated_start": 150,
            }
        )
    )
    assert isinstance(change, ChangeEvent)
    assert change.changes[0].profile.profile() == Profile(4, [150], [2])
    assert change.estimated_start == 150
    never = EVENTS.validate_json('{"type": "change", "seq": 2, "time": 100, "changes": []}')
    assert isinstance(never, ChangeEvent)
    assert never.estimated_start is None

    start = EVENTS.validate_json(
        json.dumps(
            {
                "type": "start",
                "seq": 3,
                "time": 150,
                "end": 250,
                "allocations": {"a": {"hosts": ["a-1", "a-2"], "reservation": "42"}},
            }
        )
    )
    assert isinstance(start, StartEvent)
    assert start.allocations == {"a": Allocation(hosts=["a-1", "a-2"], reservation="42")}

    killed = EVENTS.validate_json('{"type": "killed", "seq": 4, "time": 250, "reason": "walltime"}')
    assert isinstance(killed, KilledEvent)
    assert killed.reason == "walltime"

    ended = EVENTS.validate_json('{"type": "ended", "seq": 5, "time": 251, "state": "finished"}')
    assert isinstance(ended, EndedEvent)
    assert ended.state is AppState.FINISHED

    for event in (change, never, start, killed, ended):
        assert EVENTS.validate_json(EVENTS.dump_json(event)) == event


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "teleport", "seq": 1, "time": 1}',
        '{"seq": 1, "time": 1, "reason": "x"}',
        '{"type": "killed", "seq": 0, "time": 1, "reason": "x"}',
        '{"type": "killed", "seq": 1, "time": -1, "reason": "x"}',
        '{"type": "killed", "seq": 1.5, "time": 1, "reason": "x"}',
        '{"type": "killed", "seq": 1, "time": 1}',
        '{"type": "killed", "seq": 1, "time": 1, "reason": "x", "extra": 1}',
        '{"type": "ended", "seq": 1, "time": 1, "state": "exploded"}',
        '{"type": "start", "seq": 1, "time": 1, "end": 2, "allocations": {"a b": {"hosts": []}}}',
    ],
)
def test_event_union_refuses_malformed_events(text):
    with pytest.raises(ValidationError):
        EVENTS.validate_json(text)
