"""The launcher client: right calls on the wire, typed answers, clear errors, resumable follow."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests
import responses
from responses import matchers

from coorm_bridge.core.messages import Allocation, EndedEvent, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import (
    BridgeClient,
    BridgeError,
    BridgeUnreachable,
    base_url,
    job_time_limit,
)

URL = "http://bridge.example:8642"
TOKEN = "0123456789abcdef0123"

HEALTH = {
    "status": "ok",
    "time": 1_700_000_000,
    "clusters": {"c1": {"status": "ok", "last_snapshot": 1_700_000_000, "failures": 0}},
    "sessions": 1,
}
CLUSTER = {
    "name": "c1",
    "hosts": 16,
    "cores_per_host": 8,
    "ram_per_host_mib": 0,
    "scratch_per_host_mib": 0,
    "speed": 1.0,
}
SESSION = {
    "session": "s1",
    "name": "amr",
    "owner": "alice",
    "state": "waiting",
    "clusters": ["c1"],
    "request": {"nodes": {"c1": 4}, "duration": 3600},
    "estimated_start": 1_700_000_100,
    "started_at": None,
    "done_at": None,
    "end": None,
    "view": {"profiles": [{"cluster": "c1", "steps": [[1_700_000_000, 12]]}]},
    "stale": [],
    "last_seq": 2,
}


def event(seq: int, kind: str = "change") -> dict[str, object]:
    base: dict[str, object] = {"seq": seq, "time": 100 + seq, "type": kind}
    extra: dict[str, dict[str, object]] = {
        "change": {"changes": [{"cluster": "c1", "kind": "info"}], "estimated_start": None},
        "start": {"end": 5000, "allocations": {"c1": {"hosts": ["n1", "n2"]}}},
        "killed": {"reason": "walltime exceeded"},
        "ended": {"state": "finished"},
    }
    return base | extra[kind]


def page(*events: dict[str, object]) -> dict[str, object]:
    return {"events": list(events)}


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def no_sleep(delay: float) -> None:
    pytest.fail(f"the client slept {delay}s where it should not have")


@pytest.fixture
def client() -> BridgeClient:
    return BridgeClient(URL, timeout=5.0, sleep=no_sleep)


def events_url(session: str = "s1") -> str:
    return f"{URL}/v1/sessions/{session}/events"


def polled(after: int, wait: str = "30") -> list[object]:
    return [matchers.query_param_matcher({"after": str(after), "wait": wait})]


# -- every call ------------------------------------------------------------------------------


def test_subscribe_posts_filter_and_name(mock: responses.RequestsMock, client: BridgeClient):
    mock.post(
        f"{URL}/v1/sessions",
        status=201,
        json={"session": "s1", "clusters": [CLUSTER]},
        match=[
            matchers.json_params_matcher(
                {
                    "filter": Filter(clusters=("c1",), min_hosts=4).model_dump(mode="json"),
                    "name": "amr",
                }
            )
        ],
    )
    answer = client.subscribe(Filter(clusters=("c1",), min_hosts=4), name="amr")
    assert answer.session == "s1"
    assert answer.clusters[0].cores_per_host == 8


def test_subscribe_defaults_to_an_open_filter(mock: responses.RequestsMock, client: BridgeClient):
    mock.post(f"{URL}/v1/sessions", status=201, json={"session": "s2", "clusters": []})
    assert client.subscribe().session == "s2"
    sent = json.loads(mock.calls[0].request.body)
    assert sent == {"filter": Filter().model_dump(mode="json"), "name": None}


def test_platform_calls(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/clusters", json=[CLUSTER])
    link = {"clusters": ["c1", "c2"], "latency_s": 0.01, "bandwidth_bps": 1e9}
    mock.get(f"{URL}/v1/interconnect", json={"links": [link]})
    mock.get(f"{URL}/v1/health", json=HEALTH)
    assert [c.name for c in client.clusters()] == ["c1"]
    assert client.interconnect().link("c2", "c1") is not None
    health = client.health()
    assert health.status == "ok"
    assert health.clusters["c1"].failures == 0


def test_session_calls(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/sessions", json=[SESSION])
    mock.get(f"{URL}/v1/sessions/s1", json=SESSION)
    mock.post(f"{URL}/v1/sessions/s1/done", json={"session": "s1", "state": "ghost"})
    mock.delete(f"{URL}/v1/sessions/s1", json={"session": "s1", "state": "cancelled"})
    assert [s.session for s in client.sessions()] == ["s1"]
    info = client.session("s1")
    assert info.state is AppState.WAITING
    assert info.request == Request(nodes={"c1": 4}, duration=3600)
    assert client.done("s1").state is AppState.GHOST
    assert client.withdraw("s1").state is AppState.CANCELLED


@pytest.mark.parametrize("form", ["model", "keywords"])
def test_request_puts_the_request(mock: responses.RequestsMock, client: BridgeClient, form: str):
    mock.put(
        f"{URL}/v1/sessions/s1/request",
        json={"session": "s1", "state": "waiting", "estimated_start": None},
        match=[matchers.json_params_matcher({"nodes": {"c1": 4}, "duration": 3600})],
    )
    if form == "model":
        answer = client.request("s1", Request(nodes={"c1": 4, "c2": 0}, duration=3600))
    else:
        answer = client.request("s1", nodes={"c1": 4}, duration=3600)
    assert answer.state is AppState.WAITING
    assert answer.estimated_start is None


def test_request_needs_one_form(client: BridgeClient):
    with pytest.raises(TypeError):
        client.request("s1", nodes={"c1": 4})
    with pytest.raises(TypeError):
        client.request("s1", Request(nodes={"c1": 4}, duration=60), duration=60)


def test_events_query_and_timeout(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(events_url(), json=page(event(3), event(4, "start")), match=polled(2, "12.5"))
    got = client.events("s1", after=2, wait=12.5)
    assert [e.seq for e in got] == [3, 4]
    assert isinstance(got[1], StartEvent)
    assert got[1].allocations["c1"].hosts == ["n1", "n2"]
    # The daemon may hold the answer `wait` seconds: the HTTP timeout must outlast it.
    assert mock.calls[0].request.req_kwargs["timeout"] == 12.5 + 5.0


def test_other_calls_use_the_plain_timeout(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/health", json=HEALTH)
    client.health()
    assert mock.calls[0].request.req_kwargs["timeout"] == 5.0


def test_events_refuses_waits_the_daemon_refuses(client: BridgeClient):
    with pytest.raises(ValueError, match="wait"):
        client.events("s1", wait=61)


def test_session_ids_are_quoted(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/sessions/..%2Fclusters%3Fx", json=SESSION)
    client.session("../clusters?x")
    assert mock.calls[0].request.path_url == "/v1/sessions/..%2Fclusters%3Fx"


def test_admin_calls(mock: responses.RequestsMock, client: BridgeClient):
    listed = {
        "session": "s1",
        "name": None,
        "owner": "alice",
        "state": "started",
        "clusters": ["c1"],
        "request": {"nodes": {"c1": 2}, "duration": 60},
        "estimated_start": 10,
        "created": 5,
        "started_at": 10,
        "done_at": None,
        "end": 70,
        "placeholders": [
            {
                "cluster": "c1",
                "name": "coorm-x-s1-c1",
                "status": "held",
                "start": 10,
                "end": 70,
                "hosts": 2,
                "host_names": ["n1", "n2"],
            }
        ],
    }
    only = [matchers.query_param_matcher({"user": "alice", "state": "started"})]
    mock.get(f"{URL}/v1/admin/sessions", json=[listed], match=only)
    reason = [matchers.json_params_matcher({"reason": "power work"})]
    mock.post(
        f"{URL}/v1/sessions/s1/cancel", json={"session": "s1", "state": "finished"}, match=reason
    )
    drained = {"cluster": "c1", "drained": True, "since": 5, "by": "ops", "reason": None}
    mock.post(f"{URL}/v1/admin/clusters/c%2F1/drain", json=drained)
    mock.post(f"{URL}/v1/admin/clusters/c%2F1/resume", json={"cluster": "c1", "drained": False})
    (found,) = client.all_sessions(user="alice", state="started")
    assert found.placeholders[0].host_names == ("n1", "n2")
    assert client.cancel("s1", "power work").state is AppState.FINISHED
    assert client.drain("c/1").by == "ops"  # the name is quoted: it cannot reach another path
    assert client.resume("c/1").drained is False


# -- authentication --------------------------------------------------------------------------


def test_bearer_header_only_with_a_token(mock: responses.RequestsMock):
    mock.get(f"{URL}/v1/health", json=HEALTH)
    mock.get(f"{URL}/v1/health", json=HEALTH)
    BridgeClient(URL, token=TOKEN).health()
    BridgeClient(URL).health()
    assert mock.calls[0].request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "Authorization" not in mock.calls[1].request.headers


# -- errors ----------------------------------------------------------------------------------


def test_error_body_becomes_bridge_error(mock: responses.RequestsMock, client: BridgeClient):
    mock.put(
        f"{URL}/v1/sessions/s1/request",
        status=409,
        json={"error": "started", "detail": "the session already started"},
    )
    with pytest.raises(BridgeError) as caught:
        client.request("s1", nodes={"c1": 1}, duration=60)
    assert (caught.value.status, caught.value.code) == (409, "started")
    assert caught.value.detail == "the session already started"
    assert not isinstance(caught.value, BridgeUnreachable)


def test_non_json_error_is_explained(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/health", status=502, body="<html>Bad Gateway</html>")
    with pytest.raises(BridgeError) as caught:
        client.health()
    assert caught.value.status == 502
    assert caught.value.code == "http_502"
    assert "Bad Gateway" in caught.value.detail
    assert "proxy" in caught.value.detail


@pytest.mark.parametrize(
    "body", ['{"status": "fine"}', "not json", '[{"name": "c1", "hosts": -1}]']
)
def test_malformed_answer_is_a_bridge_error(
    mock: responses.RequestsMock, client: BridgeClient, body: str
):
    mock.get(f"{URL}/v1/health", body=body)
    with pytest.raises(BridgeError) as caught:
        client.health()
    assert caught.value.code == "bad_answer"
    assert "does not match the protocol" in str(caught.value)
    assert caught.value.__cause__ is None  # no pydantic traceback chained in


def test_connection_error_is_unreachable(mock: responses.RequestsMock, client: BridgeClient):
    mock.get(f"{URL}/v1/health", body=requests.ConnectionError("refused"))
    with pytest.raises(BridgeUnreachable) as caught:
        client.health()
    assert caught.value.status == 0
    assert URL in caught.value.detail


# -- follow ----------------------------------------------------------------------------------


def test_follow_resumes_from_the_last_event(mock: responses.RequestsMock):
    delays: list[float] = []
    client = BridgeClient(URL, sleep=delays.append, stream=False)
    down = requests.ConnectionError("refused")
    restarting = {"error": "unavailable", "detail": "starting up"}
    mock.get(events_url(), json=page(event(1), event(2)), match=polled(0))
    mock.get(events_url(), body=down, match=polled(2))
    mock.get(events_url(), body=down, match=polled(2))
    mock.get(events_url(), status=503, json=restarting, match=polled(2))
    mock.get(events_url(), json=page(), match=polled(2))  # the wait ran out: still a success
    mock.get(events_url(), body=down, match=polled(2))
    mock.get(events_url(), json=page(event(3, "start")), match=polled(2))
    mock.get(events_url(), status=503, body="Service Unavailable", match=polled(3))
    mock.get(events_url(), json=page(event(4, "killed"), event(5, "ended")), match=polled(3))

    seen = list(client.follow("s1"))

    assert [e.seq for e in seen] == [1, 2, 3, 4, 5]
    assert [e.type for e in seen] == ["change", "change", "start", "killed", "ended"]
    assert delays == [1.0, 2.0, 4.0, 1.0, 1.0]  # doubling, reset by each answered poll


def test_follow_stops_at_ended_and_skips_repeats(mock: responses.RequestsMock):
    client = BridgeClient(URL, timeout=5.0, sleep=no_sleep, stream=False)
    mock.get(events_url(), json=page(event(1)), match=polled(0))
    # A misbehaving daemon resending event 1 must not make the launcher see it twice.
    mock.get(events_url(), json=page(event(1), event(2, "ended"), event(3)), match=polled(1))
    seen = list(client.follow("s1"))
    assert [e.seq for e in seen] == [1, 2]
    assert isinstance(seen[-1], EndedEvent)
    assert seen[-1].state is AppState.FINISHED


def test_follow_backoff_is_capped(mock: responses.RequestsMock):
    delays: list[float] = []
    client = BridgeClient(URL, sleep=delays.append, stream=False)
    for _ in range(5):
        mock.get(events_url(), body=requests.ConnectionError("refused"), match=polled(7, "5"))
    mock.get(events_url(), json=page(event(8, "ended")), match=polled(7, "5"))
    seen = list(client.follow("s1", after=7, wait=5, retry=0.5, max_retry=3))
    assert [e.seq for e in seen] == [8]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_follow_raises_refusals(mock: responses.RequestsMock):
    client = BridgeClient(URL, timeout=5.0, sleep=no_sleep, stream=False)
    mock.get(events_url(), json=page(event(1)), match=polled(0))
    gone = {"error": "not_found", "detail": "no session s1"}
    mock.get(events_url(), status=404, json=gone, match=polled(1))
    follow = client.follow("s1")
    assert next(follow).seq == 1
    with pytest.raises(BridgeError) as caught:
        next(follow)
    assert (caught.value.status, caught.value.code) == (404, "not_found")


# -- URLs and Unix sockets -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("unix:///run/coorm-bridge/bridge.sock", "http+unix://%2Frun%2Fcoorm-bridge%2Fbridge.sock"),
        ("/run/coorm-bridge/bridge.sock", "http+unix://%2Frun%2Fcoorm-bridge%2Fbridge.sock"),
        ("http://host:8642/", "http://host:8642"),
        ("https://bridge.example/coorm", "https://bridge.example/coorm"),
    ],
)
def test_base_url(given: str, expected: str):
    assert base_url(given) == expected


@pytest.mark.parametrize("bad", ["ftp://host", "bridge.sock", "unix://"])
def test_base_url_refuses(bad: str):
    with pytest.raises(ValueError, match="bridge URL"):
        base_url(bad)


def test_unix_url_reaches_the_encoded_socket(mock: responses.RequestsMock):
    mock.get("http+unix://%2Frun%2Fb.sock/v1/health", json=HEALTH)
    assert BridgeClient("unix:///run/b.sock").health().sessions == 1


def test_default_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("COORM_BRIDGE_URL", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert BridgeClient.default_url() == f"unix://{tmp_path}/coorm-bridge/bridge.sock"
    assert BridgeClient().url == BridgeClient.default_url()
    monkeypatch.setenv("COORM_BRIDGE_URL", URL)
    assert BridgeClient.default_url() == URL


#: Seconds the fake daemon holds an events answer, like a long-poll with nothing new yet.
HELD = 0.6


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/v1/health":
            self._answer(HEALTH)
        elif self.path.startswith("/v1/sessions/s1/events?"):
            time.sleep(HELD)
            self._answer(page())
        else:
            self.send_error(404)

    def _answer(self, document: object) -> None:
        body = json.dumps(document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # The default logs the peer address, which a Unix socket does not have.
        pass


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True  # do not wait for a held answer when the test ends

    def handle_error(self, request: object, client_address: object) -> None:
        # The timeout test hangs up on purpose: the broken pipe is expected, not worth a trace.
        pass


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    """A real HTTP server on a Unix socket: the adapter, encoding and timeouts for real."""
    path = tmp_path / "bridge.sock"
    with _Server(str(path), _Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            server.shutdown()
            thread.join()


def test_real_unix_socket(socket_path: Path):
    with BridgeClient(f"unix://{socket_path}", timeout=5.0) as client:
        assert client.health().clusters["c1"].status == "ok"
        assert client.health().status == "ok"  # the pooled connection is reusable


def test_real_long_poll_outlasts_the_timeout(socket_path: Path):
    with BridgeClient(str(socket_path), timeout=HELD / 2) as client:
        assert client.events("s1", wait=2 * HELD) == []  # held HELD < 2 * HELD + timeout
        with pytest.raises(BridgeUnreachable):
            client.events("s1", wait=0)


def test_missing_socket_is_unreachable(tmp_path: Path):
    with pytest.raises(BridgeUnreachable):
        BridgeClient(str(tmp_path / "absent.sock"), timeout=1.0).health()


def test_the_time_limit_offered_never_passes_the_allocations_end():
    start = StartEvent(
        seq=3, time=1000, end=1000 + 3599, allocations={"a": Allocation(hosts=["a1"])}
    )
    assert job_time_limit(start, now=1000) == 3540  # 59 whole minutes, not 60 rounded up
    assert job_time_limit(start, now=1000 + 3540) == 0  # less than a minute: too late
    assert job_time_limit(start, now=5000) == 0
    assert start.time_limit(1000, unit=1) == 3599
