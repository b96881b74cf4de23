"""HTTP API v2 (evolving applications, CooRMv2) against a real daemon on the mock platform, as a
launcher uses it: pre-allocate, grow and shrink inside the pre-allocation, announce a ``next``
update, run preemptible work that is taken back on time; v1 launchers unaffected; others'
sessions out of reach; bad bodies refused with nothing changed.

Every wait is a long poll for an event (tests/daemons.wait_for); none sleeps.
"""

from __future__ import annotations

import functools
import signal
from pathlib import Path

import pytest
import requests

from coorm_bridge.core.messages import EndedEvent, PreemptEvent, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType, TypedRequest
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.evolving import EvolvingClient
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789abc"
PRE = RequestType.PRE_ALLOCATION
PREEMPTIBLE = RequestType.PREEMPTIBLE
#: Keys of API v2 that a v1 launcher's events never carry.
V2_KEYS = {"request", "preemptible", "estimates"}


class Daemon(daemons.Daemon):
    """Two clusters (c1: 8 hosts, c2: 4), the socket, and TCP with tokens for alice and bob."""

    def __init__(self, folder: Path) -> None:
        port = free_port()
        config = daemons.config(port=port, tokens={ALICE_TOKEN: "alice", BOB_TOKEN: "bob"})
        super().__init__(folder, config, daemons.PLATFORM, port)

    def evolving(self, token: str | None = None) -> EvolvingClient:
        if token is None:
            return EvolvingClient(self.unix, timeout=10)
        return EvolvingClient(self.tcp, token=token, timeout=10)


@pytest.fixture
def daemon(make_daemon):
    return functools.partial(make_daemon, cls=Daemon)().start()


def hosts_of(start: StartEvent, cluster: str) -> list[str]:
    return list(start.allocations[cluster].hosts)


def session_ended(client: EvolvingClient, sid: str, after: int = 0) -> EndedEvent:
    """The session's own ``ended`` (each request has one too, naming it): the last event."""
    ended = [e for e in client.follow(sid, after=after, wait=5) if e.type == "ended"]
    assert ended[-1].request is None
    return ended[-1]


def test_a_pre_allocation_starts_and_the_application_grows_and_shrinks_inside_it(daemon):
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1",)), name="amr").session
        client.send_request(sid, id="pa", cluster="c1", hosts=6, duration=3600, type=PRE)
        start = wait_for(client, sid, "start", request="pa")
        held = hosts_of(start, "c1")
        assert len(held) == 6
        assert start.allocations["c1"].reservation is not None
        assert client.request_info(sid, "pa").state is AppState.STARTED

        # A spontaneous update inside the pre-allocation: started by the pass that placed it.
        grow = client.send_request(sid, id="grow", cluster="c1", hosts=3, duration=600)
        assert grow.state is AppState.STARTED
        assert grow.inside == "pa"
        assert len(grow.host_names) == 3
        assert set(grow.host_names) <= set(held)
        grown = wait_for(client, sid, "start", after=start.seq, request="grow")
        assert set(hosts_of(grown, "c1")) == set(grow.host_names)

        # Shrinking: one host back, the other two kept.
        shrunk = client.done_request(sid, "grow", hosts=1)
        assert shrunk.state is AppState.STARTED
        assert len(shrunk.host_names) == 2
        assert set(shrunk.host_names) < set(grow.host_names)

        info = client.evolving_info(sid)
        assert [r.request for r in info.requests] == ["pa", "grow"]
        assert info.name == "amr"
        ended = client.end(sid)
        assert ended.session == sid
        finished = wait_for(client, sid, "ended", after=grown.seq, request="grow")
        assert finished.state is AppState.FINISHED
        last = session_ended(client, sid, after=grown.seq)
        assert last.state is AppState.FINISHED
        assert client.evolving_info(sid).state is AppState.FINISHED


def test_a_next_request_starts_on_the_hosts_of_the_one_it_follows_when_that_one_is_done(daemon):
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1",))).session
        client.send_request(sid, id="r1", cluster="c1", hosts=4, duration=3600)
        first = wait_for(client, sid, "start", request="r1")
        announced = client.send_request(
            sid,
            id="r2",
            cluster="c1",
            hosts=4,
            duration=600,
            related_to="r1",
            related_how=Relation.NEXT,
        )
        assert announced.state is not AppState.STARTED
        assert announced.related_to == "r1"
        assert announced.estimated_start is not None
        assert client.request_info(sid, "r2").state is not AppState.STARTED

        done = client.done_request(sid, "r1")
        assert done.done_at is not None
        following = wait_for(client, sid, "start", after=first.seq, request="r2")
        assert set(hosts_of(following, "c1")) == set(hosts_of(first, "c1"))
        assert client.request_info(sid, "r2").state is AppState.STARTED
        client.end(sid)


