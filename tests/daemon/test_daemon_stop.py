"""Stopping the daemon (SIGTERM, SIGINT) while launchers wait on it: their long polls are answered
at once (with no event: they poll again and find the daemon gone, as after any stop), every
connection is closed, the process exits 0 with nothing but a clean log, its socket removed, and
the next daemon finds the state as it was.

Each test holds its calls open, waits until the daemon serves them (``coorm_long_polls`` in
``/metrics``, or the session's state), then signals. Timeouts here are failsafes only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.core.model import Filter, Interconnect, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.selection import CurrentView
from tests import daemons
from tests.daemons import free_port

pytestmark = pytest.mark.daemon

TOKEN = "alice-token-0123456789"
#: Seconds every long poll here asks to wait: far more than any stop may take.
WAIT = 60
#: Long polls wait for events this far past the last one, which no session here gets: only the
#: stop answers them (a view that changes meanwhile would answer them before).
AHEAD = 1000
FAILSAFE = 120


class Daemon(daemons.Daemon):
    """Two clusters, the socket and TCP (a token for alice), passes every ``interval`` s."""

    def __init__(self, folder: Path, interval: float = 0.2) -> None:
        port = free_port()
        config = daemons.config(
            port=port, tokens={TOKEN: "alice"}, policy={"interval": interval, "fair_start": 2}
        )
        super().__init__(folder, config, daemons.PLATFORM, port)

    def signal_and_wait(self, *signals: int) -> tuple[int, float]:
        """Send ``signals`` one after the other; the exit status and the seconds to it."""
        assert self.process is not None
        began = time.monotonic()
        for sig in signals:
            os.kill(self.process.pid, sig)
        status = self.process.wait(FAILSAFE)
        return status, time.monotonic() - began


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


def until(test: Callable[[], bool], what: str) -> None:
    """Poll ``test`` until it holds (the failsafe only ends a test that would hang)."""
    deadline = time.monotonic() + FAILSAFE
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {FAILSAFE} s")
        time.sleep(0.02)


class LongPoll(threading.Thread):
    """One launcher's long poll through the client; ``answer`` is its events or its error."""

    def __init__(self, client: BridgeClient, session: str, after: int) -> None:
        super().__init__(daemon=True)
        self.client, self.session, self.after = client, session, after
        self.answer: object = None

    def run(self) -> None:
        try:
            self.answer = self.client.events(self.session, after=self.after, wait=WAIT)
        except Exception as error:
            self.answer = error
        finally:
            self.client.close()


def raw_unix(daemon: Daemon, target: str) -> socket.socket:
    """A connection of its own on the daemon's socket, with ``GET target`` sent on it."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(FAILSAFE)
    conn.connect(str(daemon.folder / "bridge.sock"))
    conn.sendall(f"GET {target} HTTP/1.1\r\nHost: bridge\r\n\r\n".encode())
    return conn


def read_answer(conn: socket.socket) -> tuple[int, dict[str, str], Any]:
    """One HTTP answer on ``conn`` (status, headers, JSON body), read by its Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the connection closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(headers["content-length"]):
        chunk = conn.recv(65536)
        assert chunk, "the connection closed in the middle of an answer"
        body += chunk
    return int(lines[0].split()[1]), headers, json.loads(body)


def events_path(session: str, after: int) -> str:
    return f"/v1/sessions/{session}/events?after={after}&wait={WAIT}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_answers_the_long_polls_closes_the_connections_and_keeps_the_state(
    make_daemon: Callable[..., Daemon], sig: signal.Signals
) -> None:
    daemon = make_daemon().start()
    with daemon.client() as client, daemon.client(TOKEN) as alice:
        mine = [client.subscribe(Filter(clusters=("c1",))).session for _ in range(3)]
        theirs = alice.subscribe().session
        client.request(mine[0], Request(nodes={"c1": 2}, duration=3600))
        until(lambda: client.session(mine[0]).state is AppState.STARTED, "a start")
        before = {sid: client.events(sid) for sid in mine} | {theirs: alice.events(theirs)}
    last = {sid: (events[-1].seq if events else 0) + AHEAD for sid, events in before.items()}
    # Launchers through the client, on the socket and over TCP; one on a raw connection (to
    # see its answer's headers); one whose launcher went away; one idle keep-alive connection.
    polls = [LongPoll(daemon.client(), sid, last[sid]) for sid in mine[:2]]
    polls.append(LongPoll(daemon.client(TOKEN), theirs, last[theirs]))
    for poll in polls:
        poll.start()
    raw = raw_unix(daemon, events_path(mine[2], last[mine[2]]))
    gone = raw_unix(daemon, events_path(mine[0], last[mine[0]]))
    idle = raw_unix(daemon, "/v1/health")
    assert read_answer(idle)[0] == 200
    until(lambda: daemon.long_polls() == 5, "5 long polls served")
    gone.close()

    status, took = daemon.signal_and_wait(sig)
    print(f"\nstop with 5 long polls open ({sig.name}): {took:.2f} s")

    assert status == 0
    for poll in polls:
        poll.join(FAILSAFE)
        assert poll.answer == [], poll.answer  # answered, with no event
    code, headers, body = read_answer(raw)
    assert (code, body, headers["connection"]) == (200, {"events": []}, "close")
    assert raw.recv(1) == b""  # closed after its answer
    assert idle.recv(1) == b""  # and the idle one too
    daemon.assert_stopped_cleanly()
    daemon.start()
    with daemon.client() as client, daemon.client(TOKEN) as alice:
        after = {sid: client.events(sid) for sid in mine} | {theirs: alice.events(theirs)}
        seen = {sid: events[-1].seq if events else 0 for sid, events in before.items()}
        resumed = {sid: client.events(sid, after=seen[sid]) for sid in mine}
        resumed[theirs] = alice.events(theirs, after=seen[theirs])
        assert client.session(mine[0]).state is AppState.STARTED
    for sid, events in before.items():
        # Kept: every event but the changes a newer one replaced (it carries what they did),
        # so a launcher that resumes after its last one ends with the view of reading them all.
        assert kept(after[sid])[: len(kept(events))] == kept(events)
        assert view(events + resumed[sid]) == view(after[sid])


