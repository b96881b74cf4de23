"""The Python client of the bridge's HTTP API v1 (docs/design.md §5), for launchers and tests.

Every answer is parsed with the models of :mod:`coorm_bridge.protocol`, the same ones the daemon
serialises with, so a launcher gets typed values and a mismatch shows up as a clear
:class:`BridgeError` rather than a pydantic traceback deep inside the launcher.

Over ``https://`` the daemon's certificate is always verified: against ``verify=`` (a PEM file
of the CA that signed it, or the certificate itself when self-signed) when given, whatever the
environment says; else as requests does, against ``$REQUESTS_CA_BUNDLE`` (or
``$CURL_CA_BUNDLE``) when set, else the system's CAs (certifi).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import requests
import requests.auth
from pydantic import TypeAdapter, ValidationError
from requests_unixsocket.adapters import UnixAdapter

from coorm_bridge.core.messages import CAP, EndedEvent, Event, StartEvent
from coorm_bridge.core.model import ClusterInfo, Filter, Interconnect, Request, describe
from coorm_bridge.launchers.stream import EVENT_STREAM, NotStreaming, events_of, read_timeout
from coorm_bridge.paths import default_socket
from coorm_bridge.protocol import (
    API_PREFIX,
    MAX_WAIT,
    AdminSession,
    DrainInfo,
    ErrorBody,
    EventPage,
    Health,
    HorizonBody,
    JobAnswer,
    JobInfo,
    JobRequest,
    RequestAnswer,
    SessionInfo,
    StateAnswer,
    SubscribeBody,
    Subscribed,
)
from coorm_bridge.protocol_web import Occupancy, Passes

T = TypeVar("T")

#: Environment variable naming the bridge to use (a URL or a socket path).
URL_VARIABLE = "COORM_BRIDGE_URL"
UNIX_SCHEME = "http+unix"

_CLUSTERS = TypeAdapter(list[ClusterInfo])
_SESSIONS = TypeAdapter(list[SessionInfo])
_SUBSCRIBED = TypeAdapter(Subscribed)
_INTERCONNECT = TypeAdapter(Interconnect)
_SESSION = TypeAdapter(SessionInfo)
_REQUEST_ANSWER = TypeAdapter(RequestAnswer)
_EVENT_PAGE = TypeAdapter(EventPage)
_STATE = TypeAdapter(StateAnswer)
_HEALTH = TypeAdapter(Health)
_CAPS = TypeAdapter(list[CAP])
_OCCUPANCY = TypeAdapter(Occupancy)
_PASSES = TypeAdapter(Passes)
_JOB_ANSWER = TypeAdapter(JobAnswer)
_JOBS = TypeAdapter(list[JobInfo])
_JOB = TypeAdapter(JobInfo)
_ADMIN_SESSIONS = TypeAdapter(list[AdminSession])
_DRAIN = TypeAdapter(DrainInfo)
_NOTHING = TypeAdapter(None)
#: Bytes of a non-JSON error body quoted in the message: enough to recognise a proxy's page.
_SNIPPET = 200


class BridgeError(Exception):
    """The bridge refused a call or answered something this client cannot read.

    ``status`` is the HTTP status (0 when no answer came at all), ``code`` the daemon's short
    error code and ``detail`` its sentence, so launchers can branch on the code and show the detail.
    """

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{code} (HTTP {status}): {detail}" if status else f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


class BridgeUnreachable(BridgeError):
    """No answer at all (connection refused, socket missing, timeout): worth retrying later."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "unreachable", detail)


class UntrustedBridge(BridgeError):
    """The daemon's TLS certificate is not one this client trusts: retrying cannot help."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "untrusted_certificate", detail)


def base_url(url: str) -> str:
    """The URL requests should use: Unix sockets become ``http+unix://<percent-encoded path>``.

    Users write ``unix:///run/x.sock`` or just the path; requests_unixsocket wants the path as
    the host part, encoded so its slashes do not start the URL's path.
    """
    if url.startswith("unix://"):
        path = url.removeprefix("unix://")
    elif url.startswith("/"):
        path = url
    else:
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https", UNIX_SCHEME):
            raise ValueError(
                f"bridge URL {url!r}: use http://host:port, https://..., unix:///path/to/socket "
                "or an absolute socket path"
            )
        return url.rstrip("/")
    if not path:
        raise ValueError(f"bridge URL {url!r} names no socket path")
    return f"{UNIX_SCHEME}://{quote(path, safe='')}"


class _SocketAdapter(UnixAdapter):
    """One connection pool per socket: the library keys pools by the full URL, which would open
    a new connection for every long-poll (each has a new ``after``)."""

    def get_connection(self, url: str | bytes, proxies: Mapping[str, str] | None = None) -> Any:
        parts = urlsplit(url.decode() if isinstance(url, bytes) else url)
        # The library is untyped: hence the ignores on its calls.
        socket_url = f"{parts.scheme}://{parts.netloc}/"
        return super().get_connection(socket_url, proxies)  # type: ignore[no-untyped-call]


class _Bearer(requests.auth.AuthBase):
    """Bearer token as requests auth: set as ``Session.auth`` it also stops ~/.netrc from
    replacing the header with Basic credentials."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.token}"
        return request