def preempted_application(daemon, client, wanted):
    """A's preemptible request on all of c2, started; then B's non-preemptible one for
    ``wanted`` hosts there, and A's preempt event: (A, B, A's start, the preempt event)."""
    first = client.subscribe_evolving(Filter(clusters=("c2",)), name="sweep").session
    client.send_request(first, id="p", cluster="c2", hosts=4, duration=3600, type=PREEMPTIBLE)
    start = wait_for(client, first, "start", request="p")
    assert len(hosts_of(start, "c2")) == 4  # every host was idle
    second = client.subscribe_evolving(Filter(clusters=("c2",)), name="solver").session
    asked = client.send_request(second, id="np", cluster="c2", hosts=wanted, duration=600)
    assert asked.state is not AppState.STARTED  # not before the hosts are given back
    preempt = wait_for(client, first, "preempt", after=start.seq, request="p")
    assert isinstance(preempt, PreemptEvent)
    assert preempt.hosts == wanted
    assert preempt.deadline >= preempt.time
    info = client.request_info(first, "p")
    assert info.give_back == wanted
    assert info.preempt_by == preempt.deadline
    return first, second, start, preempt


def test_a_preemptible_request_not_given_back_is_killed_past_its_deadline(daemon):
    with daemon.evolving() as client:
        first, second, start, preempt = preempted_application(daemon, client, wanted=4)
        killed = wait_for(client, first, "killed", after=preempt.seq, request="p")
        assert killed.time >= preempt.deadline
        taken = wait_for(client, second, "start", request="np")
        assert set(hosts_of(taken, "c2")) == set(hosts_of(start, "c2"))
        assert taken.time >= preempt.deadline
        assert client.request_info(first, "p").state is not AppState.STARTED


def test_a_preemptible_request_that_gives_hosts_back_keeps_the_others(daemon):
    with daemon.evolving() as client:
        first, second, start, preempt = preempted_application(daemon, client, wanted=2)
        kept = client.done_request(first, "p", hosts=preempt.hosts)
        assert kept.state is AppState.STARTED
        assert len(kept.host_names) == 2
        taken = wait_for(client, second, "start", request="np")
        assert set(hosts_of(taken, "c2")).isdisjoint(kept.host_names)
        assert set(hosts_of(taken, "c2")) | set(kept.host_names) == set(hosts_of(start, "c2"))
        assert "killed" not in [e.type for e in client.events(first, after=preempt.seq)]
        assert client.request_info(first, "p").state is AppState.STARTED


def test_a_v1_launcher_sees_no_v2_field_beside_evolving_applications(daemon):
    with daemon.evolving(ALICE_TOKEN) as client:
        evolving = client.subscribe_evolving(Filter(clusters=("c1",))).session
        client.send_request(evolving, id="pa", cluster="c1", hosts=2, duration=3600, type=PRE)
        sid = client.subscribe(Filter(clusters=("c1", "c2"))).session
        client.request(sid, Request(nodes={"c1": 2, "c2": 1}, duration=600))
        wait_for(client, sid, "start")
        client.done(sid)
        wait_for(client, sid, "ended")
        assert wait_for(client, evolving, "start").request == "pa"
    raw = requests.get(
        f"{daemon.tcp}/v1/sessions/{sid}/events",
        headers={"Authorization": f"Bearer {ALICE_TOKEN}"},
        timeout=10,
    ).json()
    kinds = [event["type"] for event in raw["events"]]
    assert {"start", "ended"} <= set(kinds)
    for event in raw["events"]:
        assert not V2_KEYS & set(event), event


