"""Serve the bridge's ASGI app with uvicorn on a Unix socket and optionally TCP, both pre-bound
and given to one uvicorn ``Server`` (one loop, one lifespan, one graceful stop). On the Unix socket
the peer's ``SO_PEERCRED`` is read once per connection and put in the scope of its requests: the
app reads it with ``peer_of(request.scope)``; TCP requests carry none (the app checks tokens).

TCP may be TLS: uvicorn's own SSL context (its ``ssl_certfile``/``ssl_keyfile``), on the TCP
socket only. uvicorn would give it to every socket; the Unix socket stays plain, its identity being
the peer's uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import ssl
import stat
import sys
import threading
from collections.abc import Callable, Generator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE

from coorm_bridge.http.connections import (
    PEER_SCOPE_KEY,
    Acceptor,
    Guard,
    GuardedH11Protocol,
    PeerCredentials,
    Summary,
    Ticket,
)
from coorm_bridge.http.signals import StopSignals
from coorm_bridge.http.tls import TlsFiles, tls_options
from coorm_bridge.service.config import ConnectionSettings

log = logging.getLogger(__name__)

#: Anyone who reaches the socket may connect: the app decides from the peer's uid (a site-wide
#: bridge needs that). A per-user bridge's default socket sits in a 0700 directory anyway.
DEFAULT_SOCKET_MODE = 0o666
BACKLOG = 2048  # bursts of launchers (re)connecting at once must not be refused
SHUTDOWN_TIMEOUT = 10  # seconds for running requests to finish at a stop (long polls end at once)

OnReady = Callable[[list[str]], None]
OnStopping = Callable[[], None]


class ServerError(Exception):
    """The bridge cannot listen or start; the message says where and why."""


def peer_of(scope: Mapping[str, Any]) -> PeerCredentials | None:
    """The Unix-socket peer of a request (pass ``request.scope``); None over TCP."""
    peer = scope.get(PEER_SCOPE_KEY)
    return peer if isinstance(peer, PeerCredentials) else None


def raise_open_files_limit(cap: int = 65536) -> int:
    """Raise the soft RLIMIT_NOFILE toward the hard one, as 1000 long polls exceed the usual 1024
    (never lowering it); the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft != resource.RLIM_INFINITY and soft < target:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _bind_unix(path: Path, mode: int, server: _Server) -> None:
    """Bind in a private directory, replacing only a stale socket; chmod to ``mode``."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        where = path.parent.stat()  # others able to write there could swap our socket for theirs
        shared = where.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not where.st_mode & stat.S_ISVTX
        if shared or where.st_uid not in (os.geteuid(), 0):
            raise ServerError(f"{path.parent} is not private to this user or root: not using it")
        if path.is_symlink() or (path.exists() and not path.is_socket()):
            raise ServerError(f"{path} exists and is not a socket: refusing to replace it")
        if path.exists():  # a stale socket (its bridge died) refuses connections
            with socket.socket(socket.AF_UNIX) as probe, suppress(ConnectionRefusedError):
                probe.settimeout(1.0)  # a listener too busy to accept times out: still refused
                probe.connect(str(path))
                raise ServerError(f"another bridge is already listening on {path}")
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.sockets.append(sock)
        sock.bind(str(path))
        server.unix_file = (path, path.lstat())
        path.chmod(mode)
    except OSError as exc:
        raise ServerError(f"cannot listen on {path}: {exc}") from exc
    server.addresses.append(f"unix://{path}")


def _bind_tcp(host: str, port: int, server: _Server, scheme: str = "http") -> None:
    try:
        found = socket.getaddrinfo(host or None, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
        family, kind, proto, _, address = found[0]
        sock = socket.socket(family, kind, proto)
        server.sockets.append(sock)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc
        raise ServerError(f"cannot listen on TCP {host}:{port}: {reason}") from exc
    shown, bound = sock.getsockname()[:2]
    shown = f"[{shown}]" if family == socket.AF_INET6 else shown
    server.addresses.append(f"{scheme}://{shown}:{bound}")


class _Server(uvicorn.Server):
    """uvicorn's server on our pre-bound sockets: tells when it listens and when it stops,
    cleans up at the end."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_ready: OnReady,
        on_stopping: OnStopping | None,
        signals: StopSignals,
        limits: ConnectionSettings,
    ) -> None:
        super().__init__(config)
        self.on_ready, self.on_stopping, self.signals = on_ready, on_stopping, signals
        self.limits = limits
        self.summary: Summary | None = None
        self.sockets: list[socket.socket] = []
        self.addresses: list[str] = []
        self.unix_file: tuple[Path, os.stat_result] | None = None  # ours to remove at the end

    def release(self) -> None:
        """Close the sockets; remove the socket file if it is still ours (not a successor's)."""
        for sock in self.sockets:
            sock.close()
        if self.unix_file is not None:
            path, ours = self.unix_file
            with suppress(OSError):
                if os.path.samestat(path.lstat(), ours):
                    path.unlink()

    def run_listening(self) -> None:
        """Serve until stopped; uvicorn's ``sys.exit`` on a failed app startup -> ServerError."""
        try:
            self.run(sockets=self.sockets)
        except SystemExit:
            raise ServerError("the application failed to start (its error is logged)") from None
        finally:
            self.release()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup for pre-bound sockets, except that its SSL context goes to TCP
        sockets only (uvicorn gives it to all of them), and that each socket is accepted on by
        an :class:`Acceptor` under the connection caps (not by asyncio's ``create_server``:
        see :mod:`coorm_bridge.http.connections`)."""
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        config, limits = self.config, self.limits
        self.summary = Summary(limits.log_interval)
        guard = Guard(limits, self.summary)
        log.debug(
            "connections: at most %d, %d per peer; %g s to send a request, %g s idle",
            guard.total,
            guard.per_peer,
            limits.request_timeout,
            limits.idle_timeout,
        )

        def create_protocol(ticket: Ticket, peer: PeerCredentials | None) -> asyncio.Protocol:
            protocol = GuardedH11Protocol(
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )
            protocol.ticket, protocol.credentials = ticket, peer
            protocol.request_timeout = limits.request_timeout
            return protocol

        self.servers = []
        for sock in sockets or self.sockets:
            tls = None if sock.family == socket.AF_UNIX else config.ssl
            acceptor = Acceptor(sock, create_protocol, guard, limits, tls)
            acceptor.start(config.backlog)
            self.servers.append(acceptor)  # type: ignore[arg-type]  # uvicorn: close, wait_closed
        self.started = True
        self.on_ready(list(self.addresses))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's graceful stop waits (up to SHUTDOWN_TIMEOUT) for the requests in progress
        and tells the app nothing until they are done: ``on_stopping`` first lets the app
        answer those that would wait on (long polls). uvicorn then closes the listeners and the
        idle connections and has the others closed after their answers, all before the app's
        tasks run again."""
        if self.on_stopping is not None:
            try:
                self.on_stopping()
            except Exception:
                log.exception("the application's stop hook failed")
        await super().shutdown(sockets)
        if self.summary is not None:
            self.summary.close()  # the refusals and accept errors still counted

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """SIGTERM/SIGINT stop gracefully, in the main thread only (as in uvicorn); unlike uvicorn,
        a second one does not force the exit, and the signal is not raised again afterwards: a
        stopped daemon returns normally (see :class:`StopSignals`)."""
        self.signals.install(self._signalled)
        try:
            yield
        finally:
            self.signals.detach()

    def _signalled(self) -> None:
        self.should_exit = True  # what uvicorn's handler does: the main loop sees it and stops


