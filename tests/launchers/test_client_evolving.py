"""The evolving applications' client (API v2): right calls on the wire, typed answers, the same
errors as v1's, and a follow that goes on past a request's end to the session's."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import responses
from responses import matchers

from coorm_bridge.core.messages import EndedEvent, PreemptEvent, StartEvent
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType, TypedRequest
from coorm_bridge.launchers.client import BridgeError
from coorm_bridge.launchers.evolving import EvolvingClient

URL = "http://bridge.example:8642"
V2 = f"{URL}/v2/sessions"
INFO = {
    "request": "r2",
    "cluster": "c1",
    "hosts": 4,
    "duration": 600,
    "type": "non-preemptible",
    "related_to": "r1",
    "related_how": "next",
    "state": "waiting",
    "estimated_start": 1_700_000_600,
}


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


@pytest.fixture
def client() -> EvolvingClient:
    return EvolvingClient(URL, timeout=5.0)


def test_send_request_posts_the_typed_request_and_reads_its_info(mock, client):
    body = {
        "id": "r2",
        "cluster": "c1",
        "hosts": 4,
        "duration": 600,
        "type": "non-preemptible",
        "related_to": "r1",
        "related_how": "next",
    }
    mock.post(
        f"{V2}/s1/requests", status=201, json=INFO, match=[matchers.json_params_matcher(body)]
    )
    mock.post(
        f"{V2}/s1/requests", status=201, json=INFO, match=[matchers.json_params_matcher(body)]
    )
    by_fields = client.send_request(
        "s1",
        id="r2",
        cluster="c1",
        hosts=4,
        duration=600,
        related_to="r1",
        related_how=Relation.NEXT,
    )
    typed = TypedRequest(
        id="r2", cluster="c1", hosts=4, duration=600, related_to="r1", related_how=Relation.NEXT
    )
    assert client.send_request("s1", typed) == by_fields
    assert by_fields.state is AppState.WAITING
    assert by_fields.type is RequestType.NON_PREEMPTIBLE
    assert by_fields.estimated_start == 1_700_000_600
    with pytest.raises(TypeError):
        client.send_request("s1", typed, hosts=2)
    with pytest.raises(TypeError):
        client.send_request("s1", id="r3", cluster="c1")


def test_every_call_goes_to_v2_with_ids_quoted(mock, client):
    started = INFO | {"state": "started", "host_names": ["c1-0"], "started_at": 1_700_000_000}
    mock.post(
        f"{V2}/s1/requests/r%2F2/done",
        json=started,
        match=[matchers.json_params_matcher({"hosts": 3})],
    )
    mock.post(
        f"{V2}/s1/requests/r2/done",
        json=started,
        match=[matchers.json_params_matcher({"hosts": None})],
    )
    mock.delete(f"{V2}/s1/requests/r2", json=INFO | {"state": "cancelled"})
    mock.get(f"{V2}/s1/requests/r2", json=INFO)
    mock.post(f"{V2}/s1/done", json={"session": "s1", "state": "finished"})
    mock.post(
        V2,
        status=201,
        json={"session": "s1", "clusters": []},
        match=[matchers.json_params_matcher({"filter": {}, "name": "amr"}, strict_match=False)],
    )
    assert client.done_request("s1", "r/2", hosts=3).host_names == ("c1-0",)
    assert client.done_request("s1", "r2").state is AppState.STARTED
    assert client.withdraw_request("s1", "r2").state is AppState.CANCELLED
    assert client.request_info("s1", "r2").related_how is Relation.NEXT
    assert client.end("s1").state is AppState.FINISHED
    assert client.subscribe_evolving(name="amr").session == "s1"


def test_a_refusal_is_a_bridge_error_with_the_daemons_code(mock, client):
    detail = "session s1 is a v1 session: use /v1"
    mock.get(f"{V2}/s1", status=409, json={"error": "conflict", "detail": detail})
    with pytest.raises(BridgeError) as refused:
        client.evolving_info("s1")
    assert (refused.value.status, refused.value.code, refused.value.detail) == (
        409,
        "conflict",
        detail,
    )


def test_follow_goes_past_a_requests_end_to_the_sessions(mock, client):
    events = [
        {"seq": 1, "time": 10, "type": "start", "request": "r1", "end": 70, "allocations": {}},
        {"seq": 2, "time": 20, "type": "preempt", "request": "r1", "hosts": 2, "deadline": 30},
        {"seq": 3, "time": 25, "type": "ended", "request": "r1", "state": "finished"},
        {"seq": 4, "time": 40, "type": "ended", "state": "finished"},
    ]
    stream = "".join(f"id: {e['seq']}\ndata: {json.dumps(e)}\n\n" for e in events)
    mock.get(
        f"{V2}/s1/events",
        body=stream,
        content_type="text/event-stream",
        match=[
            matchers.query_param_matcher({"after": "0"}),
            matchers.header_matcher({"accept": "text/event-stream"}),
        ],
    )
    seen = list(client.follow("s1"))
    assert [e.seq for e in seen] == [1, 2, 3, 4]
    assert isinstance(seen[0], StartEvent)
    assert seen[0].request == "r1"
    assert isinstance(seen[1], PreemptEvent)
    assert (seen[1].hosts, seen[1].deadline) == (2, 30)
    assert isinstance(seen[3], EndedEvent)
    assert seen[3].request is None
