"""Evolving applications (API v2, CooRMv2): what their launchers do, as the HTTP API calls it.

An evolving application's session sends typed requests, each on one cluster. Each request is a
session row of its own below the application's (``parent``), so that a pre-allocation, a
non-preemptible request and an announced update (``next``) are placed, held as placeholders,
started, shrunk to a ghost and released by the same machinery as v1 sessions, with the same
reconciliation and recovery after a crash: the policy's order is per request (a ``next`` one
right behind its related one). Two kinds never reach the batch systems: a non-preemptible
request that fits in the unused part of a started pre-allocation starts at once on its hosts
(a spontaneous update), and a preemptible request runs on hosts nobody holds; the v2 pass
(:mod:`.evolving_pass`) starts and preempts those. Like :class:`~.bridge.Bridge`, every write
takes the bridge's lock, is committed before it is answered, and calls no batch system.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from coorm_bridge.core.messages import Allocation, View
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import ACTIVE, FINAL, HOLDING, PLACED, AppState
from coorm_bridge.core.typed import MAX_REQUESTS, Relation, RequestType, TypedRequest
from coorm_bridge.protocol import StateAnswer, Subscribed
from coorm_bridge.protocol_v2 import EvolvingInfo, RequestInfo
from coorm_bridge.service import coalloc
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.errors import Conflict, Invalid, NotFound
from coorm_bridge.service.evolving_pass import EvolvingPass
from coorm_bridge.store import SessionRow, Typed
from coorm_bridge.store.rows import MAX_SEQ_IN_APP, priority

log = logging.getLogger(__name__)

NP, PA, PRE = RequestType.NON_PREEMPTIBLE, RequestType.PRE_ALLOCATION, RequestType.PREEMPTIBLE
#: Requests one call may send at once.
MAX_BATCH = 100


class Evolving:
    """The v2 session API beside :class:`Bridge` (whose identity, limits, rules, store and lock
    it uses); ``views`` is the v2 part of each pass (both views, preemptible starts)."""

    def __init__(self, bridge: Bridge, views: EvolvingPass) -> None:
        self.bridge = bridge
        self.views = views

    # -- the application ----------------------------------------------------------------------

    def subscribe(self, user: str, filter: Filter, name: str | None) -> Subscribed:
        """An evolving application's session; its first views come as a change event."""
        return self.bridge.subscribe(user, filter, name, evolving=True)

    def own(self, user: str, session_id: str) -> SessionRow:
        row = self.bridge.own(user, session_id)
        if not row.evolving:
            raise Conflict(
                f"session {session_id} is a v1 session: use /v1/sessions/{session_id} (only a "
                "session subscribed at /v2/sessions sends typed requests)"
            )
        return row

    def info(self, user: str, session_id: str) -> EvolvingInfo:
        row = self.own(user, session_id)
        views = self.views.views_of(row) if row.state in ACTIVE else None
        now = self.bridge.now()
        stale = set(self.bridge.poller.stale())
        return EvolvingInfo(
            session=row.id,
            name=row.name,
            owner=row.owner,
            state=row.state,
            clusters=row.clusters,
            requests=tuple(
                self._request_info(r, name)
                for r in self.bridge.store.requests_of(row.id)
                for name, _ in coalloc.names(r)
            ),
            non_preemptible=None if views is None else View.of(views[0], now),
            preemptible=None if views is None else View.of(views[1], now),
            stale=tuple(c for c in row.clusters if c in stale),
            last_seq=self.bridge.store.last_seq(row.id),
        )

    def end(self, user: str, session_id: str) -> StateAnswer:
        """The application ends: pending requests are withdrawn, started ones done (their
        ghosts hold their hosts for fair-start). Repeating it is harmless."""
        with self.bridge._lock:
            row = self.own(user, session_id)
            if row.state in ACTIVE:
                now = self._done_time(row)
                row = self.bridge.recorder.end(row, AppState.FINISHED, now)  # requests first
                self.bridge.due.trigger()
            return StateAnswer(session=row.id, state=row.state)

    # -- its requests -------------------------------------------------------------------------

    def request(
        self, user: str, session_id: str, request: TypedRequest | Sequence[TypedRequest]
    ) -> int:
        """Send typed requests, one or several at once (all written, or none: those that must
        start together, ``coalloc``, go in one call, else the first may start alone); returns
        the pass count to wait for (each answer is its request's state after that pass). A
        non-preemptible one that fits in a started pre-allocation's unused hosts starts at once
        inside it."""
        batch = [request] if isinstance(request, TypedRequest) else list(request)
        if not 1 <= len(batch) <= MAX_BATCH:
            raise Invalid(f"send 1 to {MAX_BATCH} requests at once, not {len(batch)}")
        bridge = self.bridge
        bridge.limits.warm(user)
        bridge.rules.warm(user)
        with bridge._lock:
            row = self.own(user, session_id)
            if row.state not in ACTIVE:
                raise Conflict(f"session {session_id} is {row.state}: it sends no more requests")
            now = bridge.now()
            with bridge.recorder.batch():  # one transaction: a refusal writes none of them
                for one in batch:
                    self._send(row, one, bridge.store.requests_of(row.id), now)
            bridge.due.trigger()
            return bridge.stats.passes

    def _send(
        self, row: SessionRow, request: TypedRequest, children: list[SessionRow], now: int
    ) -> None:
        bridge = self.bridge
        self._check(row, request, children)
        nodes = Request(nodes={request.cluster: request.hosts}, duration=request.duration)
        bridge.rules.check(row.owner, nodes)
        bridge.limits.check_request(row, nodes, now, holds=request.type is not PRE)
        typed = Typed(
            type=request.type,
            related_to=request.related_to,
            related_how=request.related_how,
            priority=priority(row.order, len(children) + 1),
        )
        related = coalloc.find(children, request.related_to or "")
        if request.related_how is Relation.COALLOC:  # one more cluster of its request
            assert related is not None
            coalloc.join(bridge.recorder, related[0], request, now)
            return
        if request.related_how is Relation.NEXT:
            assert related is not None
            assert related[0].typed is not None
            typed = typed.model_copy(update={"priority": related[0].typed.priority + 1})
        inside = self._inside(request, children, now) if request.type is NP else None
        if inside is not None:
            self._start_inside(row, request=request, nodes=nodes, typed=typed, pa=inside, now=now)
            return
        self._create(row, request, typed, nodes, now, state=AppState.REQUEST_SENT)

    def _create(
        self,
        row: SessionRow,
        request: TypedRequest,
        typed: Typed,
        nodes: Request,
        now: int,
        **state: Any,
    ) -> SessionRow:
        """The request's own row, below its application's (one row a request, API v2)."""
        return self.bridge.store.create_session(
            row.owner, request.id, row.filter, (request.cluster,), now,
            parent=row.id, typed=typed, request=nodes, **state,
        )  # fmt: skip

    def request_info(self, user: str, session_id: str, request_id: str) -> RequestInfo:
        row = self.own(user, session_id)
        return self._request_info(self._child(row, request_id), request_id)

    def request_row(
        self, user: str, session_id: str, request_id: str
    ) -> tuple[SessionRow, RequestInfo]:
        """The row that stands for one of the caller's requests, and where the request
        stands: the front end's jobs of a request belong to that row (:mod:`.request_jobs`)."""
        child = self._child(self.own(user, session_id), request_id)
        return child, self._request_info(child, request_id)

    def done(
        self,
        user: str,
        session_id: str,
        request_id: str,
        hosts: int | None,
        names: Sequence[str] = (),
    ) -> RequestInfo:
        """End one request, or give ``hosts`` of its hosts back (a request running inside a
        pre-allocation, or a preemptible one: nothing is held in a batch system for them);
        ``names``: which (each one of its hosts). Repeating it is harmless."""
        with self.bridge._lock:
            child = self._child(self.own(user, session_id), request_id)
            if child.state in (AppState.FINISH_SENT, AppState.GHOST, *FINAL):
                return self._request_info(child, request_id)
            if child.state is not AppState.STARTED:
                raise Conflict(
                    f"request {request_id} is {child.state}, not started: withdraw it instead"
                )
            assert child.request is not None
            assert child.typed is not None
            held = child.request.hosts
            if hosts is not None and hosts < held:
                if not child.typed.host_names:
                    raise Conflict(
                        f"request {request_id} is held by a reservation: it ends whole (send a "
                        "next request with fewer hosts to shrink it)"
                    )
                unknown = sorted(set(names) - set(child.typed.host_names))
                if unknown:
                    raise Invalid(
                        f"request {request_id} does not hold {', '.join(unknown)} (it holds "
                        f"{', '.join(child.typed.host_names)})"
                    )
                child = self.views.give_back(child, hosts, self.bridge.now(), names)
            else:
                with self.bridge.recorder.batch():
                    child = self.views.close(child, self._done_time(child))
            self.bridge.due.trigger()
            return self._request_info(child, request_id)

    def withdraw(self, user: str, session_id: str, request_id: str) -> RequestInfo:
        with self.bridge._lock:
            child = self._child(self.own(user, session_id), request_id)
            if child.state is AppState.CANCELLED:
                return self._request_info(child, request_id)
            if child.state not in PLACED:
                raise Conflict(f"request {request_id} is {child.state}: send done instead")
            child = self.bridge.recorder.end(child, AppState.CANCELLED, self.bridge.now())
            self.bridge.due.trigger()
            return self._request_info(child, request_id)

    # -- helpers ------------------------------------------------------------------------------

    def _done_time(self, row: SessionRow) -> int:
        """Rounded up, as v1's done: a ghost lasts fair-start from the done itself."""
        return max(math.ceil(self.bridge.adapter.instant()), row.started_at or 0)

    def _child(self, row: SessionRow, request_id: str) -> SessionRow:
        """The row that stands for a request (its own, or its coalloc group's)."""
        found = coalloc.find(self.bridge.store.requests_of(row.id), request_id)
        if found is None:
            raise NotFound(f"no request {request_id} in session {row.id}")
        return found[0]

    def _check(self, row: SessionRow, request: TypedRequest, children: list[SessionRow]) -> None:
        """What a request may not be, said before anything is written."""
        if request.cluster not in row.clusters:
            raise Invalid(
                f"request {request.id} is on cluster {request.cluster}, which this session does "
                f"not see ({', '.join(row.clusters)})"
            )
        by_id = {name: c for c in children for name, _ in coalloc.names(c)}
        if request.id in by_id:
            raise Conflict(f"request id {request.id} is already used in session {row.id}")
        if sum(c.state in ACTIVE for c in children) >= MAX_REQUESTS:
            raise Conflict(f"session {row.id} has {MAX_REQUESTS} requests not ended: end some")
        if len(children) >= MAX_SEQ_IN_APP:
            raise Conflict(f"session {row.id} sent {len(children)} requests: subscribe anew")
        if request.related_to is None:
            return
        related = by_id.get(request.related_to)
        if related is None:
            raise Invalid(
                f"request {request.id} is related to {request.related_to}, which is not an "
                "earlier request of this session"
            )
        assert related.typed is not None
        if request.related_how is Relation.COALLOC:
            coalloc.check(request, related)
            return
        if request.cluster not in related.clusters:
            raise Invalid(
                f"request {request.id} comes next after {related.name} on another cluster "
                f"({related.clusters[0]}): a next request takes over its hosts, on its cluster"
            )
        if related.typed.type is PRE or request.type is PRE:
            raise Invalid("a next request and the one it follows are not preemptible")
        if related.state not in ACTIVE or related.state in (AppState.GHOST,):
            raise Conflict(f"request {related.name} is {related.state}: nothing comes next")
        taken = [
            c.name
            for c in children
            if c.typed is not None
            and c.typed.related_to == related.name
            and c.typed.related_how is Relation.NEXT
            and c.state in ACTIVE
        ]
        if taken:
            raise Conflict(f"request {taken[0]} already comes next after {related.name}")
        if (related.typed.priority & MAX_SEQ_IN_APP) == MAX_SEQ_IN_APP:
            raise Conflict(f"request {related.name} ends the longest chain of updates allowed")

    def _inside(
        self, request: TypedRequest, children: list[SessionRow], now: int
    ) -> SessionRow | None:
        """The started pre-allocation on the request's cluster whose unused hosts can take it
        now until its end (a spontaneous update), or None."""
        if request.related_to is not None:
            return None
        for pa in children:
            if pa.typed is None or pa.typed.type is not PA or pa.state is not AppState.STARTED:
                continue
            if pa.clusters != (request.cluster,) or pa.alloc_end is None:
                continue
            if now + request.duration > pa.alloc_end:
                continue
            if len(self.views.book.unused(pa, children)) >= request.hosts:
                return pa
        return None

    def _start_inside(
        self,
        row: SessionRow,
        *,
        request: TypedRequest,
        nodes: Request,
        typed: Typed,
        pa: SessionRow,
        now: int,
    ) -> None:
        """Started at once on hosts of the pre-allocation, and told so in the same commit."""
        store, recorder = self.bridge.store, self.bridge.recorder
        hosts = self.views.book.unused(pa, store.requests_of(row.id))[: request.hosts]
        placeholder = store.placeholder(pa.id, request.cluster)
        typed = typed.model_copy(update={"inside": pa.name, "host_names": tuple(hosts)})
        end = now + request.duration
        with recorder.batch():
            child = self._create(
                row, request, typed, nodes, now,
                state=AppState.STARTED, started_at=now, estimated_start=now, alloc_end=end,
            )  # fmt: skip
            reservation = None if placeholder is None else placeholder.name
            allocations = {request.cluster: Allocation(hosts=hosts, reservation=reservation)}
            recorder.emit_for(
                child, {"type": "start", "time": now, "end": end, "allocations": allocations}
            )
        log.info("request %s of %s started inside %s on %s", request.id, row.id, pa.name, hosts)

    def _request_info(self, child: SessionRow, name: str | None = None) -> RequestInfo:
        """Request ``name`` (None: the row's own) as the row that stands for it tells: a member
        of a coalloc group is its cluster of the group's row."""
        typed, request = child.typed, child.request
        assert typed is not None
        assert request is not None
        name, cluster = next((n, c) for n, c in coalloc.names(child) if name is None or n == name)
        own = name == child.name
        placeholder = None
        if child.state in ACTIVE and typed.inside is None and typed.type is not PRE:
            placeholder = self.bridge.store.placeholder(child.id, cluster)
        held = placeholder is not None and child.state in HOLDING  # waiting: held ahead
        host_names = typed.host_names or (placeholder.host_names if held and placeholder else ())
        return RequestInfo(
            request=name,
            cluster=cluster,
            hosts=request.nodes[cluster],
            duration=request.duration,
            type=typed.type,
            related_to=typed.related_to if own else child.name,
            related_how=typed.related_how if own else Relation.COALLOC,
            state=child.state,
            estimated_start=child.estimated_start,
            started_at=child.started_at,
            done_at=child.done_at,
            end=child.alloc_end,
            host_names=host_names,
            reservation=None if placeholder is None else placeholder.name,
            inside=typed.inside,
            preempt_by=typed.preempt_by,
            give_back=len(typed.give_back) or None,
            give_back_hosts=typed.give_back,
        )