def serve(
    app: ASGIApp,
    *,
    unix_path: Path,
    tcp: tuple[str, int] | None = None,
    tls: TlsFiles | None = None,
    socket_mode: int = DEFAULT_SOCKET_MODE,
    on_ready: OnReady | None = None,
    on_stopping: OnStopping | None = None,
    signals: StopSignals | None = None,
    log_level: str = "warning",
    access_log: bool = False,
    connections: ConnectionSettings | None = None,
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then stop gracefully, remove the socket and return.
    ``tls``: serve TCP over TLS with these files. ``on_ready`` gets the addresses
    (``unix:///path``, ``http[s]://host:port`` with the real port) once all listen;
    ``on_stopping`` is called in the server's loop as the stop begins, before it waits for the
    requests in progress. ``connections``: the caps and time limits on connections (default:
    ``[bridge.connections]``'s defaults). ``signals``: the caller's, to keep the signals held
    after this returns (while it closes what it runs); by default they are held until this
    returns. Raises
    ServerError if a listener cannot be set up or the app fails to start."""
    with StopSignals() if signals is None else contextlib.nullcontext(signals) as held:
        server = BackgroundServer(
            app,
            unix_path=unix_path,
            tcp=tcp,
            tls=tls,
            socket_mode=socket_mode,
            on_ready=on_ready,
            on_stopping=on_stopping,
            log_level=log_level,
            access_log=access_log,
            connections=connections,
        )
        server.signals = held
        server._bind().run_listening()  # in this thread, with signal handlers if the main one


def _load(config: uvicorn.Config, tls: TlsFiles | None) -> None:
    """Load uvicorn's configuration now, so that unusable TLS files are a ServerError before
    anything listens (uvicorn would load it in its thread and raise there)."""
    try:
        config.load()
    except OSError as error:  # ssl.SSLError included
        ssl_reason = error.reason if isinstance(error, ssl.SSLError) else None
        reason = ssl_reason or error.strerror or str(error)
        files = "" if tls is None else f" with {tls.certificate} and {tls.key}"
        raise ServerError(f"cannot serve TLS{files}: {reason}") from error


class BackgroundServer:
    """``serve`` in a daemon thread (uvicorn installs no signal handlers there), for tests and
    embedding: ``start()`` returns the addresses once listening, ``stop()`` ends it (calling
    ``on_stopping`` in the server's loop first, as ``serve`` does)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        unix_path: Path,
        tcp: tuple[str, int] | None = None,
        tls: TlsFiles | None = None,
        socket_mode: int = DEFAULT_SOCKET_MODE,
        on_ready: OnReady | None = None,
        on_stopping: OnStopping | None = None,
        log_level: str = "warning",
        access_log: bool = False,
        connections: ConnectionSettings | None = None,
    ) -> None:
        self.app, self.unix_path, self.tcp, self.socket_mode = app, unix_path, tcp, socket_mode
        self.tls = tls
        self.on_ready, self.log_level, self.access_log = on_ready, log_level, access_log
        self.on_stopping = on_stopping
        self.connections = connections or ConnectionSettings()
        self.signals = StopSignals()  # none come to its thread: serve() gives the main thread's
        self.addresses: list[str] = []
        self._ready = threading.Event()
        self._error: ServerError | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> _Server:
        if self._server is not None:
            raise RuntimeError("this server was already started")
        raise_open_files_limit()
        config = uvicorn.Config(
            self.app,
            http=GuardedH11Protocol,
            ws="none",  # a plain HTTP API; an upgraded connection would bypass the peer wrapper
            lifespan="on",  # a failing app startup must stop the bridge, not be ignored
            log_config=None,  # the daemon's own logging set-up decides where messages go
            log_level=self.log_level,
            access_log=self.access_log,
            proxy_headers=False,  # nobody may claim another client address (X-Forwarded-For)
            limit_concurrency=None,
            backlog=BACKLOG,
            timeout_keep_alive=self.connections.idle_timeout,  # between requests, and at first
            timeout_graceful_shutdown=SHUTDOWN_TIMEOUT,
            **tls_options(self.tls),
        )
        _load(config, self.tls)
        server = _Server(config, self._now_ready, self.on_stopping, self.signals, self.connections)
        try:
            _bind_unix(Path(os.path.abspath(self.unix_path)), self.socket_mode, server)
            if self.tcp is not None:
                _bind_tcp(*self.tcp, server, "http" if self.tls is None else "https")
        except BaseException:
            server.release()
            raise
        self._server = server
        return server

    def _now_ready(self, addresses: list[str]) -> None:
        self.addresses = addresses
        if self.on_ready is not None:
            self.on_ready(addresses)
        self._ready.set()

    def _run(self, server: _Server) -> None:
        try:
            server.run_listening()
        except BaseException as exc:  # reported in the caller's thread by start() or stop()
            failure = exc if isinstance(exc, ServerError) else ServerError(f"it failed: {exc!r}")
            self._error = failure
        finally:
            self._ready.set()

    def start(self, timeout: float = 10.0) -> list[str]:
        """Bind (ServerError at once if impossible), serve in a thread, wait until listening."""
        self._thread = threading.Thread(target=self._run, args=(self._bind(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()  # raises what failed in the thread, if anything did
            raise ServerError(f"the server did not start within {timeout} s")
        return self.addresses

    def stop(self, timeout: float = 30.0) -> None:
        """Stop gracefully (forcibly after ``timeout``), wait; raise what failed in the thread."""
        if self._server is None:
            return
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._server.force_exit = True  # still running after ``timeout``: cut it short
            self._thread.join(timeout)
        error, self._error = self._error, None
        if error is not None:
            raise error

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