def kept(events: list[Any]) -> list[Any]:
    """The events a newer one never replaces (coorm_bridge/store/compaction.py)."""
    return [e for e in events if e.type not in ("change", "placement_failed")]


def view(events: list[Any]) -> tuple[Any, ...]:
    """What a launcher keeps of ``events``: its view (as coorm-launch keeps it), the estimate."""
    current, estimate = CurrentView({}, Interconnect()), None
    for event in events:
        if event.type == "change":
            current.apply(event)
            estimate = event.estimated_start
    return current.caps, current.clusters, frozenset(current.interconnect.links), estimate


def test_a_following_launcher_reconnects_after_the_stop_and_misses_nothing(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon().start()
    with daemon.client() as client:
        sid = client.subscribe().session
        client.request(sid, Request(nodes={"c1": 2}, duration=3600))
        until(lambda: client.session(sid).state is AppState.STARTED, "a start")
    got: list[Any] = []
    retries: list[float] = []

    def pause(seconds: float) -> None:
        retries.append(seconds)
        time.sleep(seconds)

    def follow() -> None:
        with BridgeClient(daemon.unix, timeout=10, sleep=pause) as follower:
            got.extend(follower.follow(sid, wait=WAIT, retry=0.2, max_retry=1))

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    until(lambda: daemon.long_polls() == 1 and len(got) > 0, "the follower waiting")
    assert daemon.signal_and_wait(signal.SIGTERM)[0] == 0
    daemon.assert_stopped_cleanly()
    until(lambda: len(retries) > 0, "the follower retrying against the stopped daemon")
    daemon.start()
    with daemon.client() as client:
        client.done(sid)
        thread.join(FAILSAFE)
        assert not thread.is_alive()
        assert got == client.events(sid)
    assert [e.type for e in got][-1] == "ended"


def test_a_request_waiting_for_its_pass_is_answered_at_the_stop(
    make_daemon: Callable[..., Daemon],
) -> None:
    """A request's answer waits for the pass that places it: with passes an hour apart, the
    stop runs that pass rather than leave the launcher without its estimate."""
    daemon = make_daemon(interval=3600).start()
    with daemon.client() as client:
        sid = client.subscribe().session
    answers: list[Any] = []

    def put() -> None:
        with daemon.client() as client:
            try:
                answers.append(client.request(sid, Request(nodes={"c1": 2}, duration=60)))
            except Exception as error:
                answers.append(error)

    thread = threading.Thread(target=put, daemon=True)
    thread.start()
    with daemon.client() as client:
        until(lambda: client.session(sid).state is AppState.REQUEST_SENT, "the request stored")
    status, took = daemon.signal_and_wait(signal.SIGTERM)
    print(f"\nstop with a request waiting for its pass: {took:.2f} s")
    assert status == 0
    thread.join(FAILSAFE)
    [answer] = answers
    assert not isinstance(answer, Exception), answer
    assert answer.state is AppState.WAITING
    assert answer.estimated_start is not None
    daemon.assert_stopped_cleanly()
    daemon.start()
    with daemon.client() as client:
        assert client.session(sid).request == Request(nodes={"c1": 2}, duration=60)


def test_a_second_signal_during_the_stop_is_ignored(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon().start()
    with daemon.client() as client:
        sid = client.subscribe().session
        last = client.session(sid).last_seq + AHEAD
    poll = LongPoll(daemon.client(), sid, last)
    poll.start()
    until(lambda: daemon.long_polls() == 1, "the long poll served")
    # Back to back: the stop takes at least uvicorn's tick (0.1 s) to begin, so the second
    # signal always reaches a daemon that is stopping.
    assert daemon.signal_and_wait(signal.SIGTERM, signal.SIGINT)[0] == 0
    poll.join(FAILSAFE)
    assert poll.answer == []
    daemon.assert_stopped_cleanly()
    assert re.search(r"SIG(TERM|INT) during the stop: ignored", daemon.log.read_text())
