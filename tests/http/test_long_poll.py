"""A waiting long poll costs no store read: it reads when it comes and when its session's events
change, and meanwhile only tells the bridge its launcher is alive; a pass that changes many
views wakes them all in one hop into the server's loop."""

from __future__ import annotations

import json
import threading

from coorm_bridge.core.model import Filter
from coorm_bridge.protocol import EventPage
from tests.http.test_api import auth, subscribe


def test_a_waiting_long_poll_reads_the_store_once_and_stays_alive(client, bridge, monkeypatch):
    sid = subscribe(client)
    first = client.get(f"/v1/sessions/{sid}/events", params={"wait": 30}, headers=auth())
    after = first.json()["events"][-1]["seq"]
    # Many signs of life in one wait (the notifier gives those of every waiting poll at once).
    monkeypatch.setattr(client.app.state.notifier, "heard_every", 0.01)
    reads, heard = [], []
    events, alive = bridge.store.event_bodies, bridge.silence.heard
    monkeypatch.setattr(
        bridge.store, "event_bodies", lambda *a, **k: (reads.append(a), events(*a, **k))[1]
    )
    monkeypatch.setattr(bridge.silence, "heard", lambda s, now: (heard.append(s), alive(s, now))[1])
    page = client.get(
        f"/v1/sessions/{sid}/events", params={"after": after, "wait": 1}, headers=auth()
    )
    assert page.json() == {"events": []}
    assert len(reads) == 1  # when it came; nothing changed after
    assert len(heard) > 1  # and it said its launcher is alive while it waited
    assert set(heard) == {sid}


def test_a_change_while_waiting_is_read_and_answered(client, bridge):
    sid = subscribe(client)
    first = client.get(f"/v1/sessions/{sid}/events", params={"wait": 30}, headers=auth())
    after = first.json()["events"][-1]["seq"]
    answered = {}

    def poll():
        answered["page"] = client.get(
            f"/v1/sessions/{sid}/events", params={"after": after, "wait": 60}, headers=auth()
        ).json()

    waiting = threading.Thread(target=poll)
    waiting.start()
    notifier = client.app.state.notifier
    while sid not in notifier.waiters:  # the poll waits: a withdrawal now must wake it
        threading.Event().wait(0.01)
    assert client.delete(f"/v1/sessions/{sid}", headers=auth()).status_code == 200
    waiting.join()
    assert "ended" in [e["type"] for e in answered["page"]["events"]]


def test_one_commit_wakes_every_session_it_changed_in_one_call(service):
    calls = []

    def passed():
        pass

    service.listeners.add(calls.append, passed)
    try:
        bridge = service.bridge
        first = bridge.subscribe("alice", Filter(), "a").session
        second = bridge.subscribe("bob", Filter(), "b").session
        calls.clear()
        now = bridge.now()
        with bridge.recorder.batch():
            for sid in (first, second, first):
                bridge.recorder.emit(sid, {"type": "error", "time": now, "reason": "told"})
        assert calls == [[first, second]]  # each once, in one call, after the commit
    finally:
        service.listeners.remove(calls.append, passed)


def test_the_stored_events_go_out_as_the_protocol_writes_them(client):
    sid = subscribe(client)
    client.put(
        f"/v1/sessions/{sid}/request", json={"nodes": {"c1": 1}, "duration": 60}, headers=auth()
    )
    answer = client.get(f"/v1/sessions/{sid}/events", params={"wait": 30}, headers=auth())
    assert answer.headers["content-type"] == "application/json"
    page = EventPage.model_validate_json(answer.content)  # strict: unknown fields refused
    assert page.events
    assert json.loads(answer.content) == json.loads(page.model_dump_json())
