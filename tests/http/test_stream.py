"""The event stream in process, on a real server: a stream with nothing to say sends a comment
every ``STREAM_PING`` seconds (what tells its reader the bridge is there), and a streaming
launcher's horizon, given beside it, is the one the bridge keeps for its session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from coorm_bridge.http import waiting
from coorm_bridge.http.app import create_app
from coorm_bridge.http.server import BackgroundServer
from tests.http.api import ALICE, BOB
from tests.http.test_api import assert_error, auth, subscribe


@pytest.fixture
def app(service):
    return create_app(service, tokens={ALICE: "alice", BOB: "bob"})


@pytest.fixture
def server(app) -> Iterator[str]:
    """The daemon's app on loopback TCP; its base URL."""
    folder = Path(tempfile.mkdtemp(prefix="cbs-", dir="/tmp"))
    server = BackgroundServer(
        app, unix_path=folder / "b.sock", tcp=("127.0.0.1", 0), on_stopping=app.state.notifier.stop
    )
    try:
        server.start()
        yield server.addresses[1]
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_silent_stream_says_the_bridge_is_there_every_ping(server, monkeypatch):
    monkeypatch.setattr(waiting, "STREAM_PING", 0.2)
    with requests.Session() as http:
        sid = http.post(f"{server}/v1/sessions", json={}, headers=auth()).json()["session"]
        first = http.get(
            f"{server}/v1/sessions/{sid}/events", params={"wait": 60}, headers=auth(), timeout=90
        )
        after = first.json()["events"][-1]["seq"]  # its view: nothing comes after it
        headers = auth() | {"accept": "text/event-stream"}
        with http.get(
            f"{server}/v1/sessions/{sid}/events",
            params={"after": after},
            headers=headers,
            stream=True,
            timeout=30,
        ) as answer:
            text = ""
            for chunk in answer.iter_content(chunk_size=None):
                text += chunk.decode()
                if text.count(":\n\n") >= 3:
                    break
    assert text == ":\n\n" * 3  # nothing but comments


def test_a_stream_that_comes_during_the_stop_ends_at_once_with_what_there_is(server, app):
    with requests.Session() as http:
        sid = http.post(f"{server}/v1/sessions", json={}, headers=auth()).json()["session"]
        first = http.get(
            f"{server}/v1/sessions/{sid}/events", params={"wait": 60}, headers=auth(), timeout=90
        )
        assert first.json()["events"][0]["seq"] == 1  # its view, from the first pass
        app.state.notifier.stopping = True  # the stop began: its hook woke those waiting then
        headers = auth() | {"accept": "text/event-stream"}
        # Silent for 30 s (STREAM_PING) at most otherwise: far more than this timeout.
        answer = http.get(f"{server}/v1/sessions/{sid}/events", headers=headers, timeout=10)
    assert answer.text.startswith("id: 1\ndata: {")
    assert answer.text.endswith("\n\n")
    assert ":\n\n" not in answer.text  # not one ping: it did not wait


def test_a_streaming_launchers_horizon_is_kept_for_its_session(client, bridge):
    sid = subscribe(client)
    answer = client.put(
        f"/v1/sessions/{sid}/horizon", json={"after": 1, "horizon": 5000}, headers=auth()
    )
    assert answer.status_code == 204
    assert bridge.quiet.horizon(sid, 1) == 5000
    # For a later view the horizon says nothing; None: every change matters again.
    assert bridge.quiet.horizon(sid, 2) is None
    client.put(f"/v1/sessions/{sid}/horizon", json={"after": 1, "horizon": None}, headers=auth())
    assert bridge.quiet.horizon(sid, 1) is None


def test_only_the_owner_gives_a_horizon_and_a_bad_one_changes_nothing(client, bridge):
    sid = subscribe(client)
    client.put(f"/v1/sessions/{sid}/horizon", json={"after": 1, "horizon": 700}, headers=auth())
    other = client.put(
        f"/v1/sessions/{sid}/horizon", json={"after": 1, "horizon": 9}, headers=auth(BOB)
    )
    assert_error(other, 404, "not_found")
    for bad in ({"after": -1, "horizon": 9}, {"after": 1}, {"after": 1, "horizon": "soon"}):
        assert (
            client.put(f"/v1/sessions/{sid}/horizon", json=bad, headers=auth()).status_code == 422
        )
    assert bridge.quiet.horizon(sid, 1) == 700
