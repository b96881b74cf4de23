"""API v2's OpenAPI document: every route of evolving applications is described, with its
bodies and answers, beside v1's (the service behind them is exercised against a real daemon in
tests/daemon/test_daemon_v2.py)."""

from __future__ import annotations

import pytest

from tests.http.api import ALICE

V2 = "v2: evolving applications"


class Untouched:
    """Stands for ``bridge.evolving`` where a test checks that the routes refuse a body before
    any call reaches the service: every call fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the service was asked: {name}")


@pytest.fixture
def untouched(bridge, monkeypatch):
    monkeypatch.setattr(bridge, "evolving", Untouched(), raising=False)


def test_openapi_describes_every_v2_route_with_its_bodies_and_answers(client):
    spec = client.get("/v1/openapi.json").json()
    paths = spec["paths"]
    routes = {
        (method.upper(), path)
        for path, item in paths.items()
        if path.startswith("/v2/")
        for method in item
    }
    assert routes == {
        ("POST", "/v2/sessions"),
        ("GET", "/v2/sessions/{session_id}"),
        ("POST", "/v2/sessions/{session_id}/done"),
        ("DELETE", "/v2/sessions/{session_id}"),
        ("GET", "/v2/sessions/{session_id}/events"),
        ("POST", "/v2/sessions/{session_id}/requests"),
        ("GET", "/v2/sessions/{session_id}/requests/{request_id}"),
        ("DELETE", "/v2/sessions/{session_id}/requests/{request_id}"),
        ("POST", "/v2/sessions/{session_id}/requests/{request_id}/done"),
        ("POST", "/v2/sessions/{session_id}/requests/{request_id}/jobs"),
        ("GET", "/v2/sessions/{session_id}/requests/{request_id}/jobs"),
        ("DELETE", "/v2/sessions/{session_id}/requests/{request_id}/jobs/{job_id}"),
    }
    for path, item in paths.items():
        if path.startswith("/v2/"):
            for operation in item.values():
                assert operation["tags"] == [V2]
                assert operation["summary"]
                assert {"401", "404", "409", "422"} <= set(operation["responses"])

    def body(method, path):
        schema = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        return schema.get("$ref") or schema["anyOf"][0]["$ref"]

    def answer(method, path, status="200"):
        content = paths[path][method]["responses"][status]["content"]["application/json"]
        return content["schema"]["$ref"]

    def one_or_many(method, path, field, status="201"):
        """An object or an array of them (a schema's two choices, as references)."""
        if field == "body":
            schema = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
        else:
            answers = paths[path][method]["responses"][status]["content"]
            schema = answers["application/json"]["schema"]
        return [c.get("$ref") or c["items"]["$ref"] for c in schema["anyOf"]]

    requests = "/v2/sessions/{session_id}/requests"
    one = f"{requests}/{{request_id}}"
    assert body("post", "/v2/sessions").endswith("/SubscribeBody")
    assert answer("post", "/v2/sessions", "201").endswith("/Subscribed")
    assert answer("get", "/v2/sessions/{session_id}").endswith("/EvolvingInfo")
    assert [ref.rsplit("/", 1)[1] for ref in one_or_many("post", requests, "body")] == [
        "TypedRequest",
        "TypedRequest",
    ]
    assert [ref.rsplit("/", 1)[1] for ref in one_or_many("post", requests, "answer")] == [
        "RequestInfo",
        "RequestInfo",
    ]
    assert answer("get", one).endswith("/RequestInfo")
    assert body("post", f"{one}/done").endswith("/DoneBody")
    assert answer("post", f"{one}/done").endswith("/RequestInfo")
    assert answer("delete", one).endswith("/RequestInfo")
    assert body("post", f"{one}/jobs").endswith("/RequestJobRequest")
    assert answer("post", f"{one}/jobs", "201").endswith("/JobAnswer")
    listed = paths[f"{one}/jobs"]["get"]["responses"]["200"]["content"]["application/json"]
    assert listed["schema"]["items"]["$ref"].endswith("/JobInfo")
    assert answer("delete", f"{one}/jobs/{{job_id}}", "202").endswith("/JobInfo")
    assert answer("delete", "/v2/sessions/{session_id}").endswith("/StateAnswer")
    assert answer("get", "/v2/sessions/{session_id}/events").endswith("/EventPage")
    schemas = spec["components"]["schemas"]
    assert set(schemas["TypedRequest"]["properties"]) == {
        "id",
        "cluster",
        "hosts",
        "duration",
        "type",
        "related_to",
        "related_how",
    }
    assert "PreemptEvent" in schemas
    assert set(schemas["RequestJobRequest"]["properties"]) == {
        *schemas["JobRequest"]["properties"],
        "hosts",
    }
    assert {"request", "preemptible", "estimates"} <= set(schemas["ChangeEvent"]["properties"])
    # v1 is where it was.
    assert "/v1/sessions/{session_id}/request" in paths


def test_a_bad_typed_request_is_refused_before_the_service_is_asked(client, untouched):
    auth = {"Authorization": f"Bearer {ALICE}"}
    for wrong in (
        {"id": "r1", "cluster": "c1", "hosts": 0, "duration": 60},
        {"id": "r1", "cluster": "c1", "hosts": 1, "duration": 60, "related_to": "r0"},
        {"id": "r1", "cluster": "c1", "hosts": 1, "duration": 60, "type": "elastic"},
    ):
        answer = client.post("/v2/sessions/nobody/requests", json=wrong, headers=auth)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "invalid"


def test_a_request_job_naming_a_host_twice_is_refused_before_the_service_is_asked(
    client, service, monkeypatch
):
    monkeypatch.setattr(service.request_jobs, "desk", Untouched())
    monkeypatch.setattr(service.request_jobs, "evolving", Untouched())
    job = {
        "cluster": "c1",
        "name": "task",
        "argv": ["true"],
        "workdir": "/tmp",
        "walltime": 60,
        "stdout": "/tmp/out",
        "stderr": "/tmp/err",
        "hosts": ["c1-1", "c1-2", "c1-1"],
    }
    answer = client.post(
        "/v2/sessions/nobody/requests/r1/jobs",
        json=job,
        headers={"Authorization": f"Bearer {ALICE}"},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid"
    assert "hosts names c1-1 more than once" in answer.json()["detail"]


def test_a_give_back_naming_other_than_hosts_hosts_is_refused_before_the_service_is_asked(
    client, untouched
):
    auth = {"Authorization": f"Bearer {ALICE}"}
    for wrong, said in (
        ({"hosts": 2, "host_names": ["c1-1"]}, "exactly `hosts` hosts"),
        ({"host_names": ["c1-1"]}, "exactly `hosts` hosts"),
        ({"hosts": 2, "host_names": ["c1-1", "c1-1"]}, "a host twice"),
    ):
        answer = client.post("/v2/sessions/nobody/requests/r1/done", json=wrong, headers=auth)
        assert answer.status_code == 422, answer.text
        assert said in answer.json()["detail"]
