"""Who may hold a connection, and for how long: the server's own accept loop and the per-connection
timers that uvicorn's h11 protocol lacks.

Why not uvicorn's settings alone: uvicorn 0.54 times nothing before a request's first response
(its keep-alive timer starts after one), so a connection that sends nothing or one header byte
at a time stays open for ever; ``limit_concurrency`` answers 503 only once a whole request came
and counts no peer. Why not asyncio's ``create_server``: its accept loop hands a connection over
without its peer, and on EMFILE it logs a traceback for each of up to ``backlog`` tries per
wake-up (the 134 MB of log in issue 24). So each listening socket is read here
(:class:`Acceptor`): the peer (its uid from ``SO_PEERCRED`` on the Unix socket, its address on
TCP) is known at accept, before any TLS handshake, and counted against a cap per peer and one in
total (:class:`Guard`); a refused connection is closed at once. Accepted ones go to asyncio's
``connect_accepted_socket`` (TLS with a handshake bounded by the request limit) and to
:class:`GuardedH11Protocol`, uvicorn's h11 protocol with two timers: idle (a connection that
sends nothing, from connect and between requests: the keep-alive timer, armed at connect too)
and request (from a request's first byte until its headers and body are all in, not reset by
each byte). A long poll is in the app once its headers are in: neither timer runs meanwhile.
Accept errors and refusals are logged at most once per interval, with a count.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import h11
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from coorm_bridge.service.config import ConnectionSettings

log = logging.getLogger(__name__)

PEER_SCOPE_KEY = "coorm.peer"
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
#: Descriptors kept for what is not a connection (the store, the log, the adapter's commands,
#: the jobs' pipes): the total cap stays this far below the open-file limit.
RESERVED_FILES = 128
#: Accepts per wake-up of a listening socket, so that a burst does not starve the loop.
ACCEPT_BATCH = 64
#: After the system refused an accept (out of descriptors or memory): wait this long, then
#: accept again; meanwhile new connections wait in the backlog.
ACCEPT_PAUSE = 0.25
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """Who is at the other end of a Unix-socket connection, as the kernel saw it at connect."""

    pid: int
    uid: int
    gid: int


class Summary:
    """Log a kind of event at most once per ``interval``: the first at once, the others counted
    and told in one line when the interval is over (so a flood costs one line per interval)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.clock = interval, clock
        self._last: dict[str, float] = {}
        self._counts: Counter[str] = Counter()
        self._examples: dict[str, str] = {}
        self._timer: asyncio.TimerHandle | None = None

    def note(self, kind: str, message: str) -> None:
        now = self.clock()
        if now - self._last.get(kind, -self.interval) >= self.interval:
            self._last[kind] = now
            log.warning("%s (more like this are counted, told every %g s)", message, self.interval)
            return
        self._counts[kind] += 1
        self._examples[kind] = message
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.interval, self.flush)

    def flush(self) -> None:
        """Tell the counted ones (a timer calls this; so does the stop)."""
        self._timer = None
        now = self.clock()
        for kind, count in sorted(self._counts.items()):
            log.warning(
                "%d more in the last %g s; the last: %s", count, self.interval, self._examples[kind]
            )
            self._last[kind] = now
        self._counts.clear()
        self._examples.clear()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()


Peer = tuple[str, int | str]  # ("uid", 1000) or ("address", "192.0.2.1")


def describe(peer: Peer) -> str:
    return f"uid {peer[1]}" if peer[0] == "uid" else f"address {peer[1]}"


class Ticket:
    """One admitted connection's place in the counts, given back once (whichever of its end or a
    failed handshake comes first)."""

    __slots__ = ("_guard", "_released", "peer")

    def __init__(self, guard: Guard, peer: Peer) -> None:
        self._guard, self.peer, self._released = guard, peer, False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._guard.released(self.peer)


