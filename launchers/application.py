"""An evolving application's side of CooRMv2, for codes that grow and shrink as they run.

:class:`Application` is what an adaptive code (or the loop that drives it) holds: its session,
each of its requests as the bridge last told it, and both of its views (free hosts over time on
each cluster: the non-preemptible view, for pre-allocations and non-preemptible requests, and
its share of the preemptible one). It asks in the slides' words: :meth:`~Application.
pre_allocate` (hosts it may need, held for it), :meth:`~Application.grow` (a non-preemptible
request: started at once inside a started pre-allocation when it fits, else queued),
:meth:`~Application.shrink` (some hosts of a request back), :meth:`~Application.announce` (a
``next`` update from a request's end, on its hosts), :meth:`~Application.preemptible` (hosts
that may be taken back), :meth:`~Application.done` and :meth:`~Application.end`.

What the bridge says comes from :meth:`~Application.notices`: the events in order, each applied
to the views and the requests first, then handed over as a :data:`Notice` (a request started,
must give hosts back by a deadline, ended, was killed; the views or estimates changed). It rides
out a lost connection or a restarted daemon as ``coorm-launch`` does (the client's ``follow``:
nothing lost, nothing twice), and :meth:`~Application.resume` picks a session up again in a new
process, from the bridge's own record of it.

Light to import, like the client: no numpy and nothing of the daemon (tests/test_layers.py).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coorm_bridge.core.messages import (
    CAP,
    Change,
    ChangeEvent,
    ChangeKind,
    EndedEvent,
    ErrorEvent,
    Event,
    KilledEvent,
    PlacementFailedEvent,
    PreemptEvent,
    StartEvent,
    WithdrawnEvent,
)
from coorm_bridge.core.model import ClusterInfo, Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import Relation, RequestType, TypedRequest
from coorm_bridge.launchers.evolving import EvolvingClient
from coorm_bridge.protocol_v2 import EvolvingInfo, RequestInfo

NP, PRE, PA = RequestType.NON_PREEMPTIBLE, RequestType.PREEMPTIBLE, RequestType.PRE_ALLOCATION


@dataclass
class Views:
    """Both views, a CAP per cluster: ``n`` free hosts from each step's time to the next."""

    non_preemptible: dict[str, CAP] = field(default_factory=dict)
    preemptible: dict[str, CAP] = field(default_factory=dict)

    def free(self, cluster: str, at: int, *, preemptible: bool = False) -> int:
        """Free hosts of ``cluster`` at ``at`` in one view (0 before its first step, or on a
        cluster it does not show; its last step lasts for ever)."""
        cap = self._cap(cluster, preemptible)
        return 0 if cap is None else _free(cap, at)

    def earliest(
        self, cluster: str, hosts: int, duration: int, after: int, *, preemptible: bool = False
    ) -> int | None:
        """The first time from ``after`` on when ``hosts`` stay free for ``duration`` seconds in
        one view (None: never, as far as the view goes)."""
        cap = self._cap(cluster, preemptible)
        if cap is None:
            return None
        times = [t for t, _ in cap.steps]
        for begin in [after, *(t for t in times if t > after)]:
            within = [begin, *(t for t in times if begin < t < begin + duration)]
            if min(_free(cap, t) for t in within) >= hosts:
                return begin
        return None

    def _cap(self, cluster: str, preemptible: bool) -> CAP | None:
        return (self.preemptible if preemptible else self.non_preemptible).get(cluster)


def _free(cap: CAP, at: int) -> int:
    i = bisect.bisect_right([t for t, _ in cap.steps], at) - 1
    return cap.steps[i][1] if i >= 0 else 0


@dataclass(frozen=True)
class RequestNotice:
    """What every notice about one request says: which, and when."""

    request: str
    time: int


@dataclass(frozen=True)
class Started(RequestNotice):
    """A request started: its hosts until ``end`` (one notice for a coalloc group's clusters)."""

    end: int
    hosts: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class Preempted(RequestNotice):
    """A preemptible request must give ``hosts`` of its hosts back (``host_names``) by
    ``deadline``; answer with :meth:`Application.give_back`, or its work there is cancelled."""

    hosts: int
    host_names: tuple[str, ...]
    deadline: int


@dataclass(frozen=True)
class RequestEnded(RequestNotice):
    """A request ended (done, withdrawn, or its application ended)."""

    state: AppState


@dataclass(frozen=True)
class Killed(RequestNotice):
    """A request was taken back: a preemption past its deadline, a lost placeholder."""

    reason: str


@dataclass(frozen=True)
class Failed(RequestNotice):
    """A request cannot go on (a site's rule refuses it, or the bridge could not handle it)."""

    reason: str


@dataclass(frozen=True)
class NotHeld:
    """The batch systems refused a request's placeholder this time; retried at ``retry_at``."""

    request: str | None
    time: int
    reason: str
    retry_at: int


@dataclass(frozen=True)
class ViewsChanged:
    """Either view moved, or waiting requests' estimated starts (by request)."""

    time: int
    estimates: Mapping[str, int | None]


