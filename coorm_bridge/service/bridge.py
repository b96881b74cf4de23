"""The bridge: what launchers do with their sessions, as the HTTP API calls it.

Subscribe, read a session and its view, request, done, withdraw, read events, and the site's
clusters, availability and health. Each operation that writes takes the bridge's lock (the one
every pass takes), writes through the store (every state change is committed before it is
acknowledged) and asks for a pass; reads take no lock. The bridge calls no batch system: the
loop (:mod:`.loop`) polls them, runs the passes and carries out what they want, and every part
is built and handed its collaborators by the composition root (:mod:`.wiring`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from pydantic import ValidationError

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.messages import CAP, Event, View
from coorm_bridge.core.model import ClusterInfo, Filter, Interconnect, Request, describe
from coorm_bridge.core.states import ACTIVE, PLACED, AppState
from coorm_bridge.protocol import ClusterHealth, Health, RequestAnswer, SessionInfo, Subscribed
from coorm_bridge.protocol_web import Occupancy
from coorm_bridge.service.batchrules import BatchRules
from coorm_bridge.service.catalogue import Catalogue
from coorm_bridge.service.config import Config
from coorm_bridge.service.due import Due
from coorm_bridge.service.errors import Conflict, Invalid, NotFound
from coorm_bridge.service.limits import UserLimits
from coorm_bridge.service.listening import Listening
from coorm_bridge.service.occupancy import occupancy
from coorm_bridge.service.passes import PassRunner, session_end
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.problems import Problems
from coorm_bridge.service.quiet import Quiet
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.service.settings import Settings
from coorm_bridge.service.silence import Silence
from coorm_bridge.service.stats import Stats
from coorm_bridge.store import Store
from coorm_bridge.store.rows import SessionRow
from coorm_bridge.store.schema import EVENTS

if TYPE_CHECKING:
    from coorm_bridge.service.evolving import Evolving

log = logging.getLogger(__name__)


class Bridge:
    """The session API. ``adapter.now()`` is the bridge's clock; ``settings`` the admins in
    force, read at each call (a reload changes them); ``limits`` refuses what a user may not ask
    for (its ``[limits]`` read in force too), ``rules`` what a batch system would refuse them
    and what each user's views show; ``passes`` gives the last pass's views, ``poller``
    and ``problems`` what health shows; ``due`` asks for a pass and ``stats`` counts them;
    ``lock`` is the bridge's lock."""

    def __init__(
        self,
        *,
        config: Config,
        settings: Settings,
        adapter: Adapter,
        store: Store,
        catalogue: Catalogue,
        limits: UserLimits,
        rules: BatchRules,
        passes: PassRunner,
        poller: Poller,
        problems: Problems,
        recorder: Recorder,
        silence: Silence,
        quiet: Quiet,
        due: Due,
        stats: Stats,
        lock: AbstractContextManager[object],
    ) -> None:
        self.config = config
        self.settings = settings
        self.adapter = adapter
        self.store = store
        self.catalogue = catalogue
        self.limits = limits
        self.rules = rules
        self.passes = passes
        self.poller = poller
        self.problems = problems
        self.recorder = recorder
        self.silence = silence
        self.quiet = quiet
        self.due = due
        self.stats = stats
        self._lock = lock
        self.evolving: Evolving | None = None
        """The API v2 operations (evolving applications), set by the composition root."""

    @property
    def infos(self) -> list[ClusterInfo]:
        """The clusters as last read (``GET /v1/clusters``)."""
        return self.catalogue.infos

    @property
    def interconnect(self) -> Interconnect:
        return self.catalogue.interconnect

    def now(self) -> int:
        return self.adapter.now()

    # -- identity ---------------------------------------------------------------------------

    def is_admin(self, user: str) -> bool:
        return user in self.settings.current.admins

    def own(self, user: str, session_id: str) -> SessionRow:
        """The session if ``user`` may act on it; unknown and foreign sessions look the same
        (404), so that nobody learns which ids exist."""
        row = self.store.session(session_id)
        if row is None or (row.owner != user and not self.is_admin(user)) or row.parent:
            raise NotFound(f"no session {session_id} of yours")
        if row.owner == user:
            self.silence.heard(session_id, self.now())
        return row

    # -- launcher operations ----------------------------------------------------------------

    def subscribe(
        self,
        user: str,
        filter: Filter,
        name: str | None,
        *,
        evolving: bool = False,
        deltas: bool = False,
    ) -> Subscribed:
        """subscribe: a new session, last in priority; its first view comes as a change event
        (``evolving``: an evolving application's, API v2; ``deltas``: profiles that change are
        sent from their first changed step on, :mod:`.quiet`)."""
        seen = filter.select(self.infos)
        if not seen:
            raise Invalid(
                "the filter lets no cluster through; clusters: "
                + ", ".join(f"{c.name} ({c.hosts} hosts)" for c in self.infos)
            )
        self.limits.warm(user)  # the user's groups read, if need be, before the lock
        self.rules.warm(user)
        seen = self.rules.visible(user, seen)
        with self._lock:
            self.limits.check_subscribe(user)
            clusters = [c.name for c in seen]
            row = self.store.create_session(
                user, name, filter, clusters, self.now(), evolving=evolving
            )
            self.silence.heard(row.id, self.now())
            self.quiet.subscribed(row.id, deltas=deltas)
            self.due.trigger()
        log.info("session %s subscribed by %s (%s)", row.id, user, ", ".join(row.clusters))
        return Subscribed(session=row.id, clusters=tuple(seen))

    def sessions_of(self, user: str) -> list[SessionInfo]:
        owner = None if self.is_admin(user) else user
        return [self._info(row) for row in self.store.sessions(owner=owner, requests=False)]

    def info(self, user: str, session_id: str) -> SessionInfo:
        return self._info(self.own(user, session_id))

    def _info(self, row: SessionRow) -> SessionInfo:
        view = self.passes.view(row.id) if row.state in PLACED else None
        end = session_end(row, self.config.policy.fair_start)
        stale = set(self.poller.stale())
        return SessionInfo(
            session=row.id,
            name=row.name,
            owner=row.owner,
            state=row.state,
            clusters=row.clusters,
            request=row.request,
            estimated_start=row.estimated_start,
            started_at=row.started_at,
            done_at=row.done_at,
            end=end,
            view=None if view is None else View.of(self.rules.clip(row.owner, view), self.now()),
            stale=tuple(c for c in row.clusters if c in stale),
            last_seq=self.store.last_seq(row.id),
        )

    def put_request(
        self, user: str, session_id: str, nodes: Mapping[str, object], duration: object
    ) -> int:
        """request: replace the session's request; returns the pass count to wait for.

        Validated against the clusters the session sees; refused once the session started, or
        past its owner's limits or what a batch system would allow them."""
        self.limits.warm(user)
        self.rules.warm(user)
        with self._lock:
            row = self.own(user, session_id)
            try:
                request = Request.model_validate(
                    {"nodes": nodes, "duration": duration}, context={"clusters": row.clusters}
                )
            except ValidationError as error:
                raise Invalid(describe(error)) from None
            if row.state not in PLACED:
                raise Conflict(f"session {session_id} is {row.state}: its request is final")
            if row.evolving:
                raise Conflict(
                    f"session {session_id} is an evolving application's: send typed requests "
                    f"to /v2/sessions/{session_id}/requests"
                )
            self.rules.check(row.owner, request)
            self.limits.check_request(row, request, self.now())
            self.store.update_session(
                session_id, now=self.now(), state=AppState.REQUEST_SENT, request=request
            )
            self.due.trigger()
            return self.stats.passes

    def answer(self, session_id: str) -> RequestAnswer:
        """What a request is answered with once its pass ran: the state and the estimate."""
        row = self.store.session(session_id)
        assert row is not None  # a session is deleted only long after it ended
        return RequestAnswer(session=row.id, state=row.state, estimated_start=row.estimated_start)

    def done(self, user: str, session_id: str) -> SessionRow:
        """done: the application exited; its hosts become a ghost for ``fair_start`` seconds.

        Repeating it is harmless (a launcher retries when the answer was lost)."""
        with self._lock:
            row = self.own(user, session_id)
            if row.state in (AppState.FINISH_SENT, AppState.GHOST, AppState.FINISHED):
                return row
            if row.state is not AppState.STARTED:
                raise Conflict(
                    f"session {session_id} is {row.state}, not started: withdraw it instead"
                )
            # Rounded up: the ghost lasts fair_start from the done itself, never less.
            now = max(math.ceil(self.adapter.instant()), row.started_at or 0)
            row = self.store.update_session(
                session_id, now=now, state=AppState.FINISH_SENT, done_at=now
            )
            self.due.trigger()
            return row

    def withdraw(self, user: str, session_id: str) -> SessionRow:
        """Withdraw before start: the session ends and any placeholder held ahead goes."""
        with self._lock:
            row = self.own(user, session_id)
            if row.state is AppState.CANCELLED:
                return row
            if row.state not in PLACED:
                raise Conflict(f"session {session_id} is {row.state}: send done instead")
            row = self.recorder.end(row, AppState.CANCELLED, self.now())
            self.due.trigger()
            return row

    def events(
        self, user: str, session_id: str, after: int, horizon: int | None = None
    ) -> list[Event]:
        """The events a launcher's long poll would get at once (its first read, validated):
        :meth:`listen` for callers that do not wait."""
        listening = self.listen(user, session_id, after, horizon=horizon)
        return [EVENTS.validate_json(body) for _, body in listening.first]

    def listen(
        self,
        user: str,
        session_id: str,
        after: int,
        limit: int = 1000,
        horizon: int | None = None,
        *,
        watcher: bool = False,
        stream: bool = False,
    ) -> Listening:
        """A reader's hold on the session's events after ``after``, with its first read
        (:class:`~.listening.Listening`): a long poll's, or a stream's (``stream``).
        ``horizon``: the owner's launcher's word on its last choice (:mod:`.quiet`).
        ``watcher``: a page or a terminal following the session, not its launcher: its reads
        keep nothing alive and say nothing of what the launcher read."""
        owner = self.store.owner(session_id)
        if owner is None or (owner != user and not self.is_admin(user)):
            raise NotFound(f"no session {session_id} of yours")
        return Listening(
            store=self.store,
            silence=self.silence,
            quiet=self.quiet,
            now=self.now,
            session_id=session_id,
            after=after,
            limit=limit,
            horizon=horizon,
            launcher=owner == user and not watcher,
            stream=stream,
        )

    def horizon(self, user: str, session_id: str, after: int, horizon: int | None) -> None:
        """A streaming launcher's word on its choice on the view after event ``after``
        (:mod:`.quiet`): what its long poll would have said with ``?horizon=``. Its owner's
        only; kept in memory, like the horizons long polls give."""
        if self.store.owner(session_id) != user:
            raise NotFound(f"no session {session_id} of yours")
        self.quiet.heard(session_id, after, horizon)

    # -- the site ---------------------------------------------------------------------------

    def availability(self) -> list[CAP]:
        """Free hosts per cluster after every session of the last pass: what a new subscriber
        would be shown (empty before the first pass)."""
        last = self.passes.last
        if last is None:
            return []
        return [CAP.of(name, profile, last.now) for name, profile in sorted(last.left.items())]

    def health(self) -> Health:
        """Each cluster stale while its batch system does not answer, its poll has run for
        two intervals, or its properties were not read since the start (the error says which,
        with the batch system's words)."""
        unread = self.catalogue.unread
        clusters = {
            name: ClusterHealth(
                status="stale" if status.stale or name in unread else "ok",
                last_snapshot=status.last_ok,
                failures=status.failures,
                error=status.error
                if status.error is not None or name not in unread
                else f"its properties are not read yet: {unread[name]}",
            )
            for name, status in self.poller.statuses().items()
        }
        problems = self.problems.listed()
        degraded = bool(problems) or any(c.status != "ok" for c in clusters.values())
        return Health(
            status="degraded" if degraded else "ok",
            time=self.now(),
            clusters=clusters,
            sessions=len(self.store.sessions(states=ACTIVE, requests=False)),
            problems=problems,
            drained=tuple(self.store.drained()),
        )

    def occupancy(self, user: str, cluster: str) -> Occupancy:
        """What holds the cluster's hosts over time, as its last snapshot and the store show it
        (``GET /v1/clusters/{cluster}/occupancy``); a user sees whose only for their own."""
        statuses = self.poller.statuses()
        if cluster not in statuses:
            raise NotFound(f"no cluster {cluster}")
        status = statuses[cluster]
        placeholders = [p for p in self.store.placeholders() if p.cluster == cluster]
        # Only the placeholders' sessions: an occupancy read costs what the cluster holds, not
        # every session the store still has (ended ones included).
        found = (self.store.session(sid) for sid in {p.session_id for p in placeholders})
        sessions = {row.id: row for row in found if row is not None}
        admin = self.is_admin(user)
        now = self.now()
        return occupancy(
            cluster=cluster,
            now=now,
            snapshot=status.snapshot,
            stale=status.stale,
            horizon=now + self.config.placement.horizon,
            placeholders=placeholders,
            sessions=sessions,
            sees=lambda owner: admin or owner == user,
            passes=self.stats.passes,
        )
