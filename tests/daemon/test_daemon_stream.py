"""A session's events as a stream from a real daemon (``Accept: text/event-stream``): each event
as it is stored, numbered for ``Last-Event-ID``; one waiting reader while it is open, none once
its reader left; a stop ends every stream at once and the launcher resumes after the restart
without losing or repeating an event; an open stream keeps its session alive; horizons go
beside it. Timeouts here are failsafes only."""

from __future__ import annotations

import functools
import json
import queue
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from tests import daemons
from tests.daemon.test_daemon_stop import FAILSAFE, TOKEN, Daemon, until

pytestmark = pytest.mark.daemon


@pytest.fixture
def make_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    return functools.partial(make_daemon, cls=Daemon)


class RawStream:
    """A stream read on a connection of its own on the daemon's socket: its head, then its
    events (number, JSON) and comments as they come, and whether it ended."""

    def __init__(self, daemon: Daemon, session: str, headers: str = "") -> None:
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.settimeout(FAILSAFE)
        self.conn.connect(str(daemon.folder / "bridge.sock"))
        head = f"Accept: text/event-stream\r\n{headers}"
        target = f"/v1/sessions/{session}/events"
        self.conn.sendall(f"GET {target} HTTP/1.1\r\nHost: bridge\r\n{head}\r\n".encode())
        self.data = b""
        while b"\r\n\r\n" not in self.data:
            self.data += self._recv()
        raw_head, _, self.data = self.data.partition(b"\r\n\r\n")
        lines = raw_head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        self.text = ""  # the body, unchunked
        self.ended = False

    def _recv(self) -> bytes:
        chunk = self.conn.recv(65536)
        if not chunk:
            raise EOFError("the daemon closed the connection")
        return chunk

    def _unchunk(self) -> None:
        """Move the whole chunks received into ``text`` (the body is chunked: it has no
        length)."""
        while b"\r\n" in self.data:
            size_line, _, rest = self.data.partition(b"\r\n")
            size = int(size_line, 16)
            if len(rest) < size + 2:
                return
            if size == 0:
                self.ended = True
            self.text += rest[:size].decode()
            self.data = rest[size + 2 :]

    def messages(self) -> Iterator[tuple[int | None, Any]]:
        """Each message as it comes: (number, event) or (None, None) for a comment; ends with
        the stream."""
        while True:
            self._unchunk()
            while "\n\n" in self.text:
                block, _, self.text = self.text.partition("\n\n")
                fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
                if "id" in fields:
                    yield int(fields["id"]), json.loads(fields["data"])
                else:
                    yield None, None
            if self.ended:
                return
            self.data += self._recv()

    def until(self, kind: str) -> list[tuple[int, Any]]:
        """The events up to the first of type ``kind``."""
        seen: list[tuple[int, Any]] = []
        for seq, event in self.messages():
            if seq is not None:
                seen.append((seq, event))
                if event["type"] == kind:
                    return seen
        raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def test_a_stream_tells_each_event_as_it_comes_numbered_for_resuming(make_daemon):
    daemon = make_daemon().start()
    with daemon.client() as client:
        sid = client.subscribe(Filter(clusters=("c1",))).session
        stream = RawStream(daemon, sid)
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["transfer-encoding"] == "chunked"
        assert stream.headers["cache-control"] == "no-store"
        client.request(sid, Request(nodes={"c1": 2}, duration=3600))
        got = stream.until("start")
        assert [seq for seq, _ in got] == sorted({seq for seq, _ in got})  # in order, once
        assert all(event["seq"] == seq for seq, event in got)
        assert got == [(e.seq, e.model_dump(mode="json")) for e in client.events(sid)][: len(got)]
        client.done(sid)
        assert stream.until("ended")[-1][1]["state"] == "finished"
        # Resuming after an event (as a browser does after a break) gives what came after it.
        last_but_one = [e.seq for e in client.events(sid)][-2]
        again = RawStream(daemon, sid, f"Last-Event-ID: {last_but_one}\r\n")
        assert [seq for seq, _ in again.until("ended")] == [e.seq for e in client.events(sid)][-1:]
        bad = RawStream(daemon, sid, "Last-Event-ID: 1e3\r\n")
        assert bad.status == 422


