"""The HTTP API (v1, docs/design.md §5; v2 for evolving applications) over the assembled service
(:mod:`coorm_bridge.service.wiring`), with FastAPI.

Who is calling: on the Unix socket, the peer's uid (read by
:mod:`coorm_bridge.http.server`); on TCP,
a bearer token from the configuration. Every error is ``{"error": code, "detail": text}`` with a
4xx status; an unexpected exception is logged and answered with a bare 500, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coorm_bridge import __version__
from coorm_bridge.http.errors import Forbidden, Unauthenticated, error_response, status_of
from coorm_bridge.http.metrics import BridgeCollector
from coorm_bridge.http.routes import HEARD_EVERY, metrics_router, router
from coorm_bridge.http.routes_v2 import router as router_v2
from coorm_bridge.http.routes_web import router as router_web
from coorm_bridge.http.waiting import Reads
from coorm_bridge.protocol import API_PREFIX, MAX_BODY
from coorm_bridge.protocol_v2 import API_V2_PREFIX
from coorm_bridge.service.errors import SessionError
from coorm_bridge.service.stats import Stats
from coorm_bridge.service.wiring import Service
from coorm_bridge.store import StoreFull
from coorm_bridge.web import pages

log = logging.getLogger(__name__)


class Notifier:
    """Wakes the long polls of a session when the bridge stored events for it (any thread), and
    all of them when the server stops. It counts the long polls waiting in ``stats``."""

    def __init__(self, stats: Stats, heard_every: float = HEARD_EVERY) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.stats = stats
        self.heard_every = heard_every
        self._living: dict[asyncio.Event, Callable[[], None]] = {}
        """The signs of life of the waiting long polls, given all at once every
        ``heard_every`` seconds by one timer: 10,000 polls each waking on a timer of its own
        took a whole core of the daemon (2,000 timeouts a second)."""
        self._beat: asyncio.TimerHandle | None = None
        self.passed = asyncio.Event()
        """Set (and replaced) after each pass: a request's answer waits on it, not a thread."""
        self.stopping = False
        """The server is stopping: nothing waits any more (see :meth:`stop`)."""

    def pass_ran(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._pass_ran)

    def _pass_ran(self) -> None:
        self.passed.set()
        self.passed = asyncio.Event()

    async def until_pass(self, after: int, wait: float) -> bool:
        """Until the pass count is above ``after`` or ``wait`` seconds passed (False), or the
        server stops meanwhile (True). The wait holds no thread."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while self.stats.passes <= after:
            if self.stopping:
                return True
            if (left := deadline - loop.time()) <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.passed.wait(), timeout=left)
        return False

    def wake(self, session_ids: list[str]) -> None:
        """The long polls of these sessions (any thread): one hop into the loop for them all."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, session_ids)

    def _wake(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            for waiter in self.waiters.get(session_id, ()):
                waiter.set()

    def stop(self) -> None:
        """The server stops (call in its loop: ``serve``'s ``on_stopping``). It would otherwise
        wait for the long polls to end by themselves (each may wait a minute), then cancel them
        after SHUTDOWN_TIMEOUT. Each is woken to answer now with what it has, maybe no event (its
        launcher polls again and finds the bridge gone, as after any stop), and later ones
        answer at once; a request waiting for its pass runs it."""
        self.stopping = True
        log.info("stopping: ending %d waiting stream(s) and long poll(s)", self.stats.long_polls)
        for waiters in self.waiters.values():
            for waiter in waiters:
                waiter.set()
        self._pass_ran()

    def register(self, session_id: str) -> asyncio.Event:
        waiter = asyncio.Event()
        self.waiters.setdefault(session_id, set()).add(waiter)
        self.stats.long_polls += 1
        return waiter

    def keep_alive(self, waiter: asyncio.Event, alive: Callable[[], None]) -> None:
        """While ``waiter``'s long poll waits, call ``alive`` every ``heard_every`` seconds (in
        the loop: it must not block)."""
        self._living[waiter] = alive
        if self._beat is None and self.loop is not None:
            self._beat = self.loop.call_later(self.heard_every, self._heartbeat)

    def _heartbeat(self) -> None:
        self._beat = None
        for alive in list(self._living.values()):
            try:
                alive()
            except Exception:  # in memory, never expected: the other polls still count
                log.exception("a long poll's sign of life failed")
        if self._living and self.loop is not None:
            self._beat = self.loop.call_later(self.heard_every, self._heartbeat)

    def unregister(self, session_id: str, waiter: asyncio.Event) -> None:
        self._living.pop(waiter, None)
        if not self._living and self._beat is not None:  # no timer while no poll waits
            self._beat.cancel()
            self._beat = None
        waiters = self.waiters.get(session_id)
        if waiters is not None and waiter in waiters:
            waiters.discard(waiter)
            self.stats.long_polls -= 1
            if not waiters:
                del self.waiters[session_id]


class LimitBody:
    """Refuses bodies above ``MAX_BODY`` bytes with a 413, declared or streamed, before the app
    parses anything (so nothing is half-done). Bodies are small: it reads them whole first."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await _too_large(self.limit)(scope, receive, send)
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay(message, receive), send)
                return
            body += message.get("body", b"")
            if len(body) > self.limit:
                await _too_large(self.limit)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": bytes(body), "more_body": False}
        await self.app(scope, _replay(whole, receive), send)


def _replay(first: Message, receive: Receive) -> Receive:
    """A receive channel that gives ``first`` and then whatever the connection sends."""
    pending = [first]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def _too_large(limit: int) -> JSONResponse:
    return _error(413, "too_large", f"the body exceeds the limit of {limit} bytes")


_error = error_response


def create_app(service: Service, tokens: Mapping[str, str] | None = None) -> FastAPI:
    """The ASGI application over ``service``; ``tokens`` maps bearer tokens to users (default:
    those in force in the service's settings, read at each request: a reload changes them).
    While it serves, its notifier is one of the service's listeners."""
    notifier = Notifier(service.stats)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BridgeCollector(service))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        notifier.loop = asyncio.get_running_loop()
        service.listeners.add(notifier.wake, notifier.pass_ran)
        yield
        service.listeners.remove(notifier.wake, notifier.pass_ran)
        notifier.loop = None

    app = FastAPI(
        title="coorm-bridge",
        version=__version__,
        description="CooRM launcher protocol: views, requests, co-allocated starts.",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.bridge = service.bridge
    app.state.jobs = service.jobs
    app.state.request_jobs = service.request_jobs
    app.state.admin = service.admin
    app.state.passes = service.passes
    app.state.stats = service.stats
    app.state.interval = service.config.policy.interval
    app.state.tokens = _token_source(service, tokens)
    app.state.notifier = notifier
    app.state.reads = Reads()
    app.state.registry = registry
    app.include_router(router, prefix=API_PREFIX)
    app.include_router(router_web, prefix=API_PREFIX)
    app.include_router(router_v2, prefix=API_V2_PREFIX)
    app.mount("/ui", pages(), name="ui")
    app.include_router(metrics_router)
    app.add_exception_handler(SessionError, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(Unauthenticated, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(Forbidden, _refused)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(StoreFull, _full)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _bug)
    app.add_middleware(LimitBody)
    return app


def _token_source(
    service: Service, tokens: Mapping[str, str] | None
) -> Callable[[], Mapping[str, str]]:
    """Where the identity reads the tokens at each request: the settings in force, or the
    fixed ``tokens`` a test gives."""
    if tokens is None:
        settings = service.settings
        return lambda: settings.current.tokens
    fixed = dict(tokens)
    return lambda: fixed


async def _refused(
    request: Request, error: SessionError | Unauthenticated | Forbidden
) -> JSONResponse:
    status, code = status_of(error)
    return _error(status, code, str(error))


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    issues = error.errors()
    if any(issue.get("type") == "json_invalid" for issue in issues):
        return _error(400, "malformed", "the body is not valid JSON")
    detail = "; ".join(
        f"{'.'.join(str(p) for p in issue.get('loc', ()))}: {issue.get('msg', 'invalid')}"
        for issue in issues
    )
    return _error(422, "invalid", detail)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "bad_request")
    return _error(error.status_code, code, str(error.detail))


#: When a full store was last said in the log (at most once a minute, however many requests).
_full_said = [-60.0]


async def _full(request: Request, error: StoreFull) -> JSONResponse:
    """A full disk is the admin's to free: 503, nothing changed (the transaction was rolled
    back), one log line a minute, no traceback."""
    now = time.monotonic()
    if now >= _full_said[0] + 60:
        _full_said[0] = now
        log.error("%s %s refused: %s", request.method, request.url.path, error)
    response = _error(
        503,
        "storage_full",
        "the bridge cannot save anything now (its state folder is full): nothing was changed; "
        "try again later",
    )
    response.headers["Retry-After"] = "10"
    return response


async def _bug(request: Request, error: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=error)
    return _error(500, "internal", "internal error: see the bridge's log")
