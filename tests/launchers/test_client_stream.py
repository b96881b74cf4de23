"""The launcher client follows a session's events as a stream (server-sent events): in order,
resumed after the last one when the stream breaks or the bridge stops it, its horizons sent
beside it, and long polls from then on when the bridge predates streams."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator

import pytest
import requests
import responses
from responses import matchers

from coorm_bridge.launchers.client import BridgeClient, BridgeError, UntrustedBridge
from tests.launchers.test_client import URL, event, events_url, page, polled

STREAM = "text/event-stream"


def sse(*events: dict[str, object], comments: int = 0) -> str:
    """A stream's text as the bridge writes it, with ``comments`` pings first."""
    return ":\n\n" * comments + "".join(
        f"id: {e['seq']}\ndata: {json.dumps(e)}\n\n" for e in events
    )


def streamed(after: int, horizon: int | None = None) -> list[object]:
    params = {"after": str(after)} | ({} if horizon is None else {"horizon": str(horizon)})
    return [matchers.query_param_matcher(params), matchers.header_matcher({"accept": STREAM})]


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def test_the_stream_is_read_in_order_and_resumed_after_its_last_event(mock):
    delays: list[float] = []
    client = BridgeClient(URL, sleep=delays.append)
    # Pings, two events, then the bridge ends the stream (its stop): the client reads again
    # from event 2 after a pause; the connection fails once; then the rest.
    mock.get(
        events_url(),
        body=sse(event(1), event(2), comments=2),
        content_type=STREAM,
        match=streamed(0),
    )
    mock.get(events_url(), body=requests.ConnectionError("refused"), match=streamed(2))
    mock.get(
        events_url(),
        body=sse(event(3, "start"), event(4, "ended")),
        content_type=STREAM,
        match=streamed(2),
    )
    seen = list(client.follow("s1"))
    assert [e.seq for e in seen] == [1, 2, 3, 4]
    assert [e.type for e in seen] == ["change", "change", "start", "ended"]
    assert delays == [1.0, 2.0]  # the ended stream, then the refused connection


def test_a_stream_that_breaks_in_the_middle_is_resumed_without_repeats(mock):
    client = BridgeClient(URL, sleep=lambda delay: None)
    broken = sse(event(1), event(2))[:-30]  # cut inside event 2: only event 1 is whole
    mock.get(events_url(), body=broken, content_type=STREAM, match=streamed(0))
    # A misbehaving bridge resending event 1 must not make the launcher see it twice.
    mock.get(
        events_url(),
        body=sse(event(1), event(2), event(3, "ended")),
        content_type=STREAM,
        match=streamed(1),
    )
    assert [e.seq for e in client.follow("s1")] == [1, 2, 3]


def test_a_bridge_without_streams_is_long_polled_from_then_on(mock):
    client = BridgeClient(URL, sleep=lambda delay: pytest.fail("no pause expected"))
    # An older bridge ignores Accept: it answers the read (no wait) with a page of events.
    mock.get(events_url(), json=page(event(1)), match=streamed(0))
    mock.get(events_url(), json=page(), match=polled(1))
    mock.get(events_url(), json=page(event(2, "ended")), match=polled(1))
    assert [e.seq for e in client.follow("s1")] == [1, 2]


def test_the_launchers_horizons_are_sent_beside_the_stream(mock):
    client = BridgeClient(URL, sleep=lambda delay: None)
    decided = {0: 500, 1: 900, 2: None}  # the selector's horizon after each event
    mock.get(
        events_url(),
        body=sse(event(1), event(2), event(3, "ended")),
        content_type=STREAM,
        match=streamed(0, horizon=500),
    )
    told = mock.put(
        f"{URL}/v1/sessions/s1/horizon",
        status=204,
        match=[matchers.json_params_matcher({"after": 1, "horizon": 900})],
    )
    seen = list(client.follow("s1", horizon=decided.get))
    assert [e.seq for e in seen] == [1, 2, 3]
    assert told.call_count == 1  # after event 1; after event 2 every change matters: nothing


def test_a_refused_stream_is_raised(mock):
    client = BridgeClient(URL, sleep=lambda delay: pytest.fail("a refusal is not retried"))
    gone = {"error": "not_found", "detail": "no session s1 of yours"}
    mock.get(events_url(), status=404, json=gone, match=streamed(0))
    with pytest.raises(BridgeError) as caught:
        next(client.follow("s1"))
    assert (caught.value.status, caught.value.code) == (404, "not_found")


def test_an_unreadable_event_is_a_clear_error(mock):
    client = BridgeClient(URL, sleep=lambda delay: pytest.fail("not retried"))
    mock.get(
        events_url(), body='id: 1\ndata: {"seq": 1}\n\n', content_type=STREAM, match=streamed(0)
    )
    with pytest.raises(BridgeError) as caught:
        next(client.follow("s1"))
    assert caught.value.code == "bad_answer"
    assert "unreadable event 1" in caught.value.detail


def test_a_stream_from_an_untrusted_bridge_is_refused_not_retried(mock):
    client = BridgeClient(
        URL, sleep=lambda delay: pytest.fail("an untrusted bridge is not retried")
    )
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "self-signed certificate"
    mock.get(events_url(), body=requests.exceptions.SSLError(untrusted), match=streamed(0))
    with pytest.raises(UntrustedBridge) as caught:
        next(client.follow("s1"))
    assert "self-signed certificate" in caught.value.detail