def test_an_open_stream_is_one_waiting_reader_and_is_given_back_when_its_reader_leaves(
    make_daemon,
):
    daemon = make_daemon().start()
    with daemon.client() as client:
        sids = [client.subscribe(Filter(clusters=("c1",))).session for _ in range(3)]
    streams = [RawStream(daemon, sid) for sid in sids]
    until(lambda: daemon.long_polls() == 3, "3 streams waiting")
    streams[0].conn.close()
    until(lambda: daemon.long_polls() == 2, "a stream given back when its reader left")
    for stream in streams[1:]:
        stream.conn.close()
    until(lambda: daemon.long_polls() == 0, "every stream given back")


def test_another_users_session_is_not_streamed(make_daemon):
    daemon = make_daemon().start()
    with daemon.client() as client:
        sid = client.subscribe().session
    with daemon.client(TOKEN) as alice:
        stream = alice._stream(sid, 0, None)
        with pytest.raises(BridgeError) as caught:
            next(stream)
        assert caught.value.status == 404
        with pytest.raises(BridgeError) as told:
            alice.tell_horizon(sid, 1, 100)
        assert told.value.status == 404
    assert daemon.long_polls() == 0


class Follower(threading.Thread):
    """A launcher's event thread: ``client.follow`` into ``events`` (its error too)."""

    def __init__(self, client: BridgeClient, session: str) -> None:
        super().__init__(daemon=True)
        self.client, self.session = client, session
        self.events: queue.Queue[Any] = queue.Queue()

    def run(self) -> None:
        try:
            for event in self.client.follow(self.session, retry=0.1, max_retry=0.5):
                self.events.put(event)
            self.events.put("over")
        except Exception as error:
            self.events.put(error)

    def next(self) -> Any:
        item = self.events.get(timeout=FAILSAFE)
        if isinstance(item, Exception):
            raise item
        return item


def test_a_stop_ends_every_stream_at_once_and_the_launcher_resumes_after_the_restart(
    make_daemon,
):
    daemon = make_daemon().start()
    with daemon.client() as client:
        sids = [client.subscribe(Filter(clusters=("c1",))).session for _ in range(4)]
    followers = [Follower(daemon.client(), sid) for sid in sids[:2]]
    followers.append(Follower(daemon.client(TOKEN), sids[2]))  # over TCP: alice's, refused
    for follower in followers:
        follower.start()
    raw = RawStream(daemon, sids[3])
    assert next(seq for seq, _ in raw.messages() if seq is not None) == 1  # its view
    first = {sid: follower.next() for sid, follower in zip(sids, followers[:2], strict=False)}
    with pytest.raises(BridgeError):  # not alice's session
        followers[2].next()
    until(lambda: daemon.long_polls() == 3, "3 streams waiting")

    status, took = daemon.signal_and_wait(signal.SIGTERM)
    print(f"\nstop with 3 streams open: {took:.2f} s")
    assert status == 0
    assert [seq for seq, _ in raw.messages() if seq is not None] == []  # ended, nothing new
    assert raw.ended
    assert raw.conn.recv(1) == b""  # and its connection closed
    daemon.assert_stopped_cleanly()

    daemon.start()
    with daemon.client() as client:
        for sid in sids[:2]:
            client.withdraw(sid)
        wanted = {sid: client.events(sid) for sid in sids[:2]}
    for sid, follower in zip(sids, followers[:2], strict=False):
        # Every event after the first, once and in order, to the end: none lost across the
        # restart.
        got = [first[sid]]
        while (item := follower.next()) != "over":
            got.append(item)
        assert [e.seq for e in got] == sorted({e.seq for e in got})
        assert got[-1] == wanted[sid][-1]
        assert got[-1].type == "ended"
        assert got[-1].state is AppState.CANCELLED


def test_an_open_stream_keeps_its_session_alive_and_a_silent_one_does_not(make_daemon):
    port = daemons.free_port()
    config = daemons.config(port=port, tokens={TOKEN: "alice"}, session_timeout=10, admins=["root"])
    daemon = make_daemon(config, daemons.PLATFORM, port, cls=daemons.Daemon).start()
    with daemon.client(TOKEN) as alice:
        kept, silent = (alice.subscribe(Filter(clusters=("c1",))).session for _ in range(2))
    follower = Follower(daemon.client(TOKEN), kept)
    follower.start()
    assert follower.next().seq == 1
    # An admin's reads (root, over the socket) are no word from alice's launchers.
    with daemon.client() as admin:
        until(lambda: admin.session(silent).state is AppState.CANCELLED, "the silent one ended")
        assert admin.session(kept).state is AppState.SUBMITTED  # still there, without a request
    assert follower.events.empty()  # its stream is still open: nothing ended it
