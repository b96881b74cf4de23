"""A session's events as a stream (server-sent events), the way a launcher waits for them now.

A long poll that comes back empty every ``wait`` seconds is a whole request each time: at
10,000 waiting launchers, hundreds a second with nothing to say. The stream stays open; the
bridge sends each event as it is stored, and a comment when it has said nothing for
``STREAM_PING`` seconds. A stream silent for twice as long is taken for a lost bridge.

A bridge from before streams ignores the ``Accept`` header and answers the read as an ordinary
(non-waiting) poll: :func:`open_stream` says so, and its caller long-polls from then on.
"""

from __future__ import annotations

from collections.abc import Iterator

import requests
import sseclient
from pydantic import TypeAdapter, ValidationError

from coorm_bridge.core.messages import Event
from coorm_bridge.core.model import describe
from coorm_bridge.protocol import STREAM_PING, EventPage

EVENT_STREAM = "text/event-stream"
_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
_EVENT_PAGE = TypeAdapter(EventPage)


class NotStreaming(Exception):
    """The bridge answered with a page of events, not a stream: it predates streams."""

    def __init__(self, page: EventPage) -> None:
        super().__init__("the bridge does not stream events")
        self.page = page


def read_timeout(timeout: float) -> float:
    """Seconds a stream may stay silent before its reader gives it up: twice the bridge's
    longest silence, and the usual answer time on top."""
    return 2 * STREAM_PING + timeout


def _whole(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The stream's whole events (each ends with a blank line; the bridge writes ``\n``),
    as they come: an event cut short by the end of the stream is dropped, as the standard
    says (the parser would hand it over), and read again after reconnecting."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        end = pending.rfind(b"\n\n")
        if end >= 0:
            yield pending[: end + 2]
            pending = pending[end + 2 :]


def events_of(answer: requests.Response) -> Iterator[Event]:
    """The events of an open stream (``answer``, read as it comes), until the bridge ends it;
    closes it when the caller stops reading. :class:`NotStreaming` when the answer is a page;
    ``requests`` errors when the connection breaks or stays silent too long; ValueError when
    an event is not one this client can read."""
    try:
        if not answer.headers.get("content-type", "").startswith(EVENT_STREAM):
            try:
                raise NotStreaming(_EVENT_PAGE.validate_json(answer.content))
            except ValidationError as error:
                raise ValueError(f"an unreadable page of events: {describe(error)}") from None
        source = _whole(answer.iter_content(chunk_size=None))  # each chunk as it comes
        for message in sseclient.SSEClient(source).events():
            try:
                yield _EVENT.validate_json(message.data)
            except ValidationError as error:
                raise ValueError(f"an unreadable event {message.id}: {describe(error)}") from None
    finally:
        answer.close()
