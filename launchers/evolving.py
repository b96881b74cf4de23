"""The Python client of HTTP API v2: evolving applications (CooRMv2), for launchers and tests.

An :class:`EvolvingClient` is a :class:`~coorm_bridge.launchers.client.BridgeClient` (same
transports, identity, errors and long poll) that also speaks ``/v2``: subscribe once, then send
typed requests, end them one by one (or give some of their hosts back), and end the
application. Answers are parsed with :mod:`coorm_bridge.protocol_v2`'s models, the daemon's own.
Its events come as v1's do, each naming its ``request``; :meth:`follow` stops at the session's
``ended``, not at a request's.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from pydantic import TypeAdapter

from coorm_bridge.core.model import Filter
from coorm_bridge.core.typed import Relation, RequestType, TypedRequest
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.protocol import JobAnswer, JobInfo, StateAnswer, SubscribeBody, Subscribed
from coorm_bridge.protocol_v2 import (
    API_V2_PREFIX,
    DoneBody,
    EvolvingInfo,
    RequestInfo,
    RequestJobRequest,
)

_SUBSCRIBED = TypeAdapter(Subscribed)
_INFO = TypeAdapter(EvolvingInfo)
_REQUEST = TypeAdapter(RequestInfo)
_REQUESTS = TypeAdapter(list[RequestInfo])
_STATE = TypeAdapter(StateAnswer)
_JOB_ANSWER = TypeAdapter(JobAnswer)
_JOBS = TypeAdapter(list[JobInfo])
_JOB = TypeAdapter(JobInfo)


class EvolvingClient(BridgeClient):
    """A connection to one bridge for evolving applications (and everything v1 offers)."""

    _events_prefix = API_V2_PREFIX

    def subscribe_evolving(
        self, filter: Filter | None = None, name: str | None = None
    ) -> Subscribed:
        """An evolving application's session: the clusters its requests may name."""
        body = SubscribeBody(filter=filter or Filter(), name=name)
        return self._call(
            "POST",
            "/sessions",
            _SUBSCRIBED,
            body=body.model_dump(mode="json"),
            prefix=API_V2_PREFIX,
        )

    def evolving_info(self, session: str) -> EvolvingInfo:
        """The application, its requests and both of its views."""
        return self._call("GET", _path(session), _INFO, prefix=API_V2_PREFIX)

    def send_request(
        self,
        session: str,
        request: TypedRequest | None = None,
        *,
        id: str | None = None,
        cluster: str | None = None,
        hosts: int | None = None,
        duration: int | None = None,
        type: RequestType = RequestType.NON_PREEMPTIBLE,
        related_to: str | None = None,
        related_how: Relation | None = None,
    ) -> RequestInfo:
        """Send a :class:`TypedRequest`, or its fields (``id``, ``cluster``, ``hosts`` and
        ``duration`` at least); answered once the pass that placed it ran."""
        if request is None:
            if id is None or cluster is None or hosts is None or duration is None:
                raise TypeError("give a TypedRequest, or id=, cluster=, hosts= and duration=")
            request = TypedRequest(
                id=id,
                cluster=cluster,
                hosts=hosts,
                duration=duration,
                type=type,
                related_to=related_to,
                related_how=related_how,
            )
        elif any(v is not None for v in (id, cluster, hosts, duration, related_to, related_how)):
            raise TypeError("give a TypedRequest or its fields, not both")
        return self._call(
            "POST",
            _path(session, "requests"),
            _REQUEST,
            body=request.model_dump(mode="json"),
            prefix=API_V2_PREFIX,
        )

    def send_requests(self, session: str, requests: Sequence[TypedRequest]) -> list[RequestInfo]:
        """Send several requests in one call: written together or not at all, placed by one
        pass (those that must start together, ``coalloc``, go so)."""
        return self._call(
            "POST",
            _path(session, "requests"),
            _REQUESTS,
            body=[request.model_dump(mode="json") for request in requests],
            prefix=API_V2_PREFIX,
        )

    def request_info(self, session: str, request: str) -> RequestInfo:
        return self._call("GET", _request_path(session, request), _REQUEST, prefix=API_V2_PREFIX)

    def done_request(
        self,
        session: str,
        request: str,
        hosts: int | None = None,
        host_names: Sequence[str] = (),
    ) -> RequestInfo:
        """End ``request``, or (``hosts``) give that many of its hosts back and keep the rest
        (``host_names``: which ones; else the bridge picks)."""
        return self._call(
            "POST",
            _request_path(session, request, "done"),
            _REQUEST,
            body=DoneBody(hosts=hosts, host_names=tuple(host_names)).model_dump(
                mode="json", exclude=set() if host_names else {"host_names"}
            ),
            prefix=API_V2_PREFIX,
        )

    def withdraw_request(self, session: str, request: str) -> RequestInfo:
        """Drop a request that has not started."""
        return self._call("DELETE", _request_path(session, request), _REQUEST, prefix=API_V2_PREFIX)

    def submit_request_job(self, session: str, request: str, job: RequestJobRequest) -> JobAnswer:
        """A job on a started request's hosts (``job.hosts``: some of them), run by the
        bridge's front end where the cluster's submission kind is ``mock``; stopped when the
        request ends. Answered at once: :meth:`request_jobs` says how it goes."""
        return self._call(
            "POST",
            _request_path(session, request, "jobs"),
            _JOB_ANSWER,
            body=job.model_dump(mode="json"),
            prefix=API_V2_PREFIX,
        )

    def request_jobs(self, session: str, request: str) -> list[JobInfo]:
        """The request's jobs through the front end, oldest first."""
        return self._call(
            "GET", _request_path(session, request, "jobs"), _JOBS, prefix=API_V2_PREFIX
        )

    def cancel_request_job(self, session: str, request: str, job: str) -> JobInfo:
        """Cancel one of the request's jobs (SIGTERM, then SIGKILL after a grace)."""
        path = _request_path(session, request, "jobs", quote(job, safe=""))
        return self._call("DELETE", path, _JOB, prefix=API_V2_PREFIX)

    def end(self, session: str) -> StateAnswer:
        """The application ended: its started requests end, its waiting ones are dropped."""
        return self._call("POST", _path(session, "done"), _STATE, prefix=API_V2_PREFIX)


def _path(session: str, *rest: str) -> str:
    """A session's URL path; ids are quoted so they cannot reach another path."""
    return "/".join(("/sessions", quote(session, safe=""), *rest))


def _request_path(session: str, request: str, *rest: str) -> str:
    return _path(session, "requests", quote(request, safe=""), *rest)


__all__ = ["EvolvingClient"]