def test_another_users_evolving_session_is_not_found(daemon):
    with daemon.evolving(ALICE_TOKEN) as alice, daemon.evolving(BOB_TOKEN) as bob:
        sid = alice.subscribe_evolving(Filter(clusters=("c1",))).session
        alice.send_request(sid, id="r1", cluster="c1", hosts=1, duration=600, type=PRE)
        before = alice.evolving_info(sid)
        for call in (
            lambda: bob.evolving_info(sid),
            lambda: bob.request_info(sid, "r1"),
            lambda: bob.send_request(sid, id="r2", cluster="c1", hosts=1, duration=60),
            lambda: bob.done_request(sid, "r1"),
            lambda: bob.withdraw_request(sid, "r1"),
            lambda: bob.end(sid),
            lambda: bob.events(sid),
        ):
            with pytest.raises(BridgeError) as refused:
                call()
            assert refused.value.status == 404, refused.value
        after = alice.evolving_info(sid)
        assert [r.request for r in after.requests] == [r.request for r in before.requests]
        assert after.state is before.state

        # Alice's own v1 session is no evolving application: a clear 409.
        v1 = alice.subscribe().session
        with pytest.raises(BridgeError) as refused:
            alice.send_request(v1, id="r1", cluster="c1", hosts=1, duration=60)
        assert refused.value.status == 409
        assert refused.value.detail


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"id": "x", "cluster": "c9", "hosts": 1, "duration": 60}, "c9"),
        (
            {
                "id": "x",
                "cluster": "c1",
                "hosts": 1,
                "duration": 60,
                "related_to": "nope",
                "related_how": "next",
            },
            "nope",
        ),
        (
            {
                "id": "x",
                "cluster": "c2",
                "hosts": 1,
                "duration": 60,
                "related_to": "r1",
                "related_how": "next",
            },
            "c1",
        ),
        ({"id": "x", "cluster": "c1", "hosts": 0, "duration": 60}, "hosts"),
    ],
    ids=["unknown cluster", "related to unknown", "next on another cluster", "hosts 0"],
)
def test_bad_requests_get_422_and_change_nothing(daemon, body, words):
    with daemon.evolving(ALICE_TOKEN) as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1", "c2"))).session
        client.send_request(sid, id="r1", cluster="c1", hosts=2, duration=600)
        wait_for(client, sid, "start", request="r1")
        before = client.evolving_info(sid)
        answer = requests.post(
            f"{daemon.tcp}/v2/sessions/{sid}/requests",
            json=body,
            headers={"Authorization": f"Bearer {ALICE_TOKEN}"},
            timeout=10,
        )
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "invalid"
        assert words in answer.json()["detail"]
        after = client.evolving_info(sid)
        assert after.requests == before.requests
        with pytest.raises(BridgeError) as refused:
            client.request_info(sid, "x")
        assert refused.value.status == 404


def test_after_kill_9_an_evolving_application_finds_its_requests_as_they_were(daemon):
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1",)), name="amr").session
        client.send_request(sid, id="pa", cluster="c1", hosts=6, duration=3600, type=PRE)
        wait_for(client, sid, "start", request="pa")
        inner = client.send_request(sid, id="in", cluster="c1", hosts=2, duration=1800)
        assert inner.state is AppState.STARTED
        before = client.evolving_info(sid)
        told = client.events(sid)
    held = {k: v for k, v in daemon.mock_reservations().items() if k[1].startswith("coorm-")}
    assert daemon.kill(signal.SIGKILL) == -signal.SIGKILL
    daemon.start()
    with daemon.evolving() as client:
        after = client.evolving_info(sid)
        assert [(r.request, r.state, r.host_names, r.reservation) for r in after.requests] == [
            (r.request, r.state, r.host_names, r.reservation) for r in before.requests
        ]
        assert [e for e in client.events(sid) if e.type != "change"] == [
            e for e in told if e.type != "change"
        ]
        # The pre-allocation still takes spontaneous updates, on its unused hosts.
        more = client.send_request(sid, id="more", cluster="c1", hosts=4, duration=600)
        assert more.state is AppState.STARTED
        assert more.inside == "pa"
        assert not set(more.host_names) & set(inner.host_names)
    assert {k: v for k, v in daemon.mock_reservations().items() if k in held} == held


def test_coalloc_requests_start_together_on_both_clusters(daemon):
    with daemon.evolving() as client:
        sid = client.subscribe_evolving(Filter(clusters=("c1", "c2")), name="coupled").session
        ocean = TypedRequest(id="ocean", cluster="c1", hosts=3, duration=600)
        air = TypedRequest(
            id="air", cluster="c2", hosts=2, duration=600,
            related_to="ocean", related_how=Relation.COALLOC,
        )  # fmt: skip
        answers = client.send_requests(sid, [ocean, air])  # one call: neither starts alone
        assert [a.request for a in answers] == ["ocean", "air"]
        start = wait_for(client, sid, "start", request="ocean")
        assert {c: len(a.hosts) for c, a in start.allocations.items()} == {"c1": 3, "c2": 2}
        told = client.request_info(sid, "air")
        assert told.state is AppState.STARTED
        assert told.started_at == client.request_info(sid, "ocean").started_at
        assert list(told.host_names) == hosts_of(start, "c2")
        client.end(sid)
        assert session_ended(client, sid).state is AppState.FINISHED