class BridgeClient:
    """A connection to one bridge; thread-unsafe like the ``requests.Session`` it wraps."""

    #: The API version whose long poll :meth:`events` calls (both serve any session's events).
    _events_prefix = API_PREFIX

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        verify: str | os.PathLike[str] | None = None,
        *,
        stream: bool = True,
    ) -> None:
        """``verify``: over https, the PEM file to verify the daemon's certificate against
        (default: ``$REQUESTS_CA_BUNDLE``, else the system's CAs); verification cannot be off.
        ``stream``: :meth:`follow` reads a stream of events (False: long polls, as through a
        proxy that holds answers back until they end)."""
        self.url = url if url is not None else self.default_url()
        self.timeout = timeout
        self._base = base_url(self.url)
        self._sleep = sleep
        self._http = requests.Session()
        if self._base.startswith(f"{UNIX_SCHEME}://"):
            self._http.mount(f"{UNIX_SCHEME}://", _SocketAdapter())  # type: ignore[no-untyped-call]
            # No proxy applies to a local socket, and UnixAdapter raises if one is configured.
            self._http.trust_env = False
        if token is not None:
            self._http.auth = _Bearer(token)
        # Given per request, not on the session: requests lets $REQUESTS_CA_BUNDLE and
        # $CURL_CA_BUNDLE override a session's verify, never a request's.
        self._verify: str | bool = True if verify is None else os.fspath(verify)
        self._streams = stream
        """Whether to read events as a stream: unless the bridge shows it predates them."""

    @classmethod
    def default_url(cls) -> str:
        """``$COORM_BRIDGE_URL``, else the socket the user's own bridge listens on by default."""
        return os.environ.get(URL_VARIABLE) or f"unix://{default_socket()}"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- the API ---------------------------------------------------------------------------

    def subscribe(
        self, filter: Filter | None = None, name: str | None = None, *, deltas: bool = False
    ) -> Subscribed:
        """A new session. ``deltas``: changed profiles come from their first changed step on
        (a bridge that does not know it sends them whole; the view is kept right either way)."""
        body = SubscribeBody(filter=filter or Filter(), name=name)
        return self._call(
            "POST",
            "/sessions",
            _SUBSCRIBED,
            body=body.model_dump(mode="json"),
            params={"changes": "delta"} if deltas else None,
        )

    def clusters(self) -> list[ClusterInfo]:
        return self._call("GET", "/clusters", _CLUSTERS)

    def interconnect(self) -> Interconnect:
        return self._call("GET", "/interconnect", _INTERCONNECT)

    def availability(self) -> list[CAP]:
        """Free hosts per cluster after every session: what a new subscriber would see."""
        return self._call("GET", "/availability", _CAPS)

    def sessions(self) -> list[SessionInfo]:
        """The caller's sessions."""
        return self._call("GET", "/sessions", _SESSIONS)

    def session(self, session: str) -> SessionInfo:
        return self._call("GET", _path(session), _SESSION)

    def request(
        self,
        session: str,
        request: Request | None = None,
        *,
        nodes: Mapping[str, int] | None = None,
        duration: int | None = None,
    ) -> RequestAnswer:
        """Send (or replace) the session's request: a :class:`Request`, or ``nodes=`` and
        ``duration=`` to build one."""
        if request is None:
            if nodes is None or duration is None:
                raise TypeError("give a Request, or both nodes= and duration=")
            request = Request(nodes=nodes, duration=duration)
        elif nodes is not None or duration is not None:
            raise TypeError("give a Request or nodes= and duration=, not both")
        return self._call(
            "PUT",
            _path(session, "request"),
            _REQUEST_ANSWER,
            body=request.model_dump(mode="json"),
        )

    def events(
        self, session: str, after: int = 0, wait: float = 0.0, horizon: int | None = None
    ) -> list[Event]:
        """One long-poll: the events numbered above ``after``, waiting up to ``wait`` seconds
        for the first one (an empty list when none came). ``horizon``: from this time on no
        change of the view held after event ``after`` can alter the selector's choice."""
        if not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"wait must be between 0 and {MAX_WAIT:g} seconds, got {wait}")
        params = {"after": str(after), "wait": f"{wait:g}"}
        if horizon is not None:
            params["horizon"] = str(horizon)
        page = self._call(
            "GET",
            _path(session, "events"),
            _EVENT_PAGE,
            params=params,
            # The daemon legitimately holds the answer for `wait` seconds.
            timeout=wait + self.timeout,
            prefix=self._events_prefix,
        )
        return page.events

    def occupancy(self, cluster: str) -> Occupancy:
        """The cluster's hosts and what holds them over time (jobs, placeholders, ghosts)."""
        return self._call("GET", f"/clusters/{quote(cluster, safe='')}/occupancy", _OCCUPANCY)

    def passes(self, after: int = 0, wait: float = 0.0) -> Passes:
        """The bridge's pass count, once above ``after`` (waiting up to ``wait`` seconds)."""
        if not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"wait must be between 0 and {MAX_WAIT:g} seconds, got {wait}")
        params = {"after": str(after), "wait": f"{wait:g}"}
        return self._call("GET", "/passes", _PASSES, params=params, timeout=wait + self.timeout)

    def relay(self, path: str, params: Mapping[str, str], timeout: float) -> tuple[int, str, bytes]:
        """A read of ``/v1<path>`` answered as it is (status, content type, body): what
        ``coorm-bridge web`` passes on to its pages (:class:`BridgeUnreachable` if none)."""
        url = f"{self._base}{API_PREFIX}{path}"
        try:
            answer = self._http.get(url, params=params, timeout=timeout, verify=self._verify)
        except (requests.ConnectionError, requests.Timeout) as error:
            raise BridgeUnreachable(f"no answer from the bridge at {self.url}: {error}") from error
        except requests.RequestException as error:
            raise BridgeError(0, "request_failed", f"GET {url}: {error}") from error
        kind = answer.headers.get("content-type", "application/json")
        return answer.status_code, kind, answer.content

    def done(self, session: str) -> StateAnswer:
        """The application finished with its allocation (the hosts become a ghost, then free)."""
        return self._call("POST", _path(session, "done"), _STATE)

    def withdraw(self, session: str) -> StateAnswer:
        """Cancel the session: its request is dropped, its allocation (if any) released."""
        return self._call("DELETE", _path(session), _STATE)

    def submit_job(self, session: str, job: JobRequest) -> JobAnswer:
        """Run ``job`` in the session's placeholder on ``job.cluster``, through the bridge's own
        front end: for clusters whose ``ClusterInfo.submission`` kind is "mock" (a batch system
        with commands takes its jobs itself: 409)."""
        return self._call(
            "POST", _path(session, "jobs"), _JOB_ANSWER, body=job.model_dump(mode="json")
        )

    def jobs(self, session: str) -> list[JobInfo]:
        """The session's jobs submitted through the bridge, oldest first."""
        return self._call("GET", _path(session, "jobs"), _JOBS)

    def cancel_job(self, session: str, job: str) -> JobInfo:
        """Cancel a job (SIGTERM, then SIGKILL after a grace); its state changes soon after."""
        return self._call("DELETE", _path(session, "jobs", quote(job, safe="")), _JOB)

    def health(self) -> Health:
        return self._call("GET", "/health", _HEALTH)

    # -- admin commands (coorm-bridge sessions, cancel, drain, resume) ----------------------------

    def all_sessions(self, user: str | None = None, state: str | None = None) -> list[AdminSession]:
        """Every session with its placeholders (an admin's view; a user sees their own),
        optionally of one user and in one state."""
        params = {k: v for k, v in (("user", user), ("state", state)) if v is not None}
        return self._call("GET", "/admin/sessions", _ADMIN_SESSIONS, params=params)

    def cancel(self, session: str, reason: str) -> StateAnswer:
        """End a session by force (its owner, or an admin): its launcher gets ``reason``."""
        return self._call("POST", _path(session, "cancel"), _STATE, body={"reason": reason})

    def drain(self, cluster: str, reason: str | None = None) -> DrainInfo:
        """No new placeholder on ``cluster`` until resumed (admins only)."""
        body = {} if reason is None else {"reason": reason}
        return self._call("POST", _cluster_path(cluster, "drain"), _DRAIN, body=body)

    def resume(self, cluster: str) -> DrainInfo:
        """Placeholders may be made on ``cluster`` again (admins only)."""
        return self._call("POST", _cluster_path(cluster, "resume"), _DRAIN)

    def follow(
        self,
        session: str,
        after: int = 0,
        wait: float = 30.0,
        retry: float = 1.0,
        max_retry: float = 30.0,
        *,
        horizon: Callable[[int], int | None] | None = None,
    ) -> Iterator[Event]:
        """Every event of the session after ``after``, in order, until it ends (its ``ended``
        event that names no request). ``horizon(after)``: the horizon of the launcher's choice
        after event ``after`` (:class:`~coorm_bridge.launchers.selection.Horizons`).

        Reads them as a stream (:mod:`.stream`); from a bridge that predates streams, by long
        polls of ``wait`` seconds. Rides out a daemon restart: when the bridge cannot be
        reached or answers 5xx, waits (doubling from ``retry`` up to ``max_retry``) and reads
        again from the last event yielded, so none is lost or repeated. Refusals (4xx) are
        raised: retrying cannot help.
        """
        delay = retry
        while True:
            try:
                for event in self._events_after(session, after, wait, horizon):
                    delay = retry
                    if event.seq <= after:  # already yielded; the daemon should not resend it
                        continue
                    after = event.seq
                    yield event
                    # An evolving application's request ends with one too (API v2): not the
                    # session.
                    if isinstance(event, EndedEvent) and event.request is None:
                        return
                delay = retry  # a long poll answered, maybe with nothing
            except BridgeError as error:
                if not (isinstance(error, BridgeUnreachable) or error.status >= 500):
                    raise
                self._sleep(delay)
                delay = min(delay * 2, max_retry)

    def tell_horizon(self, session: str, after: int, horizon: int | None) -> None:
        """The horizon of the launcher's choice on the view after event ``after``: what a
        stream's reader says instead of a long poll's ``?horizon=``."""
        body = HorizonBody(after=after, horizon=horizon).model_dump(mode="json")
        self._call("PUT", _path(session, "horizon"), _NOTHING, body=body)

    def _events_after(
        self,
        session: str,
        after: int,
        wait: float,
        horizon: Callable[[int], int | None] | None,
    ) -> Iterator[Event]:
        """The session's events after ``after``: a stream's until the bridge ends it (then
        :class:`BridgeUnreachable`: it stopped), or one long poll's."""
        told = None if horizon is None else horizon(after)
        if self._streams:
            try:
                for event in self._stream(session, after, told):
                    yield event
                    if horizon is not None and (told := horizon(event.seq)) is not None:
                        self.tell_horizon(session, event.seq, told)
            except NotStreaming as old:
                self._streams = False  # a bridge from before streams: long polls from now on
                yield from old.page.events
                return
            raise BridgeUnreachable(f"the bridge at {self.url} ended the event stream")
        yield from self.events(session, after=after, wait=wait, horizon=told)

    def _stream(self, session: str, after: int, horizon: int | None) -> Iterator[Event]:
        url = f"{self._base}{self._events_prefix}{_path(session, 'events')}"
        params = {"after": str(after)}
        if horizon is not None:
            params["horizon"] = str(horizon)
        try:
            answer = self._http.get(
                url,
                params=params,
                headers={"accept": EVENT_STREAM},
                stream=True,
                timeout=(self.timeout, read_timeout(self.timeout)),
                verify=self._verify,
            )
        except requests.RequestException as error:
            raise self._failure(error, f"GET {url}") from error
        if not answer.ok:
            with answer:
                raise _refusal(answer)
        try:
            yield from events_of(answer)
        except requests.RequestException as error:  # broken, or silent too long
            raise BridgeUnreachable(f"the event stream from {self.url} broke: {error}") from error
        except ValueError as error:
            raise BridgeError(200, "bad_answer", f"GET {url}: {error}") from None

    # -- plumbing --------------------------------------------------------------------------

    def _failure(self, error: requests.RequestException, call: str) -> BridgeError:
        """What a call that got no answer raises: unreachable (worth retrying), a certificate
        this client does not trust (not), or another failure of the request."""
        if isinstance(error, requests.exceptions.SSLError):
            untrusted = _verification_failure(error)
            if untrusted is None:  # a handshake cut short (a daemon stopping): worth retrying
                return BridgeUnreachable(f"no TLS answer from {self.url}: {error}")
            return UntrustedBridge(
                f"the bridge at {self.url} presented a certificate this client does not trust "
                f"({untrusted.verify_message}): give verify= (--ca FILE to coorm-bridge status, "
                "or $REQUESTS_CA_BUNDLE) the CA that signed it"
            )
        if isinstance(error, requests.ConnectionError | requests.Timeout):
            return BridgeUnreachable(f"no answer from the bridge at {self.url}: {error}")
        return BridgeError(0, "request_failed", f"{call}: {error}")

    def _call(
        self,
        method: str,
        path: str,
        adapter: TypeAdapter[T],
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
        prefix: str = API_PREFIX,
    ) -> T:
        url = f"{self._base}{prefix}{path}"
        try:
            answer = self._http.request(
                method,
                url,
                json=body,
                params=params,
                timeout=self.timeout if timeout is None else timeout,
                verify=self._verify,
            )
        except requests.RequestException as error:
            raise self._failure(error, f"{method} {url}") from error
        if not answer.ok:
            raise _refusal(answer)
        if answer.status_code == 204:  # no content: an answer of None
            return adapter.validate_python(None)
        try:
            return adapter.validate_json(answer.content)
        except ValidationError as error:
            raise BridgeError(
                answer.status_code,
                "bad_answer",
                f"{method} {path}: the bridge's answer does not match the protocol "
                f"(client and daemon versions differ?): {describe(error)}",
            ) from None


