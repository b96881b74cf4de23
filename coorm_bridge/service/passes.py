"""One policy pass carried out: states and events written, placeholders held, moved, released.

The policy (:mod:`coorm_bridge.core.policy`) only computes; this module turns its answer into facts,
in an order that keeps promises: ghosts that expired release their hosts first, then
applications whose start is now get their placeholders confirmed and a ``start`` event, then
placeholders are taken for those starting within ``placement.horizon``. A co-allocation that
fails is retried on the next passes (at most ``placement.attempts`` in a row, then not before
the batch system's hint or the next poll), never reported as started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from coorm_bridge.adapters.base import Adapter, NodeState
from coorm_bridge.core.messages import CAP, Change, ChangeKind
from coorm_bridge.core.policy import Application, Plan, Policy
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import ACTIVE, PLACED, AppState
from coorm_bridge.placement.coallocation import CoAllocationFailed
from coorm_bridge.placement.placeholders import Placeholders
from coorm_bridge.placement.reconcile import Reconciler
from coorm_bridge.service.config import Config
from coorm_bridge.service.polling import Poller
from coorm_bridge.store import Store
from coorm_bridge.store.rows import PlaceholderRow, SessionRow

log = logging.getLogger(__name__)


class PassRunner:
    """Runs passes and remembers what launchers were told; the caller holds the bridge lock."""

    def __init__(self, config: Config, adapter: Adapter, store: Store, clusters: list[str]) -> None:
        self.config = config
        self.store = store
        prefix = own_prefix(config, store)
        self.policy = Policy(config.policy)
        self.poller = Poller(adapter, clusters, prefix, config.placement.poll_interval)
        self.placeholders = Placeholders(adapter, store, prefix)
        self.reconciler = Reconciler(self.placeholders)
        self.notify: Callable[[str], None] = lambda session_id: None
        self.passes = 0
        self.placements = 0
        self.placement_failures = 0
        self.dirty = True
        self.next_due: int | None = None
        self.last: Plan | None = None
        self._sent: dict[str, dict[str, Profile]] = {}
        self._failures: dict[str, int] = {}
        self._not_before: dict[str, int] = {}
        self._release: set[str] = set()
        self._apps: dict[str, tuple[SessionRow, Application]] = {}

    def trigger(self) -> None:
        """Something changed: run a pass at the next tick (at most one per policy.interval)."""
        self.dirty = True

    def due(self, now: int) -> bool:
        return self.dirty or (self.next_due is not None and now >= self.next_due)

    def view(self, session_id: str) -> dict[str, Profile] | None:
        """The view the last pass computed for a waiting session (None: not placed then)."""
        try:
            return None if self.last is None else self.last.view(session_id)
        except KeyError:
            return None

    # -- the pass ---------------------------------------------------------------------------

    def run(self, now: int) -> Plan:
        """One pass. States, estimates and events are written in one transaction and launchers
        woken after it commits; the batch systems are called only after that (never inside a
        transaction: a slow controller must not block the store)."""
        self.dirty = False
        for session_id in sorted(self._release):
            if not self.placeholders.release(session_id):
                self._release.discard(session_id)
        rows = {row.id: row for row in self.store.sessions(states=ACTIVE)}
        result = self.policy.plan(self.poller.free(), self._applications(rows), now)
        self.last = result
        shrink: list[tuple[SessionRow, int]] = []
        with self._batch():
            for app_id, outcome in result.outcomes.items():
                row = rows[app_id]
                if outcome.state is AppState.FINISHED:
                    self.end(row, AppState.FINISHED, now)
                elif outcome.state is AppState.GHOST and row.state is AppState.FINISH_SENT:
                    assert outcome.hold_until is not None
                    self.store.update_session(app_id, now=now, state=AppState.GHOST)
                    shrink.append((row, outcome.hold_until))
                elif row.state in PLACED:
                    rows[app_id] = self._placed(row, result, now)
            for app_id in result.expired:
                reason = f"the allocation ended at {rows[app_id].alloc_end} without done"
                self._kill(rows[app_id], reason, now)
            for app_id, reason in self._lost(rows, result, self._held()).items():
                self._kill(rows[app_id], reason, now)
                self.trigger()  # its hosts are free for the others from the next pass
        for row, until in shrink:
            self.placeholders.shrink(row, until)
        for session_id in sorted(self._release):
            self._release_now(session_id)
        self._place(rows, result, now)
        self._sent = {k: v for k, v in self._sent.items() if k in result.outcomes}
        self.next_due = self._next_due(result, now)
        self.passes += 1
        return result

    def _applications(self, rows: dict[str, SessionRow]) -> list[Application]:
        """The policy's table; an unchanged row (the store hands out the same object for the
        same values) keeps its application, so a pass validates only what changed."""
        apps = self._apps
        table = []
        for session_id, row in rows.items():
            cached = apps.get(session_id)
            if cached is None or cached[0] is not row:
                cached = apps[session_id] = (row, application_of(row))
            table.append(cached[1])
        for gone in apps.keys() - rows.keys():
            del apps[gone]
        return table

    @contextmanager
    def _batch(self) -> Iterator[None]:
        """One transaction for many events; their sessions are woken once it committed."""
        woken: list[str] = []
        notify, self.notify = self.notify, woken.append
        try:
            with self.store.transaction():
                yield
        finally:
            self.notify = notify
        for session_id in dict.fromkeys(woken):
            notify(session_id)

    def _placed(self, row: SessionRow, result: Plan, now: int) -> SessionRow:
        """Persist a waiting application's new estimate; tell it when its view changed."""
        outcome = result.outcomes[row.id]
        state = AppState.WAITING if row.state is AppState.REQUEST_SENT else row.state
        estimate = outcome.estimated_start
        changed_estimate = estimate != row.estimated_start
        if state is not row.state or changed_estimate:
            row = self.store.update_session(row.id, now=now, state=state, estimated_start=estimate)
        if row.id in result.to_start or not (outcome.view_changed or changed_estimate):
            return row
        view = result.view(row.id)
        sent = self._sent.get(row.id, {})
        changes = [
            Change(cluster=c, kind=ChangeKind.AVAILABILITY, profile=CAP.of(c, p, now))
            for c, p in view.items()
            if c not in sent or sent[c].truncated(now) != p.truncated(now)
        ]
        self._sent[row.id] = view
        if changes or changed_estimate:
            event = {"type": "change", "time": now, "changes": changes, "estimated_start": estimate}
            self._emit(row.id, event)
        return row

    def _start(self, row: SessionRow, now: int) -> None:
        assert row.request is not None
        if self._not_before.get(row.id, 0) > now:
            return
        # A long pass may have crossed a second: a reservation cannot begin in the past.
        now = self._fresh(now)
        try:
            held = self.placeholders.ensure(row, now, now)
        except CoAllocationFailed as failed:
            self._failed(row, failed, now)
            return
        self._failures.pop(row.id, None)
        self._not_before.pop(row.id, None)
        self.placements += 1
        end = now + row.request.duration
        with self._batch():
            self.store.update_session(
                row.id,
                now=now,
                state=AppState.STARTED,
                started_at=now,
                alloc_end=end,
                estimated_start=now,
            )
            event = {
                "type": "start",
                "time": now,
                "end": end,
                "allocations": Placeholders.allocations(held),
            }
            self._emit(row.id, event)
        log.info("session %s started on %s until %d", row.id, ", ".join(held), end)

    def _kill(self, row: SessionRow, reason: str, now: int) -> None:
        """The allocation is taken back (its end passed without ``done``, a host went down):
        the launcher is told why, then the session ends and its placeholders go."""
        self._emit(row.id, {"type": "killed", "time": now, "reason": reason})
        self.end(row, AppState.FINISHED, now)

    def _held(self) -> dict[str, list[PlaceholderRow]]:
        """Every placeholder, by session: one query per pass rather than one per session."""
        held: dict[str, list[PlaceholderRow]] = {}
        for placeholder in self.store.placeholders():
            held.setdefault(placeholder.session_id, []).append(placeholder)
        return held

    def _lost(
        self,
        rows: dict[str, SessionRow],
        result: Plan,
        held: dict[str, list[PlaceholderRow]],
    ) -> dict[str, str]:
        """Started applications one of whose hosts is down in the batch system's last snapshot:
        the batch system killed what ran there, so a coupled code is gone (a drained host lets
        its job finish and is not a loss)."""
        lost: dict[str, str] = {}
        for app_id, outcome in result.outcomes.items():
            if rows[app_id].state is not AppState.STARTED or app_id in result.expired:
                continue
            if outcome.state is not AppState.STARTED:
                continue
            for placeholder in held.get(app_id, ()):
                shot = self.poller.status(placeholder.cluster).snapshot
                if shot is None:
                    continue
                down = {n.name for n in shot.nodes if n.state is NodeState.DOWN}
                gone = sorted(down.intersection(placeholder.host_names))
                if gone:
                    lost[app_id] = f"host {gone[0]} of {placeholder.cluster} went down"
                    break
        return lost

    def _place(self, rows: dict[str, SessionRow], result: Plan, now: int) -> None:
        """Start who starts now; hold placeholders for those starting within the horizon, and
        none for the others.

        Placeholders that move later go first, lowest priority first, then the starts and the
        others in priority order: a higher-priority application taking over hosts that a lower
        one held a moment ago (say it adapted its request within fair_start) finds them vacated.
        """
        horizon = self.config.placement.horizon
        later: list[tuple[SessionRow, int]] = []
        others: list[tuple[SessionRow, int]] = []
        placeholders = self._held()
        for app_id, outcome in result.outcomes.items():
            row = rows[app_id]
            if row.state is not AppState.WAITING or app_id in result.to_start:
                continue
            start = outcome.estimated_start
            held = placeholders.get(app_id, [])
            if start is None or start > now + horizon:
                if held:
                    self._release_now(app_id)
                continue
            moved_later = any(p.start < start for p in held)
            (later if moved_later else others).append((row, start))
        for row, start in reversed(later):
            self._ensure(row, start, now)
        for app_id in result.to_start:
            self._start(rows[app_id], now)
        for row, start in others:
            self._ensure(row, start, now)

    def _ensure(self, row: SessionRow, start: int, now: int) -> None:
        if self._not_before.get(row.id, 0) > now:
            return
        now = self._fresh(now)
        try:
            self.placeholders.ensure(row, max(start, now), now)
        except CoAllocationFailed as failed:
            self._failed(row, failed, now)
        else:
            self._failures.pop(row.id, None)

    def _fresh(self, now: int) -> int:
        return max(now, self.placeholders.adapter.now())

    def _failed(self, row: SessionRow, failed: CoAllocationFailed, now: int) -> None:
        """Bounded retries: refresh the refusing clusters' snapshots and try again next pass;
        after ``placement.attempts`` failures in a row wait for the hint or the next poll."""
        self.placement_failures += 1
        count = self._failures[row.id] = self._failures.get(row.id, 0) + 1
        log.info("session %s: %s (attempt %d)", row.id, failed, count)
        for cluster in failed.retry_after or (row.request.nodes if row.request else {}):
            self.poller.poll(cluster)
        if count >= self.config.placement.attempts:
            hints = [t for t in failed.retry_after.values() if t > now]
            wait = int(self.config.placement.poll_interval) + 1
            self._not_before[row.id] = max(hints, default=now + wait)
            self._failures[row.id] = 0
        self.trigger()

    def announce(self, changes: Mapping[str, list[Change]], now: int) -> None:
        """Tell every active session the changes of the clusters it sees (properties, links),
        in one transaction."""
        with self._batch():
            for row in self.store.sessions(states=ACTIVE):
                told = [change for c in row.clusters for change in changes.get(c, ())]
                if told:
                    event = {
                        "type": "change",
                        "time": now,
                        "changes": told,
                        "estimated_start": row.estimated_start,
                    }
                    self._emit(row.id, event)

    # -- endings ------------------------------------------------------------------------------

    def end(self, row: SessionRow, state: AppState, now: int) -> SessionRow:
        """Finish or cancel a session: final state and its ``ended`` event, in one transaction."""
        with self._batch():
            row = self.store.update_session(row.id, now=now, state=state)
            self._emit(row.id, {"type": "ended", "time": now, "state": state})
        self._release.add(row.id)
        self._sent.pop(row.id, None)
        return row

    def _release_now(self, session_id: str) -> None:
        if self.placeholders.release(session_id):
            self._release.add(session_id)  # retried on the next passes and by reconciliation
        else:
            self._release.discard(session_id)

    def _emit(self, session_id: str, event: dict[str, Any]) -> None:
        """Store an event; always called in :meth:`_batch`, which wakes the session's long polls
        once the event is committed (they read without waiting for the writer)."""
        self.store.append_event(session_id, event)
        self.notify(session_id)

    def _next_due(self, result: Plan, now: int) -> int | None:
        """The next moment a pass has work even if nothing changes: a start, a horizon reached,
        a ghost or allocation ending, a retry."""
        horizon = self.config.placement.horizon
        due: list[int] = list(self._not_before.values())
        for outcome in result.outcomes.values():
            if outcome.hold_until is not None:
                due.append(outcome.hold_until)
            if outcome.estimated_start is not None:
                due += [outcome.estimated_start, outcome.estimated_start - horizon]
        if self._release or self._failures:
            due.append(now + 1)
        return min((t for t in due if t > now), default=None)


def application_of(row: SessionRow) -> Application:
    """A stored session as the policy's application table wants it."""
    return Application.model_validate({key: getattr(row, key) for key in _APP_FIELDS})


_APP_FIELDS: Final = tuple(Application.model_fields)


def own_prefix(config: Config, store: Store) -> str:
    """How this bridge's reservations begin: the configured prefix and this bridge's instance
    id. Reservations of another bridge with the same prefix are foreign load to this one."""
    return f"{config.bridge.placeholder_prefix}{store.instance}-"
