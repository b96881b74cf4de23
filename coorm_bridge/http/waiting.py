"""How a launcher waits for its session's events: a long poll, or an event stream.

Both read the store when they come and each time the session's events change (the notifier wakes
them), never on a timer; while they wait, the notifier's one timer tells the bridge every
``HEARD_EVERY`` seconds that their launcher is alive (in memory). Reads woken together are made
together (:class:`Reads`).

- **The long poll** (``GET .../events?wait=S``) answers with the events after ``after`` once
  there are some, or with none after ``wait`` seconds; its launcher then polls again. At 10,000
  waiting launchers that is hundreds of requests a second with nothing to say, each a whole
  request through the HTTP stack.
- **The stream** (the same read with ``Accept: text/event-stream``) stays open: each event goes
  out as server-sent events (``id: <seq>``, ``data: <event JSON>``) as soon as it is stored, and a
  comment every ``STREAM_PING`` seconds when there is nothing to say. An idle launcher costs
  nothing but that comment. It ends at the server's stop; its launcher reconnects with
  ``Last-Event-ID``, as the standard says, and misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from anyio import to_thread
from fastapi import Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from coorm_bridge.protocol import STREAM_PING
from coorm_bridge.service.errors import NotFound
from coorm_bridge.service.listening import Listening

if TYPE_CHECKING:
    from coorm_bridge.http.app import Notifier

log = logging.getLogger(__name__)

#: The media type that asks ``GET .../events`` for a stream.
EVENT_STREAM = "text/event-stream"


class Reads:
    """The reads of woken long polls and streams, gathered: those woken in one turn of the loop
    (a pass that changed a thousand views wakes a thousand) are read by one call in a worker
    thread, not a thousand, each of which would cost a hop there and back."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []

    async def read(self, call: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        if not self.pending:  # after the other readers woken in this turn asked too
            loop.call_soon(lambda: loop.create_task(self._run()))
        self.pending.append((call, done))
        return await done

    async def _run(self) -> None:
        calls, self.pending = self.pending, []
        outcomes = await to_thread.run_sync(lambda: [_outcome(call) for call, _ in calls])
        for (_, done), (value, error) in zip(calls, outcomes, strict=True):
            if done.cancelled():
                continue
            if error is None:
                done.set_result(value)
            else:
                done.set_exception(error)


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as error:  # handed to its own reader, which answers with it
        return None, error


async def _woken(waiter: asyncio.Event, deadline: float) -> bool:
    """Wait for ``waiter`` until ``deadline`` (False then); True when woken, with ``waiter``
    cleared before the caller reads (a change committed during the read wakes it again). One
    timer at the deadline, no task and no timeout per wait."""
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        waiter.set()

    timer = asyncio.get_running_loop().call_at(deadline, expire)
    try:
        await waiter.wait()
    finally:
        timer.cancel()
    waiter.clear()
    return not expired


async def long_poll(
    request: Request, session_id: str, wait: float, listen: Callable[[], Listening]
) -> Response:
    """The events ``listen`` finds (those of ``session_id`` after some number), waiting up to
    ``wait`` seconds for the first one, or until the server stops: the long poll of both API
    versions. The answer is an :class:`~coorm_bridge.protocol.EventPage` made of the events'
    JSON as stored. A stop answers at once with nothing new: the launcher polls again and finds
    the bridge gone."""
    notifier: Notifier = request.app.state.notifier
    reads: Reads = request.app.state.reads
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    waiter = notifier.register(session_id)
    try:
        listening: Listening = await reads.read(listen)
        found = listening.first
        if not found and not notifier.stopping and loop.time() < deadline:
            notifier.keep_alive(waiter, listening.alive)
            while not found and await _woken(waiter, deadline) and not notifier.stopping:
                found = await reads.read(listening.read)
        headers = {"connection": "close"} if notifier.stopping else None
        # The stored JSON of each event, validated when it was written: no parsing again.
        body = '{"events":[' + ",".join(text for _, text in found) + "]}"
        return Response(body, media_type="application/json", headers=headers)
    finally:
        notifier.unregister(session_id, waiter)


async def event_stream(
    request: Request, session_id: str, listen: Callable[[], Listening]
) -> Response:
    """The session's events as a stream (see the module): its first read is made here, so
    that a refusal (not the caller's session) is a plain error answer."""
    notifier: Notifier = request.app.state.notifier
    reads: Reads = request.app.state.reads
    waiter = notifier.register(session_id)  # before the read: a change during it wakes
    try:
        listening: Listening = await reads.read(listen)
    except BaseException:
        notifier.unregister(session_id, waiter)
        raise
    return EventStream(session_id, listening, waiter, notifier, reads)


class EventStream(Response):
    """A stream of one session's events, until the reader leaves or the server stops; it holds
    its reader's registration with the notifier and gives it back when it ends, however."""

    media_type = EVENT_STREAM

    def __init__(
        self,
        session_id: str,
        listening: Listening,
        waiter: asyncio.Event,
        notifier: Notifier,
        reads: Reads,
    ) -> None:
        self.status_code = 200
        self.background = None
        # No proxy may buffer it or keep it; it has no length.
        self.init_headers({"cache-control": "no-store", "x-accel-buffering": "no"})
        self.session_id, self.listening, self.waiter = session_id, listening, waiter
        self.notifier, self.reads = notifier, reads
        self.gone = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = asyncio.get_running_loop().create_task(self._until_gone(receive))
        try:
            self.notifier.keep_alive(self.waiter, self.listening.alive)
            with contextlib.suppress(OSError):  # the reader left: nothing more to tell it
                start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                await send(start)
                await self._send(self.listening.first, send)
                await self._follow(send)
        finally:
            watch.cancel()
            self.notifier.unregister(self.session_id, self.waiter)

    async def _follow(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STREAM_PING
        while not self.notifier.stopping:  # one that came during the stop ends at once
            woken = await _woken(self.waiter, deadline)
            if self.gone:
                return
            if self.notifier.stopping:
                break
            if not woken:  # nothing for STREAM_PING seconds: the bridge is still there
                await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
                deadline = loop.time() + STREAM_PING
                continue
            try:
                found = await self.reads.read(self.listening.read)
            except NotFound:  # the session is gone (purged): its reader is told by a 404
                break
            except Exception:  # its reader reconnects, and reads again
                log.exception("the event stream of session %s failed", self.session_id)
                break
            if found:
                await self._send(found, send)
                deadline = loop.time() + STREAM_PING
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send(self, found: list[tuple[int, str]], send: Send) -> None:
        if not found:
            return
        body = "".join(f"id: {seq}\ndata: {text}\n\n" for seq, text in found)
        await send({"type": "http.response.body", "body": body.encode(), "more_body": True})
        self.listening.sent(found[-1][0])

    async def _until_gone(self, receive: Receive) -> None:
        """Wakes the stream when its reader leaves (its connection closed)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        self.waiter.set()
