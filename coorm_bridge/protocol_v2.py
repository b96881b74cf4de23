"""The launcher protocol of evolving applications (HTTP API v2, CooRMv2): bodies and answers.

An evolving application subscribes once (``POST /v2/sessions``), then sends typed requests, each
on one cluster (non-preemptible, preemptible or pre-allocation, maybe related to an earlier one
by ``next`` or ``coalloc``), ends them one by one, and reads both of its views. Its events come
through the same long poll as v1's (``GET /v1/sessions/{id}/events``), each about one request
(``request``). v1 sessions and launchers are untouched: the v2 fields of events are left out of
their JSON. Shared by the daemon and the client, as :mod:`coorm_bridge.protocol` is.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.core.messages import View
from coorm_bridge.core.model import (
    MAX_COUNT,
    MAX_SEQ,
    Duration,
    Frozen,
    Name,
    PositiveCount,
    Time,
    UserName,
)
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType, TypedRequest
from coorm_bridge.protocol import JobRequest

API_V2_PREFIX = "/v2"


class RequestInfo(Frozen):
    """One request of an evolving application and where it stands.

    ``state`` is its own (``waiting``, ``started``, ``ghost`` once done and its hosts held for
    fair-start, ``finished``, ``cancelled`` when withdrawn, ``failed``); ``host_names`` and
    ``reservation`` once started; ``preempt_by`` and ``give_back`` while a preemptible request
    must give hosts back."""

    request: Name
    cluster: Name
    hosts: PositiveCount
    duration: Duration
    type: RequestType
    related_to: Name | None = None
    related_how: Relation | None = None
    state: AppState
    estimated_start: Time | None = None
    started_at: Time | None = None
    done_at: Time | None = None
    end: Time | None = None
    host_names: tuple[Name, ...] = ()
    reservation: Name | None = None
    inside: Name | None = None
    """A spontaneous update: the pre-allocation whose hosts it runs on."""
    preempt_by: Time | None = None
    give_back: Annotated[int, Field(ge=1)] | None = None
    give_back_hosts: tuple[Name, ...] = ()
    """The hosts to give back by ``preempt_by`` (``give_back`` of them)."""


class EvolvingInfo(Frozen):
    """``GET /v2/sessions/{id}``: the application, its requests and both of its views.

    ``non_preemptible``: free hosts over time for a pre-allocation or a non-preemptible request
    sent now; ``preemptible``: this application's share of what nobody holds (None before the
    first pass)."""

    session: Name
    name: str | None
    owner: UserName
    state: AppState
    clusters: tuple[Name, ...]
    requests: tuple[RequestInfo, ...]
    non_preemptible: View | None = None
    preemptible: View | None = None
    stale: tuple[Name, ...] = ()
    last_seq: Annotated[int, Field(ge=0, le=MAX_SEQ)]


class DoneBody(Frozen):
    """``POST .../requests/{id}/done``: ``hosts`` to give back (None: all: the request ends).

    Giving some back keeps the request running on the others (a preemptible request answering a
    preemption, an application shrinking)."""

    hosts: PositiveCount | None = None
    host_names: tuple[Name, ...] = Field(default=(), max_length=MAX_COUNT)
    """Which of its hosts go back (``hosts`` of them, none twice): a sweep gives back the hosts
    whose tasks ended, not those still running one. Empty: the bridge picks (those a preemption
    named first, then the last ones)."""

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.host_names:
            if self.hosts is None or len(self.host_names) != self.hosts:
                raise ValueError("host_names must name exactly `hosts` hosts")
            if len(set(self.host_names)) != len(self.host_names):
                raise ValueError("host_names names a host twice")
        return self


class RequestJobRequest(JobRequest):
    """``POST /v2/sessions/{id}/requests/{request}/jobs``: a job of a started request, run by
    the bridge's front end (the mock platform) on ``hosts``, some of the request's (a sweep's
    task per host), or on all of them (empty). It runs in the request's reservation (its own,
    or its pre-allocation's for an update started inside one), or outside reservations for a
    preemptible request, and ends when the request does (done, killed, the application
    ended)."""

    hosts: tuple[Name, ...] = Field(default=(), max_length=MAX_COUNT)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        if len(set(self.hosts)) != len(self.hosts):
            twice = sorted(host for host, n in Counter(self.hosts).items() if n > 1)
            raise ValueError(f"hosts names {', '.join(twice)} more than once")
        return self


__all__ = [
    "API_V2_PREFIX",
    "DoneBody",
    "EvolvingInfo",
    "RequestInfo",
    "RequestJobRequest",
    "TypedRequest",
]
