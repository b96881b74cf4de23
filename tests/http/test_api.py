"""The HTTP API in-process (FastAPI's TestClient, bearer tokens) over a running bridge loop.

The bridge runs its real loop on a mock platform with a wall clock; only the transport is
in-process. Unix-socket identity and the daemon as a process are in tests/daemon/test_daemon.py.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.http.app import create_app
from coorm_bridge.protocol import MAX_BODY
from coorm_bridge.service.config import BridgeSettings, Config, LimitSettings, PlacementSettings
from coorm_bridge.service.wiring import assemble
from coorm_bridge.store import Store
from tests.http.api import ALICE, BOB, PLATFORM, ROOT


def auth(token=ALICE):
    return {"Authorization": f"Bearer {token}"}


def subscribe(client, token=ALICE, **body):
    answer = client.post("/v1/sessions", json=body, headers=auth(token))
    assert answer.status_code == 201, answer.text
    return answer.json()["session"]


def assert_error(answer, status, code, *words):
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == code
    for word in words:
        assert word in body["detail"]
    assert "Traceback" not in answer.text


def test_subscribe_request_and_events_end_to_end(client):
    answer = client.post("/v1/sessions", json={"name": "demo"}, headers=auth())
    assert answer.status_code == 201
    sid = answer.json()["session"]
    assert [c["name"] for c in answer.json()["clusters"]] == ["c1", "c2"]
    first = client.get(f"/v1/sessions/{sid}/events", params={"wait": 5}, headers=auth()).json()
    (change,) = first["events"]
    assert change["seq"] == 1
    assert change["type"] == "change"
    assert {c["cluster"] for c in change["changes"]} == {"c1", "c2"}
    answer = client.put(
        f"/v1/sessions/{sid}/request",
        json={"nodes": {"c1": 2, "c2": 1}, "duration": 60},
        headers=auth(),
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["estimated_start"] is not None
    page = client.get(
        f"/v1/sessions/{sid}/events", params={"after": 1, "wait": 5}, headers=auth()
    ).json()
    start = [e for e in page["events"] if e["type"] == "start"]
    assert start, page
    assert set(start[0]["allocations"]) == {"c1", "c2"}
    info = client.get(f"/v1/sessions/{sid}", headers=auth()).json()
    assert info["state"] == "started"
    assert info["owner"] == "alice"
    assert client.post(f"/v1/sessions/{sid}/done", headers=auth()).json()["state"] == (
        "finish_sent"
    )


def test_a_long_poll_waits_then_returns_empty(client):
    sid = subscribe(client)
    client.get(f"/v1/sessions/{sid}/events", params={"wait": 5}, headers=auth())
    answer = client.get(
        f"/v1/sessions/{sid}/events", params={"after": 1, "wait": 0.3}, headers=auth()
    )
    assert answer.json() == {"events": []}


def test_a_request_larger_than_the_platform_is_accepted_with_no_estimate(client):
    sid = subscribe(client)
    answer = client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": {"c1": 9}, "duration": 60}, headers=auth()
    )
    assert answer.status_code == 200
    assert answer.json()["estimated_start"] is None
    assert answer.json()["state"] == "waiting"


def test_identity_is_required_and_checked(client):
    assert_error(client.get("/v1/clusters"), 401, "unauthenticated", "Bearer")
    assert_error(client.get("/v1/clusters", headers=auth("x" * 30)), 401, "unauthenticated")
    assert client.get("/v1/clusters", headers=auth()).status_code == 200
    assert client.get("/v1/health").status_code == 200  # liveness needs no identity


def test_a_foreign_session_is_not_found_and_left_alone(client):
    sid = subscribe(client)
    for method, path, body in (
        ("GET", f"/v1/sessions/{sid}", None),
        ("GET", f"/v1/sessions/{sid}/events", None),
        ("PUT", f"/v1/sessions/{sid}/request", {"nodes": {"c1": 1}, "duration": 5}),
        ("POST", f"/v1/sessions/{sid}/done", None),
        ("DELETE", f"/v1/sessions/{sid}", None),
    ):
        answer = client.request(method, path, json=body, headers=auth(BOB))
        assert_error(answer, 404, "not_found", sid)
    assert client.get("/v1/sessions", headers=auth(BOB)).json() == []
    assert client.get(f"/v1/sessions/{sid}", headers=auth()).json()["state"] == "submitted"
    # An admin sees everyone's sessions.
    assert [s["session"] for s in client.get("/v1/sessions", headers=auth(ROOT)).json()] == [sid]


@pytest.mark.parametrize(
    ("body", "status", "code", "words"),
    [
        (b'{"nodes": {"c1": 1}, "duration": 5', 400, "malformed", ["JSON"]),
        (b'{"nodes": {"c1": "two"}, "duration": 5}', 422, "invalid", ["nodes.c1"]),
        (b'{"nodes": {"c1": 1.5}, "duration": 5}', 422, "invalid", ["nodes.c1"]),
        (b'{"nodes": {"c9": 1}, "duration": 5}', 422, "invalid", ["c9"]),
        (b'{"nodes": {"c1": 1}, "duration": -5}', 422, "invalid", ["duration"]),
        (b'{"nodes": {"c1": 0}, "duration": 5}', 422, "invalid", ["no host"]),
        (b'{"nodes": {"c1": 1}}', 422, "invalid", ["duration"]),
        (b'{"nodes": {"c1": 1}, "duration": 5, "x": 1}', 422, "invalid", ["x"]),
        (b"[]", 422, "invalid", []),
    ],
)
def test_bad_requests_get_4xx_and_change_nothing(client, body, status, code, words):
    sid = subscribe(client, filter={"clusters": ["c1"]})
    before = client.get(f"/v1/sessions/{sid}", headers=auth()).json()
    answer = client.put(
        f"/v1/sessions/{sid}/request",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert_error(answer, status, code, *words)
    after = client.get(f"/v1/sessions/{sid}", headers=auth()).json()
    assert (after["state"], after["request"], after["last_seq"] >= before["last_seq"]) == (
        "submitted",
        None,
        True,
    )


def test_oversize_bodies_are_refused_before_being_read(client):
    huge = json.dumps({"name": "x" * (MAX_BODY + 10)})
    before = client.get("/v1/sessions", headers=auth()).json()
    answer = client.post(
        "/v1/sessions", content=huge, headers={**auth(), "Content-Type": "application/json"}
    )
    assert_error(answer, 413, "too_large", str(MAX_BODY))

    def chunks():
        for _ in range(20):
            yield b" " * 8192

    answer = client.post(
        "/v1/sessions", content=chunks(), headers={**auth(), "Content-Type": "application/json"}
    )
    assert_error(answer, 413, "too_large")
    assert client.get("/v1/sessions", headers=auth()).json() == before


def test_bad_subscriptions_and_queries(client):
    assert_error(
        client.post("/v1/sessions", json={"filter": {"min_hosts": 100}}, headers=auth()),
        422,
        "invalid",
        "no cluster",
    )
    assert_error(
        client.post(
            "/v1/sessions", json={"filter": {"clusters": ["c1; rm -rf /"]}}, headers=auth()
        ),
        422,
        "invalid",
    )
    sid = subscribe(client)
    for params in ({"wait": 61}, {"wait": -1}, {"after": -1}, {"wait": "nan"}):
        answer = client.get(f"/v1/sessions/{sid}/events", params=params, headers=auth())
        assert_error(answer, 422, "invalid")
    assert_error(client.get("/v1/nowhere", headers=auth()), 404, "not_found")
    assert_error(client.patch(f"/v1/sessions/{sid}", headers=auth()), 405, "method_not_allowed")


def test_state_conflicts(client):
    sid = subscribe(client)
    assert_error(client.post(f"/v1/sessions/{sid}/done", headers=auth()), 409, "conflict")
    assert client.delete(f"/v1/sessions/{sid}", headers=auth()).json()["state"] == "cancelled"
    assert client.delete(f"/v1/sessions/{sid}", headers=auth()).json()["state"] == "cancelled"
    answer = client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": {"c1": 1}, "duration": 5}, headers=auth()
    )
    assert_error(answer, 409, "conflict", "cancelled")
    events = client.get(f"/v1/sessions/{sid}/events", headers=auth()).json()["events"]
    assert events[-1]["type"] == "ended"


def test_openapi_health_metrics_and_catalogue(client):
    spec = client.get("/v1/openapi.json").json()
    assert {"/v1/sessions", "/v1/sessions/{session_id}/events", "/v1/health"} <= set(spec["paths"])
    health = client.get("/v1/health").json()
    assert health["status"] == "ok"
    assert set(health["clusters"]) == {"c1", "c2"}
    subscribe(client)
    metrics = client.get("/metrics").text
    assert 'coorm_sessions{state="submitted"} 1.0' in metrics
    assert 'coorm_cluster_up{cluster="c1"} 1.0' in metrics
    assert "coorm_long_polls 0.0" in metrics.splitlines()
    assert client.get("/v1/interconnect", headers=auth()).json() == {"links": []}
    caps = client.get("/v1/availability", headers=auth()).json()
    assert [cap["cluster"] for cap in caps] == ["c1", "c2"]


def test_an_unexpected_error_is_a_bare_500(client, bridge, monkeypatch):
    def broken():
        raise RuntimeError("secret internals")

    monkeypatch.setattr(bridge, "health", broken)
    answer = client.get("/v1/health")
    assert_error(answer, 500, "internal")
    assert "secret" not in answer.text


@pytest.fixture
def front(tmp_path):
    """The API over a mock platform with its front end (jobs in ``tmp_path/jobs``)."""
    config = Config(
        bridge=BridgeSettings(admins=("root",)),
        policy=PolicyConfig(interval=0.05, fair_start=1),
        placement=PlacementSettings(poll_interval=0.5),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
    )
    platform = parse_platform(PLATFORM)
    adapter = MockAdapter(platform, WallClock(), jobs=tmp_path / "jobs", run_jobs=True)
    store = Store(tmp_path / "bridge.sqlite")
    service = assemble(config, adapter, store)
    loop = service.loop
    loop.start()
    app = create_app(service, tokens={ALICE: "alice", ROOT: "root"})
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
    loop.stop()
    store.close()


def started_session(client, nodes):
    sid = subscribe(client)
    answer = client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": nodes, "duration": 60}, headers=auth()
    )
    assert answer.status_code == 200, answer.text
    for _ in range(50):
        if client.get(f"/v1/sessions/{sid}", headers=auth()).json()["state"] == "started":
            return sid
        client.get(f"/v1/sessions/{sid}/events", params={"wait": 1}, headers=auth())
    raise AssertionError("the session did not start")


JOB = {
    "cluster": "c1",
    "name": "x",
    "argv": ["/bin/true"],
    "workdir": "/tmp",
    "walltime": 30,
    "stdout": "/tmp/x.out",
    "stderr": "/tmp/x.err",
}


def test_an_admin_sees_a_sessions_jobs_but_only_its_owner_submits(front):
    sid = started_session(front, {"c1": 1})
    answer = front.post(f"/v1/sessions/{sid}/jobs", json=JOB, headers=auth(ROOT))
    assert_error(answer, 403, "forbidden", "only alice")
    assert front.get(f"/v1/sessions/{sid}/jobs", headers=auth(ROOT)).json() == []
    answer = front.delete(f"/v1/sessions/{sid}/jobs/nosuchjob", headers=auth(ROOT))
    assert_error(answer, 404, "not_found", "no job nosuchjob")


def test_a_platform_without_a_front_end_runs_no_job(client):
    sid = started_session(client, {"c1": 1})
    answer = client.post(f"/v1/sessions/{sid}/jobs", json=JOB, headers=auth())
    assert_error(answer, 409, "conflict", "no front end", "runs no jobs")
    assert client.get(f"/v1/sessions/{sid}/jobs", headers=auth()).json() == []


def test_the_quiet_protocols_parameters_are_taken_and_bounded(client, service):
    answer = client.post("/v1/sessions", params={"changes": "delta"}, json={}, headers=auth())
    assert answer.status_code == 201, answer.text
    sid = answer.json()["session"]
    quiet = service.passes.told.quiet
    assert quiet.wants_deltas(sid)
    assert not quiet.wants_deltas(subscribe(client))  # without the parameter: whole profiles
    bad = client.post("/v1/sessions", params={"changes": "some"}, json={}, headers=auth())
    assert_error(bad, 422, "invalid", "changes")
    first = client.get(f"/v1/sessions/{sid}/events", params={"wait": 5}, headers=auth())
    seq = first.json()["events"][-1]["seq"]
    for horizon in (-1, 10**13, "soon"):
        wrong = client.get(
            f"/v1/sessions/{sid}/events", params={"after": seq, "horizon": horizon}, headers=auth()
        )
        assert_error(wrong, 422, "invalid", "horizon")
    told = client.get(
        f"/v1/sessions/{sid}/events",
        params={"after": seq, "wait": 0, "horizon": 2_000_000_000},
        headers=auth(),
    )
    assert told.status_code == 200, told.text
    assert quiet.read(sid) == seq
    assert quiet.horizon(sid, seq) == 2_000_000_000  # for the view it had read
    assert quiet.horizon(sid, seq + 1) is None  # not for a later one
    metrics = client.get("/metrics").text
    assert 'coorm_reservation_calls_total{call="create"}' in metrics
    assert "coorm_unheeded_changes_total" in metrics
