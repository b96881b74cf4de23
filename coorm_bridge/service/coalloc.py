"""Co-allocated requests of an evolving application (API v2, ``coalloc``): one row, many clusters.

A request sent ``coalloc`` with a waiting one must start with it. The v1 machinery already
co-allocates one request across clusters (placeholders held on every cluster at once, started
together), so the bridge makes the two one: the new request joins its related request's row as
one more cluster of its request, and is remembered as a member (its id and cluster). The group
is placed, started, told (one ``start`` event, named by its first request, with an allocation
per cluster) and ended together; withdrawing or ending any member does it to the group.
"""

from __future__ import annotations

from collections.abc import Iterable

from coorm_bridge.core.model import Request
from coorm_bridge.core.states import PLACED
from coorm_bridge.core.typed import RequestType, TypedRequest
from coorm_bridge.service.errors import Conflict, Invalid
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.store import SessionRow


def names(row: SessionRow) -> list[tuple[str, str]]:
    """The requests a row stands for, (request id, cluster) each: its own, then its members'."""
    assert row.name is not None
    typed = row.typed
    return [(row.name, row.clusters[0]), *(() if typed is None else typed.members)]


def find(children: Iterable[SessionRow], request_id: str) -> tuple[SessionRow, str] | None:
    """The row that stands for ``request_id``, and the request's cluster."""
    for row in children:
        for name, cluster in names(row):
            if name == request_id:
                return row, cluster
    return None


def check(request: TypedRequest, related: SessionRow) -> None:
    """What a ``coalloc`` request may not be, said before anything is written."""
    typed, asked = related.typed, related.request
    assert typed is not None
    assert asked is not None
    if related.state not in PLACED:
        raise Conflict(
            f"request {related.name} is {related.state}: a coalloc request starts with a "
            "request that has not started yet"
        )
    if request.type is RequestType.PREEMPTIBLE or typed.type is RequestType.PREEMPTIBLE:
        raise Invalid("preemptible requests are not co-allocated: each runs where it can")
    if request.type is not typed.type:
        raise Invalid(
            f"request {request.id} is {request.type} and {related.name} {typed.type}: "
            "co-allocated requests are of one type"
        )
    if request.duration != asked.duration:
        raise Invalid(
            f"request {request.id} lasts {request.duration} s and {related.name} "
            f"{asked.duration} s: co-allocated requests last as long (they end together)"
        )
    if request.cluster in related.clusters:
        raise Invalid(
            f"request {related.name} already asks for {request.cluster}: co-allocated requests "
            "are on different clusters"
        )


def join(recorder: Recorder, related: SessionRow, request: TypedRequest, now: int) -> SessionRow:
    """The request becomes one more cluster of its related request's row."""
    typed, asked = related.typed, related.request
    assert typed is not None
    assert asked is not None
    nodes = {**asked.nodes, request.cluster: request.hosts}
    members = (*typed.members, (request.id, request.cluster))
    return recorder.update(
        related,
        now,
        request=Request(nodes=nodes, duration=asked.duration),
        clusters=(*related.clusters, request.cluster),
        typed=typed.model_copy(update={"members": members}),
    )