@dataclass(frozen=True)
class ApplicationEnded:
    """The session ended (the last notice): ``finished`` after :meth:`Application.end`; a
    ``reason`` when the bridge ended it (silence, an admin, an error)."""

    time: int
    state: AppState
    reason: str | None = None


Notice = (
    Started | Preempted | RequestEnded | Killed | Failed | NotHeld | ViewsChanged | ApplicationEnded
)


class Application:
    """One evolving application's session, through an :class:`EvolvingClient`.

    ``requests`` (by id) and ``views`` are kept up to date by every answer and every event
    applied; ``after`` is the last event applied (where :meth:`notices` goes on from)."""

    def __init__(self, client: EvolvingClient, session: str, *, prefix: str = "r") -> None:
        self.client = client
        self.session = session
        self.prefix = prefix
        self.requests: dict[str, RequestInfo] = {}
        self.views = Views()
        self.after = 0
        self.state = AppState.SUBMITTED
        self.reason: str | None = None
        """Why the bridge ended the session (an error, a withdrawal), once it did."""
        self.clusters: dict[str, ClusterInfo] = {}
        """The clusters it may use, as the bridge described them when it subscribed."""
        self._ids = itertools.count(1)

    # -- the session ----------------------------------------------------------------------

    @classmethod
    def subscribe(
        cls, client: EvolvingClient, filter: Filter | None = None, name: str | None = None
    ) -> Application:
        """A new session on the clusters ``filter`` lets through (:attr:`clusters`); its views
        come as events."""
        subscribed = client.subscribe_evolving(filter, name)
        app = cls(client, subscribed.session)
        app.clusters = {info.name: info for info in subscribed.clusters}
        return app

    @classmethod
    def resume(cls, client: EvolvingClient, session: str) -> Application:
        """A session picked up again (a new process, the same user): its requests and views as
        the bridge has them now; :meth:`notices` goes on after the last event so far."""
        app = cls(client, session)
        app._apply_info(client.evolving_info(session))
        return app

    def refresh(self) -> EvolvingInfo:
        """Everything the bridge says of the application now (requests and views replaced)."""
        info = self.client.evolving_info(self.session)
        self._apply_info(info, events=False)
        return info

    def end(self) -> None:
        """The application is over: its started requests end, its waiting ones are dropped."""
        self.client.end(self.session)

    # -- requests ---------------------------------------------------------------------------

    def pre_allocate(
        self, cluster: str, hosts: int, duration: int, *, id: str | None = None
    ) -> RequestInfo:
        """Hosts the application may need: held for it (a placeholder), used by :meth:`grow`."""
        return self._send(PA, cluster, hosts, duration, id)

    def grow(
        self, cluster: str, hosts: int, duration: int, *, id: str | None = None
    ) -> RequestInfo:
        """A non-preemptible request: started at once (in this call) on unused hosts of a
        started pre-allocation on ``cluster`` when it fits there until that one's end;
        otherwise queued like any request, and started when :meth:`notices` says so."""
        return self._send(NP, cluster, hosts, duration, id)

    def preemptible(
        self, cluster: str, hosts: int, duration: int, *, id: str | None = None
    ) -> RequestInfo:
        """Hosts nobody holds now, which the bridge may take back (a :class:`Preempted`)."""
        return self._send(PRE, cluster, hosts, duration, id)

    def announce(
        self, request: str, hosts: int, duration: int, *, id: str | None = None
    ) -> RequestInfo:
        """An announced update (``next``): held from ``request``'s end on its hosts as far as
        they overlap, and started when that one ends (or is :meth:`done` early)."""
        follows = self.requests[request]
        kind = follows.type if follows.type is not PRE else NP
        return self._send(kind, follows.cluster, hosts, duration, id,
                          related_to=request, related_how=Relation.NEXT)  # fmt: skip

    def shrink(self, request: str, hosts: int | Sequence[str]) -> RequestInfo:
        """Give some of a started request's hosts back (a number, the bridge picks which; or
        their names); it goes on on the others."""
        if isinstance(hosts, int):
            return self._answered(self.client.done_request(self.session, request, hosts))
        names = tuple(hosts)
        return self._answered(self.client.done_request(self.session, request, len(names), names))

    def give_back(self, preempted: Preempted) -> RequestInfo:
        """Answer a preemption in time: the hosts it asks for go back (all of them: the request
        ends)."""
        held = len(self.requests[preempted.request].host_names)
        hosts = None if preempted.hosts >= held else preempted.hosts
        return self._answered(self.client.done_request(self.session, preempted.request, hosts))

    def done(self, request: str) -> RequestInfo:
        """End a started request (its hosts stay held for fair-start, then go)."""
        return self._answered(self.client.done_request(self.session, request))

    def withdraw(self, request: str) -> RequestInfo:
        """Drop a request that has not started."""
        return self._answered(self.client.withdraw_request(self.session, request))

    def started(self) -> dict[str, RequestInfo]:
        """The requests running now, by id."""
        return {k: r for k, r in self.requests.items() if r.state is AppState.STARTED}

    def unused(self, pre_allocation: str) -> int:
        """Hosts of a started pre-allocation that no request started inside it uses."""
        used = sum(
            len(r.host_names)
            for r in self.requests.values()
            if r.inside == pre_allocation and r.state is AppState.STARTED
        )
        return len(self.requests[pre_allocation].host_names) - used

    # -- what the bridge says -------------------------------------------------------------------

    def notices(self, wait: float = 30.0) -> Iterator[Notice]:
        """Each event after the last one applied, applied, as a notice; the last one is an
        :class:`ApplicationEnded`. A lost connection or a restarted daemon is waited through."""
        for event in self.client.follow(self.session, after=self.after, wait=wait):
            notice = self.apply(event)
            if notice is not None:
                yield notice

    def apply(self, event: Event) -> Notice | None:
        """One event into the views and the requests (in order, once: older ones are skipped)."""
        if event.seq <= self.after:
            return None
        if event.request is not None and not isinstance(event, PlacementFailedEvent):
            # A start, preemption or end moves requests the event does not name: read them
            # first, so that an event whose reading failed (the bridge restarting) is applied
            # again, not skipped.
            self._reread()
        self.after = event.seq
        if isinstance(event, ChangeEvent):
            self._change(self.views.non_preemptible, event.changes)
            self._change(self.views.preemptible, event.preemptible or [])
            estimates = dict(event.estimates or {})
            for name, when in estimates.items():
                if name in self.requests:
                    self._update(name, estimated_start=when)
            return ViewsChanged(event.time, estimates)
        if event.request is None:  # the session's own: an error or a withdrawal, then its end
            if isinstance(event, ErrorEvent | WithdrawnEvent):
                self.reason = event.reason
            if isinstance(event, EndedEvent):
                self.state = event.state
                return ApplicationEnded(event.time, event.state, self.reason)
            return None
        notice = _NOTICES.get(type(event))
        return None if notice is None else notice(event, event.request)

    # -- plumbing ------------------------------------------------------------------------------

    def next_id(self) -> str:
        """A request id not used yet (``r1``, ``r2``...): naming a request before sending it
        lets a caller that lost the answer ask the bridge for it rather than send it twice."""
        while (name := f"{self.prefix}{next(self._ids)}") in self.requests:
            continue
        return name

    def _id(self, given: str | None) -> str:
        return self.next_id() if given is None else given

    def _send(
        self, kind: RequestType, cluster: str, hosts: int, duration: int, id: str | None,
        **relation: object,
    ) -> RequestInfo:  # fmt: skip
        request = TypedRequest.model_validate(
            {"id": self._id(id), "cluster": cluster, "hosts": hosts, "duration": duration,
             "type": kind, **relation}
        )  # fmt: skip
        return self._answered(self.client.send_request(self.session, request))

    def _answered(self, info: RequestInfo) -> RequestInfo:
        self.requests[info.request] = info
        return info

    def _update(self, name: str, **fields: object) -> None:
        self.requests[name] = self.requests[name].model_copy(update=fields)

    def _reread(self) -> None:
        info = self.client.evolving_info(self.session)
        self.requests = {r.request: r for r in info.requests}

    def _apply_info(self, info: EvolvingInfo, *, events: bool = True) -> None:
        self.requests = {r.request: r for r in info.requests}
        self.state = info.state
        if info.non_preemptible is not None:
            self.views.non_preemptible = {p.cluster: p for p in info.non_preemptible.profiles}
        if info.preemptible is not None:
            self.views.preemptible = {p.cluster: p for p in info.preemptible.profiles}
        if events:
            self.after = info.last_seq

    @staticmethod
    def _change(view: dict[str, CAP], changes: Sequence[Change]) -> None:
        for change in changes:
            if change.kind is ChangeKind.AVAILABILITY and change.profile is not None:
                view[change.cluster] = change.profile


_NOTICES: dict[type, Callable[[Any, str], Notice]] = {
    StartEvent: lambda e, r: Started(
        r, e.time, e.end, {c: tuple(a.hosts) for c, a in e.allocations.items()}
    ),
    PreemptEvent: lambda e, r: Preempted(r, e.time, e.hosts, tuple(e.host_names), e.deadline),
    KilledEvent: lambda e, r: Killed(r, e.time, e.reason),
    ErrorEvent: lambda e, r: Failed(r, e.time, e.reason),
    EndedEvent: lambda e, r: RequestEnded(r, e.time, e.state),
    PlacementFailedEvent: lambda e, r: NotHeld(r, e.time, e.reason, e.retry_at),
}
"""An event about one request, as the notice handed to the application."""

__all__ = [
    "Application",
    "ApplicationEnded",
    "Failed",
    "Killed",
    "NotHeld",
    "Notice",
    "Preempted",
    "RequestEnded",
    "RequestNotice",
    "Started",
    "Views",
    "ViewsChanged",
]
