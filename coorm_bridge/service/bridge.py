"""The bridge: launcher sessions, the policy pass, and the placeholders that make it real.

One object ties the parts together: the store (every state change is written before it is
acknowledged), the poller (the batch systems' latest snapshots), the policy (pure) and placement
(the batch systems' reservations). The HTTP API calls the session operations, the loop calls
:meth:`Bridge.poll`, :meth:`Bridge.tick` and :meth:`Bridge.reconcile`; one lock serialises them
so that a pass always sees a consistent application table.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from pydantic import ValidationError

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.core.messages import CAP, Change, Event, View
from coorm_bridge.core.model import ClusterInfo, Filter, Interconnect, Request, describe
from coorm_bridge.core.states import ACTIVE, PLACED, AppState
from coorm_bridge.protocol import ClusterHealth, Health, SessionInfo, Subscribed
from coorm_bridge.service.catalogue import Catalogue
from coorm_bridge.service.config import Config
from coorm_bridge.service.errors import Conflict, Invalid, NotFound, OverLimit
from coorm_bridge.service.jobrunner import JobRunner
from coorm_bridge.service.jobs import JobDesk
from coorm_bridge.service.passes import PassRunner, application_of
from coorm_bridge.service.problems import check_rights
from coorm_bridge.service.silence import Silence
from coorm_bridge.store import Store
from coorm_bridge.store.rows import SessionRow

log = logging.getLogger(__name__)


class Bridge:
    """See the module docstring. ``adapter.now()`` is the bridge's clock."""

    def __init__(self, config: Config, adapter: Adapter, store: Store) -> None:
        self.config = config
        self.adapter = adapter
        self.store = store
        infos, interconnect = adapter.clusters(), adapter.interconnect()
        self.admins = frozenset(config.bridge.admins)
        self._lock = threading.RLock()
        self.runner = PassRunner(config, adapter, store, [c.name for c in infos], self._lock)
        self.runner.notify = self._notify
        self.runner.reconciler.lost = self._lost_placeholder
        self.catalogue = Catalogue(
            adapter=adapter,
            store=store,
            recorder=self.runner.recorder,
            lock=self._lock,
            trigger=self.runner.trigger,
            infos=infos,
            interconnect=interconnect,
        )
        self.silence = Silence(
            store, self.runner.recorder, config.bridge.session_timeout, adapter.now()
        )
        self.reconciliations = 0
        """Reconciliation passes run since the start (the first one before serving)."""
        self.reconciled: Counter[str] = Counter()
        """Repairs made by reconciliation since the start, per action (for metrics)."""
        self.pass_listeners: list[Callable[[], None]] = []
        """Called after each pass (from the loop's thread)."""
        self.listeners: list[Callable[[str], None]] = []
        """Called with a session id after events were stored for it (from any thread)."""
        self.jobs = JobDesk(adapter, store, self._lock, self._own, lambda: self.infos)
        """Jobs into the sessions' placeholders, for an adapter with a front end (the mock)."""
        self.job_runner = JobRunner(adapter, store)

    @property
    def infos(self) -> list[ClusterInfo]:
        return self.catalogue.infos

    @property
    def interconnect(self) -> Interconnect:
        return self.catalogue.interconnect

    def now(self) -> int:
        return self.adapter.now()

    def _notify(self, session_id: str) -> None:
        for listener in self.listeners:
            try:
                listener(session_id)
            except Exception:
                log.exception("an event listener failed")

    # -- identity ---------------------------------------------------------------------------

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def _own(self, user: str, session_id: str) -> SessionRow:
        """The session if ``user`` may act on it; unknown and foreign sessions look the same
        (404), so that nobody learns which ids exist."""
        row = self.store.session(session_id)
        if row is None or (row.owner != user and not self.is_admin(user)):
            raise NotFound(f"no session {session_id} of yours")
        if row.owner == user:
            self.silence.heard(session_id, self.now())
        return row

    # -- launcher operations ----------------------------------------------------------------

    def subscribe(self, user: str, filter: Filter, name: str | None) -> Subscribed:
        """subscribe: a new session, last in priority; its first view comes as a change event."""
        seen = filter.select(self.infos)
        if not seen:
            raise Invalid(
                "the filter lets no cluster through; clusters: "
                + ", ".join(f"{c.name} ({c.hosts} hosts)" for c in self.infos)
            )
        with self._lock:
            limits, where = self.config.limits.of(user)
            if limits.sessions is not None:
                active = len(self.store.sessions(owner=user, states=ACTIVE))
                if active >= limits.sessions:
                    raise OverLimit(
                        f"{user} has {active} sessions not ended, the most {where}.sessions "
                        f"allows ({limits.sessions}): end or withdraw one first"
                    )
            row = self.store.create_session(user, name, filter, [c.name for c in seen], self.now())
            self.silence.heard(row.id, self.now())
            self.runner.trigger()
        log.info("session %s subscribed by %s (%s)", row.id, user, ", ".join(row.clusters))
        return Subscribed(session=row.id, clusters=tuple(seen))

    def sessions_of(self, user: str) -> list[SessionInfo]:
        owner = None if self.is_admin(user) else user
        return [self._info(row) for row in self.store.sessions(owner=owner)]

    def info(self, user: str, session_id: str) -> SessionInfo:
        return self._info(self._own(user, session_id))

    def _info(self, row: SessionRow) -> SessionInfo:
        view = self.runner.view(row.id) if row.state in PLACED else None
        end = row.alloc_end
        if row.state in (AppState.FINISH_SENT, AppState.GHOST) and row.done_at is not None:
            end = application_of(row).hold_end(self.config.policy.fair_start)
        stale = set(self.runner.poller.stale())
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
            view=None if view is None else View.of(view, self.now()),
            stale=tuple(c for c in row.clusters if c in stale),
            last_seq=self.store.last_seq(row.id),
        )

    def put_request(
        self, user: str, session_id: str, nodes: Mapping[str, object], duration: object
    ) -> int:
        """request: replace the session's request; returns the pass count to wait for.

        Validated against the clusters the session sees; refused once the session started."""
        with self._lock:
            row = self._own(user, session_id)
            try:
                request = Request.model_validate(
                    {"nodes": nodes, "duration": duration}, context={"clusters": row.clusters}
                )
            except ValidationError as error:
                raise Invalid(describe(error)) from None
            if row.state not in PLACED:
                raise Conflict(f"session {session_id} is {row.state}: its request is final")
            self.config.limits.check_request(row.owner, request)
            self.store.update_session(
                session_id, now=self.now(), state=AppState.REQUEST_SENT, request=request
            )
            self.runner.trigger()
            return self.runner.passes

    def done(self, user: str, session_id: str) -> SessionRow:
        """done: the application exited; its hosts become a ghost for ``fair_start`` seconds.

        Repeating it is harmless (a launcher retries when the answer was lost)."""
        with self._lock:
            row = self._own(user, session_id)
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
            self.runner.trigger()
            return row

    def withdraw(self, user: str, session_id: str) -> SessionRow:
        """Withdraw before start: the session ends and any placeholder held ahead goes."""
        with self._lock:
            row = self._own(user, session_id)
            if row.state is AppState.CANCELLED:
                return row
            if row.state not in PLACED:
                raise Conflict(f"session {session_id} is {row.state}: send done instead")
            row = self.runner.recorder.end(row, AppState.CANCELLED, self.now())
            self.runner.trigger()
            return row

    def events(self, user: str, session_id: str, after: int, limit: int = 1000) -> list[Event]:
        """Long polls call this on every wake-up: it reads without the bridge's lock or the
        store's writer, so launchers are never held up by a pass in progress."""
        owner = self.store.owner(session_id)
        if owner is None or (owner != user and not self.is_admin(user)):
            raise NotFound(f"no session {session_id} of yours")
        if owner == user:
            self.silence.heard(session_id, self.now())  # a launcher's long poll: it is alive
        try:
            return self.store.events(session_id, after=after, limit=limit)
        except KeyError:
            raise NotFound(f"no session {session_id} of yours") from None

    # -- the loop ---------------------------------------------------------------------------

    def poll(self, cluster: str) -> float:
        """Snapshot one cluster; returns the seconds until it should be polled again. A
        cluster that refused the bridge its rights is asked again now and then, so that health
        clears once an admin granted them, even with no session there to retry."""
        if self.runner.poller.poll(cluster):
            self.runner.trigger()
        if self.runner.problems.due("rights", cluster, self.now()):
            self.check_rights([cluster])
        return self.runner.poller.delay(cluster)

    def check_rights(self, clusters: Iterable[str] | None = None) -> None:
        """Whether the batch systems let the bridge hold reservations (at start, before
        serving): an admin who must grant rights hears of it at once, not at the first
        session's refusal."""
        names = self.runner.poller.clusters if clusters is None else clusters
        check_rights(self.adapter, self.runner.problems, names, self.now())

    def plan(self) -> bool:
        """Run a pass if one is due (something changed, or a start, a placement horizon, a
        ghost's end or a retry was reached). True if it ran. It calls no batch system: what it
        wants of them is left to :meth:`enact`."""
        with self._lock:
            if self.silence.withdraw(self.now()):
                self.runner.trigger()
            if not self.runner.due(self.now()):
                return False
            self.runner.run(self.now())
        for listener in self.pass_listeners:
            try:
                listener()
            except Exception:
                log.exception("a pass listener failed")
        return True

    def enact(self) -> int:
        """Carry out in the batch systems what the passes want (outside the lock, one run at a
        time); returns how many sessions were worked on."""
        return self.runner.enactor.run()

    def tick(self) -> bool:
        """A pass if one is due, then its placements: the loop runs the two apart (so that no
        call waits on a batch system); tests and tools step through both at once."""
        ran = self.plan()
        self.enact()
        return ran

    def reconcile(self) -> dict[str, int]:
        """Compare the batch systems' reservations with the store and repair the difference.

        It changes reservations, so it runs between two enactments, never during one; the
        bridge's lock is not held while the batch systems are asked."""
        with self.runner.enactor.working:
            ours = {}
            for cluster in self.runner.poller.clusters:
                try:
                    shot = self.adapter.snapshot([cluster]).clusters[cluster]
                except AdapterError:
                    continue
                prefix = self.runner.placeholders.prefix
                ours[cluster] = [r for r in shot.reservations if r.name.startswith(prefix)]
            done = self.runner.reconciler.reconcile(ours, self.now())
            self.reconciled.update(done)
            self.reconciliations += 1
        if done:
            log.info("reconciliation: %s", ", ".join(f"{k} {v}" for k, v in done.items()))
            self.runner.trigger()
        return done

    def _lost_placeholder(self, session_id: str, why: str) -> None:
        """A started session's placeholder cannot be held as promised (reconciliation): its
        launcher is told, and its hosts are given back."""
        with self._lock:
            row = self.store.session(session_id)
            if row is not None and row.state is AppState.STARTED:
                self.runner.recorder.kill(row, why, self.now())
            self.runner.trigger()

    def refresh_catalogue(self) -> dict[str, list[Change]]:
        return self.catalogue.refresh()

    def availability(self) -> list[CAP]:
        """Free hosts per cluster after every session of the last pass: what a new subscriber
        would be shown (empty before the first pass)."""
        last = self.runner.last
        if last is None:
            return []
        return [CAP.of(name, profile, last.now) for name, profile in sorted(last.left.items())]

    def health(self) -> Health:
        clusters = {
            name: ClusterHealth(
                status="stale" if status.stale else "ok",
                last_snapshot=status.last_ok,
                failures=status.failures,
                error=status.error,
            )
            for name, status in self.runner.poller.statuses().items()
        }
        problems = self.runner.problems.listed()
        degraded = bool(problems) or any(c.status != "ok" for c in clusters.values())
        return Health(
            status="degraded" if degraded else "ok",
            time=self.now(),
            clusters=clusters,
            sessions=len(self.store.sessions(states=ACTIVE)),
            problems=problems,
        )

    def close(self) -> None:
        with self._lock:
            self.adapter.close()