class Guard:
    """The caps on connections, per peer and in total, as in force: the configured ones, the
    total kept :data:`RESERVED_FILES` below the open-file limit and a peer's to half of that
    (one peer alone never takes every place)."""

    def __init__(self, settings: ConnectionSettings, summary: Summary) -> None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        room = settings.max_total if soft == resource.RLIM_INFINITY else soft - RESERVED_FILES
        self.total = max(2, min(settings.max_total, room))
        self.per_peer = max(1, min(settings.max_per_peer, self.total // 2))
        self.summary = summary
        self.open = 0
        self.by_peer: Counter[Peer] = Counter()

    def admit(self, peer: Peer) -> Ticket | None:
        if self.open >= self.total:
            self.summary.note("total", f"refused a connection: {self.total} are open (the cap)")
            return None
        if self.by_peer[peer] >= self.per_peer:
            self.summary.note(
                f"peer {peer}",
                f"refused a connection from {describe(peer)}: it holds {self.per_peer} (its cap)",
            )
            return None
        self.open += 1
        self.by_peer[peer] += 1
        return Ticket(self, peer)

    def released(self, peer: Peer) -> None:
        self.open -= 1
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]


def peer_of_socket(conn: socket.socket) -> tuple[Peer, PeerCredentials | None]:
    """The peer counted for a connection, and its credentials on a Unix socket (None when the
    kernel gives none: its requests stay anonymous, which the app refuses)."""
    if conn.family == socket.AF_UNIX:
        try:
            raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        except OSError:
            return ("uid", -1), None
        credentials = PeerCredentials(*_PEERCRED.unpack(raw))
        return ("uid", credentials.uid), credentials
    try:
        return ("address", str(conn.getpeername()[0])), None
    except OSError:
        return ("address", "?"), None


ProtocolFactory = Callable[[Ticket, PeerCredentials | None], asyncio.Protocol]


class Acceptor:
    """Accepts on one listening socket for the server (in place of an ``asyncio.Server``: uvicorn
    calls ``close`` and ``wait_closed`` at its stop)."""

    def __init__(
        self,
        sock: socket.socket,
        factory: ProtocolFactory,
        guard: Guard,
        settings: ConnectionSettings,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.sock, self.factory, self.guard, self.tls = sock, factory, guard, tls
        self.handshake = settings.request_timeout
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self._resume: asyncio.TimerHandle | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def start(self, backlog: int) -> None:
        self.sock.setblocking(False)
        self.sock.listen(backlog)
        self.loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as error:
                kind = "out of resources" if error.errno in _OUT_OF_RESOURCES else "failed"
                self.guard.summary.note(
                    f"accept {kind}", f"cannot accept a connection: {error.strerror or error}"
                )
                self._pause()
                return
            peer, credentials = peer_of_socket(conn)
            ticket = self.guard.admit(peer)
            if ticket is None:
                conn.close()
                continue
            conn.setblocking(False)
            task = self.loop.create_task(self._connect(conn, ticket, credentials))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def _pause(self) -> None:
        """Stop reading the listener for a moment: the kernel says it is ready again at once."""
        self.loop.remove_reader(self.sock.fileno())
        self._resume = self.loop.call_later(ACCEPT_PAUSE, self._unpause)

    def _unpause(self) -> None:
        self._resume = None
        if not self.closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    async def _connect(
        self, conn: socket.socket, ticket: Ticket, credentials: PeerCredentials | None
    ) -> None:
        tls = {} if self.tls is None else {"ssl_handshake_timeout": self.handshake}
        try:
            await self.loop.connect_accepted_socket(
                lambda: self.factory(ticket, credentials),
                sock=conn,
                ssl=self.tls,
                ssl_shutdown_timeout=self.handshake if self.tls is not None else None,
                **tls,
            )
        except (OSError, TimeoutError, asyncio.CancelledError):  # a failed or slow handshake
            ticket.release()
            conn.close()

    def close(self) -> None:
        self.closed = True
        if self._resume is not None:
            self._resume.cancel()
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
        for task in self._pending:
            task.cancel()

    async def wait_closed(self) -> None:
        return None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol for one admitted connection: its requests carry the Unix peer
    (:func:`peer_of` reads it), its idle and request timers close what sends too little, and
    its place in the guard's counts is given back when it ends. ``ticket``, ``credentials`` and
    ``request_timeout`` are set by the server before ``connection_made``."""

    ticket: Ticket | None = None
    credentials: PeerCredentials | None = None
    request_timeout: float = 10.0
    _request_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer, app = self.credentials, self.app
        if peer is not None:

            async def app_with_peer(scope: Scope, receive: Receive, send: Send) -> None:
                scope[PEER_SCOPE_KEY] = peer
                await app(scope, receive, send)

            self.app = app_with_peer
        # uvicorn arms its keep-alive (idle) timer only after a response: a connection that
        # never sends would stay for ever.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._time_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._time_request()  # a pipelined request's first bytes may be in already

    def _time_request(self) -> None:
        """Run the request timer while a request is coming in (its headers, then its body)."""
        state = self.conn.their_state
        coming = state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))
        if coming and not self.transport.is_closing():
            if self._request_timer is None:
                self._request_timer = self.loop.call_later(self.request_timeout, self._too_slow)
        elif self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _too_slow(self) -> None:
        self._request_timer = None
        if self.transport.is_closing():
            return
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
            self.cycle is None or not self.cycle.response_started
        ):
            self.transport.write(_TIMED_OUT)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None
        self._unset_keepalive_if_required()
        super().connection_lost(exc)
        if self.ticket is not None:
            self.ticket.release()
