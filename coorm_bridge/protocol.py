"""The launcher protocol's bodies and answers (HTTP API v1, DESIGN §5).

One module shared by the daemon (which validates what it receives and serialises what it sends
with these models, so its OpenAPI document describes exactly them) and the client in
``coorm_bridge.launchers.client`` (which parses answers with them): the two cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.core.messages import Event, View
from coorm_bridge.core.model import (
    MAX_SEQ,
    ClusterInfo,
    Filter,
    Frozen,
    Label,
    Name,
    Request,
    Time,
    UserName,
)
from coorm_bridge.core.states import AppState

API_PREFIX = "/v1"
#: Longest long-poll a launcher may ask for, in seconds (proxies cut idle connections).
MAX_WAIT = 60.0
#: Largest request body the daemon reads, in bytes (a view or request is a few kB).
MAX_BODY = 64 * 1024


class SubscribeBody(Frozen):
    """``POST /v1/sessions``: which clusters the application wants to see, and a label."""

    filter: Filter = Filter()
    name: Label | None = None


class Subscribed(Frozen):
    """201 answer to a subscription: the session id and the clusters its filter let through."""

    session: Name
    clusters: tuple[ClusterInfo, ...]


class RequestAnswer(Frozen):
    """Answer to ``PUT .../request``: the request's estimated start (None: it never fits, for
    instance because it is larger than the platform) as computed by the pass that placed it."""

    session: Name
    state: AppState
    estimated_start: Time | None


class StateAnswer(Frozen):
    """Answer to ``done`` and ``DELETE``: the session's state afterwards."""

    session: Name
    state: AppState


class SessionInfo(Frozen):
    """``GET /v1/sessions/{id}``: where the session stands, and its current view."""

    session: Name
    name: str | None
    owner: UserName
    state: AppState
    clusters: tuple[Name, ...]
    request: Request | None
    estimated_start: Time | None
    started_at: Time | None
    done_at: Time | None
    end: Time | None
    """End of the allocation once started (the ghost's end once done)."""
    view: View | None
    """The free hosts left to this session, per cluster (None once started or ended)."""
    stale: tuple[Name, ...] = ()
    """Clusters whose batch system does not answer: their part of the view may be out of date."""
    last_seq: Annotated[int, Field(ge=0, le=MAX_SEQ)]


class EventPage(Frozen):
    """``GET .../events``: the session's events numbered above ``after``, oldest first."""

    events: list[Event]


class ClusterHealth(Frozen):
    status: Literal["ok", "stale"]
    last_snapshot: Time | None
    """When the batch system last answered (None: never since the bridge started)."""
    failures: Annotated[int, Field(ge=0)]
    """Polls failed in a row."""
    error: str | None = None


#: "rights": a batch system will not let the bridge's account hold reservations.
ProblemKind = Literal["rights"]


class Problem(Frozen):
    """Something only an admin can fix. The bridge goes on meanwhile: sessions keep their place
    and placements are retried, so that they resume by themselves once it is fixed."""

    kind: ProblemKind
    clusters: tuple[Name, ...]
    message: str
    """What the batch system said, why, and what to do."""
    since: Time


class Health(Frozen):
    """``GET /v1/health``: "degraded" while some batch system does not answer, or a problem
    only an admin can fix is open (logged once at ERROR when it appeared)."""

    status: Literal["ok", "degraded"]
    time: Time
    clusters: dict[Name, ClusterHealth]
    sessions: Annotated[int, Field(ge=0)]
    """Sessions not finished or cancelled."""
    problems: tuple[Problem, ...] = ()


class ErrorBody(Frozen):
    """Every error answer: a short code and a sentence naming the problem."""

    error: str
    detail: str


__all__ = [
    "API_PREFIX",
    "MAX_BODY",
    "MAX_WAIT",
    "ClusterHealth",
    "ErrorBody",
    "EventPage",
    "Health",
    "Problem",
    "ProblemKind",
    "RequestAnswer",
    "SessionInfo",
    "StateAnswer",
    "SubscribeBody",
    "Subscribed",
]
