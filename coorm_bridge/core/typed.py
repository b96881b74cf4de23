"""CooRMv2's model: typed, related requests of evolving applications.

An evolving application (one that grows and shrinks as it runs, an adaptive mesh refinement
code) cannot say its needs in one v1 request. In v2 it sends many requests, each on one cluster,
each with a type that says what the bridge may do with it:

- ``non-preemptible`` (the default, what batch systems give today): held once started;
- ``preemptible``: runs on hosts nobody holds, and may be taken back (with a deadline);
- ``pre-allocation``: "I do not need these hosts now, but make sure I can get them at once":
  its non-preemptible requests start inside it without waiting.

A request may be related to an earlier one of the same application: ``next`` (an announced
update: it starts when the related one ends, on its hosts as far as they overlap) or ``coalloc``
(they start together). Rows carry what happened to each request so far; the policy
(:mod:`coorm_bridge.core.policy_v2`) is a function of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import (
    Duration,
    Frozen,
    Name,
    PositiveCount,
    Time,
    UserName,
)

#: Requests one application may have in the table at once: bounded like every number that
#: enters, and far more than an evolving application sends before it finishes some.
MAX_REQUESTS = 10_000


class RequestType(StrEnum):
    """What the bridge may do with a request's hosts once it started."""

    NON_PREEMPTIBLE = "non-preemptible"
    PREEMPTIBLE = "preemptible"
    PRE_ALLOCATION = "pre-allocation"


class Relation(StrEnum):
    """How a request relates to an earlier one of its application."""

    NEXT = "next"
    """It starts when the related one ends, on the related one's hosts as far as they overlap."""
    COALLOC = "coalloc"
    """It starts together with the related one."""


class TypedRequest(Frozen):
    """One v2 request: hosts on one cluster for one duration, with a type and a relation."""

    id: Name
    cluster: Name
    hosts: PositiveCount
    duration: Duration
    type: RequestType = RequestType.NON_PREEMPTIBLE
    related_to: Name | None = None
    related_how: Relation | None = None

    @model_validator(mode="after")
    def _relation_whole(self) -> Self:
        if (self.related_to is None) != (self.related_how is None):
            raise ValueError("related_to and related_how go together: give both or neither")
        if self.related_to == self.id:
            raise ValueError(f"request {self.id} cannot be related to itself")
        return self


class RequestStatus(StrEnum):
    """A request's life in the policy."""

    PENDING = "pending"
    STARTED = "started"
    DONE = "done"


class RequestRow(Frozen):
    """One request and what happened to it: what the policy reads each pass."""

    request: TypedRequest
    status: RequestStatus = RequestStatus.PENDING
    started_at: Time | None = None
    held: PositiveCount | None = None
    """Hosts it holds since it started (a preemptible request that gave some back holds fewer
    than it asked for)."""
    done_at: Time | None = None
    inside: Name | None = None
    """The started pre-allocation it runs inside (its hosts come from there, not the cluster)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        started = self.status is not RequestStatus.PENDING
        if started != (self.started_at is not None) or started != (self.held is not None):
            raise ValueError(
                f"a {self.status} request has a start time and a host count exactly when it started"
            )
        if (self.status is RequestStatus.DONE) != (self.done_at is not None):
            raise ValueError("a request has a done time exactly when it is done")
        if (
            self.started_at is not None
            and self.done_at is not None
            and self.done_at < self.started_at
        ):
            raise ValueError("a request is done no earlier than it started")
        if self.held is not None and self.held > self.request.hosts:
            raise ValueError(
                f"request {self.request.id} holds {self.held} hosts but asked for "
                f"{self.request.hosts}"
            )
        if self.inside is not None:
            if self.status is RequestStatus.PENDING:
                raise ValueError("only a started request runs inside a pre-allocation")
            if self.request.type is not RequestType.NON_PREEMPTIBLE:
                raise ValueError("only a non-preemptible request runs inside a pre-allocation")
        return self

    @property
    def id(self) -> str:
        return self.request.id

    def end(self) -> int:
        """When its allocation ends (started rows only)."""
        assert self.started_at is not None
        return self.started_at + self.request.duration

    def hold_end(self, fair_start: int) -> int:
        """Until when its hosts are held: its allocation, or its ghost (never beyond either)."""
        end = self.end()
        return end if self.done_at is None else min(self.done_at + fair_start, end)


class EvolvingApplication(Frozen):
    """One application of the v2 table: its requests, in the order it sent them."""

    id: Name
    owner: UserName | None = None
    order: Annotated[int, Field(ge=0, strict=True)]
    """Subscription order: the implicit priority (lower goes first)."""
    clusters: tuple[Name, ...]
    """The clusters its filter let through: what its views cover."""
    requests: Annotated[tuple[RequestRow, ...], Field(max_length=MAX_REQUESTS)] = ()

    @model_validator(mode="after")
    def _related_rows(self) -> Self:
        earlier: dict[str, RequestRow] = {}
        for row in self.requests:
            request = row.request
            if request.id in earlier:
                raise ValueError(f"request id {request.id} is used twice")
            if request.cluster not in self.clusters:
                raise ValueError(
                    f"request {request.id} is on cluster {request.cluster}, which this "
                    f"application does not see ({', '.join(self.clusters) or 'none'})"
                )
            if request.related_to is not None:
                related = earlier.get(request.related_to)
                if related is None:
                    raise ValueError(
                        f"request {request.id} is related to {request.related_to}, which is "
                        "not an earlier request of this application"
                    )
                if (
                    request.related_how is Relation.NEXT
                    and related.request.cluster != request.cluster
                ):
                    raise ValueError(
                        f"request {request.id} comes next after {related.id} on another "
                        f"cluster ({related.request.cluster}): a next request takes over the "
                        "related one's hosts, on its cluster"
                    )
            if row.inside is not None:
                host = earlier.get(row.inside)
                if (
                    host is None
                    or host.request.type is not RequestType.PRE_ALLOCATION
                    or host.request.cluster != request.cluster
                ):
                    raise ValueError(
                        f"request {request.id} runs inside {row.inside}, which is not an "
                        f"earlier pre-allocation of this application on {request.cluster}"
                    )
            earlier[request.id] = row
        return self


__all__ = [
    "MAX_REQUESTS",
    "EvolvingApplication",
    "Relation",
    "RequestRow",
    "RequestStatus",
    "RequestType",
    "TypedRequest",
]
