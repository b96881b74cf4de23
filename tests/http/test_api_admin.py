"""The admin routes in process (FastAPI's TestClient, bearer tokens): what they accept, the
statuses of what they refuse, and that a refusal changes nothing. The commands as an admin
runs them are in tests/daemon/test_daemon_admin.py."""

from __future__ import annotations

import pytest

from tests.http.api import ALICE, BOB, ROOT
from tests.http.test_api import assert_error, auth, subscribe


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"user": "bad user"}, "invalid"),
        ({"user": "x" * 300}, "invalid"),
        ({"state": "sleeping"}, "invalid"),
    ],
)
def test_bad_queries_of_the_session_list_are_refused(client, query, code):
    assert_error(client.get("/v1/admin/sessions", params=query, headers=auth(ROOT)), 422, code)


def test_the_session_list_is_everyones_for_an_admin_and_ones_own_otherwise(client):
    alice, bob = subscribe(client, ALICE), subscribe(client, BOB)
    listed = client.get("/v1/admin/sessions", headers=auth(ROOT))
    assert [s["session"] for s in listed.json()] == [alice, bob]
    only = client.get("/v1/admin/sessions", params={"user": "bob"}, headers=auth(ROOT))
    assert [s["owner"] for s in only.json()] == ["bob"]
    own = client.get("/v1/admin/sessions", headers=auth(BOB))
    assert [s["session"] for s in own.json()] == [bob]
    refused = client.get("/v1/admin/sessions", params={"user": "alice"}, headers=auth(BOB))
    assert_error(refused, 403, "forbidden", "only admins")


@pytest.mark.parametrize(
    "body",
    [{}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 501}, {"reason": "a\x1b[2Jb"}],
)
def test_a_cancel_needs_a_printable_bounded_reason_and_changes_nothing_without(client, body):
    sid = subscribe(client, ALICE)
    answer = client.post(f"/v1/sessions/{sid}/cancel", json=body, headers=auth(ROOT))
    assert_error(answer, 422, "invalid")
    assert client.get(f"/v1/sessions/{sid}", headers=auth(ALICE)).json()["state"] == "submitted"


def test_cancel_is_for_the_owner_or_an_admin_and_unknown_sessions_are_not_found(client):
    sid = subscribe(client, ALICE)
    body = {"reason": "test"}
    assert_error(
        client.post(f"/v1/sessions/{sid}/cancel", json=body, headers=auth(BOB)), 404, "not_found"
    )
    assert_error(
        client.post("/v1/sessions/nosuch/cancel", json=body, headers=auth(ROOT)), 404, "not_found"
    )
    answer = client.post(f"/v1/sessions/{sid}/cancel", json=body, headers=auth(ALICE))
    assert answer.json() == {"session": sid, "state": "cancelled"}


def test_drain_and_resume_are_for_admins_on_known_clusters(client):
    assert_error(client.post("/v1/admin/clusters/c1/drain", headers=auth(ALICE)), 403, "forbidden")
    assert_error(client.post("/v1/admin/clusters/c9/drain", headers=auth(ROOT)), 404, "not_found")
    bad = client.post("/v1/admin/clusters/c1/drain", json={"reason": "\u202e"}, headers=auth(ROOT))
    assert_error(bad, 422, "invalid")
    assert "drained" not in client.get("/v1/health").json()  # older launchers read it
    drained = client.post("/v1/admin/clusters/c1/drain", json={"reason": "fw"}, headers=auth(ROOT))
    assert drained.json() | {"since": 0} == {
        "cluster": "c1",
        "drained": True,
        "since": 0,
        "by": "root",
        "reason": "fw",
    }
    assert client.get("/v1/health").json()["drained"] == ["c1"]
    assert_error(client.post("/v1/admin/clusters/c1/resume", headers=auth(BOB)), 403, "forbidden")
    resumed = client.post("/v1/admin/clusters/c1/resume", headers=auth(ROOT))
    assert resumed.json()["drained"] is False
    assert "drained" not in client.get("/v1/health").json()