def _verification_failure(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure under what requests raised (urllib3 wraps it in
    several layers: arguments, causes, ``reason``), if that is what it was."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        found = pending.pop()
        if not isinstance(found, BaseException) or id(found) in seen:
            continue
        if isinstance(found, ssl.SSLCertVerificationError):
            return found
        seen.add(id(found))
        pending.extend((*found.args, found.__cause__, found.__context__))
        pending.append(getattr(found, "reason", None))
    return None


def _path(session: str, *rest: str) -> str:
    """A session's URL path; the id is quoted so it cannot reach another path."""
    return "/".join(("/sessions", quote(session, safe=""), *rest))


def _cluster_path(cluster: str, action: str) -> str:
    return f"/admin/clusters/{quote(cluster, safe='')}/{action}"


def _refusal(answer: requests.Response) -> BridgeError:
    try:
        body = ErrorBody.model_validate_json(answer.content)
    except ValidationError:
        text = answer.content[:_SNIPPET].decode("utf-8", "replace").strip()
        return BridgeError(
            answer.status_code,
            f"http_{answer.status_code}",
            f"{answer.request.method} {answer.url}: HTTP {answer.status_code} "
            f"{answer.reason or ''} without a bridge error body (a proxy in between?): "
            f"{text!r}",
        )
    return BridgeError(answer.status_code, body.error, body.detail)


#: Seconds a batch system may take from a job's submission to its start (its scheduler's next
#: pass): left out of :func:`job_time_limit`, so that a job started that late still ends with
#: the allocation. Slurm starts a job in an active reservation well within a second.
SUBMIT_SLACK = 5.0


def job_time_limit(
    start: StartEvent, now: float | None = None, unit: int = 60, slack: float = SUBMIT_SLACK
) -> int:
    """The time limit, in seconds, to give a job submitted now into ``start``'s placeholders.

    A start event's ``end`` is a hard limit (the next application may be promised the hosts
    from then on): a job whose limit passes it is refused by the batch system, or waits for
    ever when the next placeholder follows on its hosts. This is what is left from ``now`` (by
    default the host's clock, to the fraction of a second) plus ``slack`` until ``end``, in
    whole ``unit`` (Slurm: minutes); 0 means too late to submit one.
    """
    return start.time_limit(time.time() if now is None else now, unit, slack)


__all__ = [
    "SUBMIT_SLACK",
    "BridgeClient",
    "BridgeError",
    "BridgeUnreachable",
    "UntrustedBridge",
    "base_url",
    "job_time_limit",
]
