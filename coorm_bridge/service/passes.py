"""One policy pass: planned, recorded, and handed to the enactor as intents.

The policy (:mod:`coorm_bridge.core.policy`) only computes. A pass turns its answer into facts in
the store (states, estimates, ``change``, ``killed`` and ``ended`` events, in one transaction,
launchers woken after the commit) and into *intents* for the batch systems, which the enactor
(:mod:`coorm_bridge.service.enactor`) carries out outside the bridge's lock. A pass calls no
batch system, so it takes a moment whatever the batch systems do.

Intents are worked out afresh at every pass from the store and the plan (level, not edge): after
a restart, or a failed call, the next pass asks again for whatever is still missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Final

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import NodeState
from coorm_bridge.core.policy import Application, Plan, Policy
from coorm_bridge.core.profile import Profile
from coorm_bridge.core.states import ACTIVE, PLACED, AppState
from coorm_bridge.placement.placeholders import RELEASING
from coorm_bridge.service.batchrules import BatchRules
from coorm_bridge.service.config import Config
from coorm_bridge.service.due import Due
from coorm_bridge.service.enactor import Cancel, Enactor, Hold, Intent, Release, Shrink, Start
from coorm_bridge.service.evolving_pass import EvolvingPass, in_v1_table
from coorm_bridge.service.limits import UserLimits
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.quiet import Quiet
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.service.silence import Silence
from coorm_bridge.service.stats import Stats
from coorm_bridge.service.telling import Told
from coorm_bridge.store import PlaceholderRow, SessionRow, Store, StoreFull
from coorm_bridge.store.rows import priority

log = logging.getLogger(__name__)


class PassRunner:
    """Runs passes and remembers what launchers were told.

    ``limits`` gives each owner's cap on hosts held at once, which the policy keeps to;
    ``lock`` is the bridge's lock, taken for a whole pass; ``passed`` is told after each one
    (the listeners: requests waiting for their estimate), and ``stats`` counts it. ``silence``
    withdraws the sessions whose launcher went silent, before each pass."""

    def __init__(
        self,
        *,
        config: Config,
        adapter: Adapter,
        store: Store,
        limits: UserLimits,
        rules: BatchRules,
        policy: Policy,
        poller: Poller,
        recorder: Recorder,
        enactor: Enactor,
        silence: Silence,
        due: Due,
        lock: AbstractContextManager[object],
        passed: Callable[[], None],
        stats: Stats,
        evolving: EvolvingPass,
        quiet: Quiet,
    ) -> None:
        self.config = config
        self.evolving = evolving
        self.adapter = adapter
        self.store = store
        self.limits = limits
        self.rules = rules
        self.policy = policy
        self.poller = poller
        self.recorder = recorder
        self.enactor = enactor
        self.silence = silence
        self.due = due
        self.lock = lock
        self.passed = passed
        self.stats = stats
        self.last: Plan | None = None
        self.told = Told(quiet, stats)
        self._apps: dict[str, tuple[SessionRow, tuple[int | None, int | None], Application]] = {}
        self._any_evolving = False

    def plan(self) -> bool:
        """Run a pass if one is due (something changed, or a start, a placement horizon, a
        ghost's end or a retry was reached). True if it ran. It calls no batch system: what it
        wants of them is left to the enactor."""
        with self.lock:
            if self.silence.withdraw(self.adapter.now()):
                self.due.trigger()
            now = self.adapter.now()
            if not self.due.due(now):
                return False
            self.run(now)
        self.passed()
        return True

    def view(self, session_id: str) -> dict[str, Profile] | None:
        """The view the last pass computed for a waiting session (None: not placed then)."""
        try:
            return None if self.last is None else self.last.view(session_id)
        except KeyError:
            return None

    def lost(self, session_id: str, why: str) -> None:
        """A started session's placeholder cannot be held as promised (reconciliation found
        it gone or changed for good): its launcher is told, and its hosts are given back."""
        with self.lock:
            row = self.store.session(session_id)
            if row is not None and row.state is AppState.STARTED:
                self.recorder.kill(row, why, self.adapter.now())
            self.due.trigger()

    # -- the pass ---------------------------------------------------------------------------

    def run(self, now: int) -> Plan:
        """One pass: plan, record (one transaction, one savepoint per session: a session whose
        handling raises is set aside alone), and hand the intents to the enactor."""
        self.due.taken()
        rows = {row.id: row for row in self.store.active_sessions()}
        held = self._held()
        table = self._applications(rows, now)
        free = self.poller.free(self._accounted(rows, held))
        if self._any_evolving:
            free = self.evolving.book.hold(free, rows, now)
        for cluster in self.store.drained().keys() & free.keys():
            # Drained by an admin: nothing new fits there, so no placeholder is made; started
            # sessions keep theirs (the policy settles them whatever is free), and waiting
            # ones that want it wait, told they never fit, until it is resumed.
            free[cluster] = Profile.constant(0)
        caps = self.limits.held_caps(row.owner for row in rows.values())
        result = self.policy.plan(free, table, now, caps)
        self.last = result
        broken: dict[str, Exception] = {}
        ended: set[str] = set()
        with self.recorder.batch():
            for app_id in result.outcomes:
                try:
                    rows[app_id] = self._record(rows[app_id], result, now)
                except StoreFull:  # not this one's: nothing can be written now
                    raise
                except Exception as error:  # a bug, for this session only
                    broken[app_id] = error
            lost = self._lost(rows, result, held)
            for app_id, reason in [*self._expired(rows, result), *lost.items()]:
                rows[app_id] = self.recorder.kill(rows[app_id], reason, now)
                ended.add(app_id)
            cancels = self.evolving.run(rows, result, now) if self._any_evolving else []
        for app_id, failure in broken.items():
            self._set_aside(rows[app_id], failure, now)
            ended.add(app_id)
        self.told.forget(ended)
        self._intend(rows, result, held, ended, now, cancels)
        self.told.keep(result.outcomes, rows)
        self.due.next_at(self._next_due(result, now))
        if self._any_evolving and self.evolving.again:
            self.due.trigger()  # preemptible shares moved: look again at once
        self.stats.passes += 1
        return result

    def _applications(self, rows: dict[str, SessionRow], now: int) -> list[Application]:
        """The policy's table; an unchanged row (the store hands out the same object for the
        same values) keeps its application, so a pass validates only what changed. A row that
        cannot be read as an application is set aside, alone."""
        apps, waits = self._apps, self.enactor.not_before()
        table = []
        self._any_evolving = any(row.evolving or row.parent for row in rows.values())
        if self._any_evolving:
            self.evolving.index(rows)
        for session_id, row in list(rows.items()):
            if self._any_evolving and not in_v1_table(row):
                continue
            not_before = waits.get(session_id)
            ghost = None
            if row.typed is not None:  # a request of an evolving application
                gap = self.adapter.reservation_gap(row.clusters[0])
                after, ghost = self.evolving.placement(row, gap)
                if row.typed.related_how is not None and after is not None:
                    # A refusal at the related request's old end says nothing of a new one.
                    self.enactor.rebase(session_id, after)
                if after is not None:
                    not_before = max(not_before or 0, after)
            cached = apps.get(session_id)
            if cached is None or cached[0] is not row or cached[1] != (not_before, ghost):
                try:
                    app = application_of(
                        row, not_before if row.state in PLACED else None, ghost=ghost
                    )
                except StoreFull:  # not this one's: nothing can be written now
                    raise
                except Exception as error:  # a bug, for this session only
                    self._set_aside(row, error, now)
                    del rows[session_id]
                    continue
                cached = apps[session_id] = (row, (not_before, ghost), app)
            table.append(cached[2])
        for gone in apps.keys() - rows.keys():
            del apps[gone]
        return table

    def _record(self, row: SessionRow, result: Plan, now: int) -> SessionRow:
        outcome = result.outcomes[row.id]
        if outcome.state is AppState.FINISHED:
            return self.recorder.end(row, AppState.FINISHED, now)
        if outcome.state is AppState.GHOST and row.state is AppState.FINISH_SENT:
            return self.recorder.update(row, now, state=AppState.GHOST)
        if row.state in PLACED:
            return self._placed(row, result, now)
        return row

    def _placed(self, row: SessionRow, result: Plan, now: int) -> SessionRow:
        """Persist a waiting application's new estimate; tell it when its view changed.

        Most sessions change nothing in a pass: only those that do open a savepoint, so that a
        failure while writing one of them undoes that session's writes alone."""
        outcome = result.outcomes[row.id]
        state = AppState.WAITING if row.state is AppState.REQUEST_SENT else row.state
        estimate = outcome.estimated_start
        changed_estimate = estimate != row.estimated_start
        changed_state = state is not row.state or changed_estimate
        event = None
        view: dict[str, Profile] | None = None
        # Evolving applications and their requests are told by self.evolving (API v2).
        told = row.parent is None and not row.evolving
        if told and row.id not in result.to_start and (outcome.view_changed or changed_estimate):
            view = self.rules.clip(row.owner, result.view(row.id))
            changes = self.told.changes(row, view, now)
            if changes is None:  # past the launcher's horizon: sent with the next change
                view, changes = None, []
            if changes or changed_estimate:
                event = {
                    "type": "change",
                    "time": now,
                    "changes": changes,
                    "estimated_start": estimate,
                }
        seq = None
        if changed_state or event is not None:
            with self.store.transaction():
                if changed_state:
                    row = self.recorder.update(row, now, state=state, estimated_start=estimate)
                if event is not None:
                    seq = self.recorder.emit(row.id, event, self.told.read(row.id))
        if view is not None and seq is not None:
            self.told.sent(row.id, view, seq, now)
        return row

    def _set_aside(self, row: SessionRow, error: Exception, now: int) -> None:
        self.stats.session_errors += 1
        log.error("session %s set aside after an unexpected error", row.id, exc_info=error)
        why = f"the bridge could not handle this session: {type(error).__name__}: {error}"
        try:
            self.recorder.fail(row, why, now)
        except Exception:
            log.exception("session %s could not even be set aside", row.id)

    def _held(self) -> dict[str, list[PlaceholderRow]]:
        """Every placeholder, by session: one query per pass rather than one per session."""
        held: dict[str, list[PlaceholderRow]] = {}
        for placeholder in self.store.placeholders():
            held.setdefault(placeholder.session_id, []).append(placeholder)
        return held

    @staticmethod
    def _accounted(
        rows: Mapping[str, SessionRow], held: Mapping[str, list[PlaceholderRow]]
    ) -> dict[str, frozenset[str]]:
        """Per cluster, the placeholders the policy subtracts itself: those of active sessions
        not being released. Any other reservation of the bridge holds its hosts as load."""
        names: dict[str, set[str]] = {}
        for session_id, placeholders in held.items():
            if session_id in rows:
                for p in placeholders:
                    if p.status is not RELEASING:
                        names.setdefault(p.cluster, set()).add(p.name)
        return {cluster: frozenset(found) for cluster, found in names.items()}

    def _expired(self, rows: Mapping[str, SessionRow], result: Plan) -> list[tuple[str, str]]:
        return [
            (app_id, f"the allocation ended at {rows[app_id].alloc_end} without done")
            for app_id in result.expired
            if app_id in rows and rows[app_id].state is AppState.STARTED
        ]

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
            row = rows.get(app_id)
            if row is None or row.state is not AppState.STARTED or app_id in result.expired:
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

    # -- intents ------------------------------------------------------------------------------

    def _intend(  # noqa: PLR0917 - the pass's own state, handed on
        self,
        rows: Mapping[str, SessionRow],
        result: Plan,
        held: Mapping[str, list[PlaceholderRow]],
        ended: set[str],
        now: int,
        cancels: list[tuple[str, Cancel]],
    ) -> None:
        """What the batch systems should hold after this pass, in the order to get there.

        Releases first (ended sessions, ghosts past their time), then shrinks to ghosts, then
        placeholders that move later (lowest priority first), then the starts, then the others
        in priority order: a higher-priority application taking over hosts that a lower one held
        a moment ago (say it adapted its request within fair_start) finds them vacated.
        Placeholders are held for applications starting within ``placement.horizon``, and for
        the first ``placement.hold_first`` waiting ones wherever their start is, so that local
        jobs submitted later cannot delay them."""
        horizon, first = self.config.placement.horizon, self.config.placement.hold_first
        releases: list[str] = []
        shrinks: dict[str, Intent] = {}
        later: list[tuple[str, Intent]] = []
        starts: list[str] = []
        others: list[tuple[str, Intent]] = []
        for session_id in held:
            row = rows.get(session_id)
            if row is None or row.state not in ACTIVE or session_id in ended:
                releases.append(session_id)
        for app_id, outcome in result.outcomes.items():
            row = rows.get(app_id)
            if row is None or row.state not in ACTIVE or app_id in ended:
                continue
            placeholders = held.get(app_id, [])
            if row.state is AppState.GHOST and outcome.hold_until is not None:
                if placeholders and outcome.hold_until <= max(now, row.done_at or now):
                    # No ghost (a ``next`` request takes its hosts over at the done): deleted
                    # before that one moves onto them in this enactment. Shrunk, a begun OAR
                    # container keeps its end, and OAR refuses the other one there until then.
                    releases.append(app_id)
                elif any(p.end > outcome.hold_until for p in placeholders):
                    shrinks[app_id] = Shrink(outcome.hold_until)
                continue
            if row.state is not AppState.WAITING:
                continue
            start = outcome.estimated_start
            if app_id in result.to_start:
                starts.append(app_id)
                continue
            top = first > 0 and start is not None
            if top:
                first -= 1
            if start is None or (start > now + horizon and not top):
                if placeholders:
                    releases.append(app_id)
                continue
            moved_later = any(p.start < start for p in placeholders)
            (later if moved_later else others).append((app_id, Hold(start)))
        intents: dict[str, Intent] = dict.fromkeys(releases, Release())
        intents |= shrinks
        intents |= dict(reversed(later))
        intents |= dict.fromkeys(starts, Start())
        intents |= dict(others)
        intents |= dict(cancels)  # preemptible work past its deadline
        self.enactor.want(list(intents), intents)

    def _next_due(self, result: Plan, now: int) -> int | None:
        """The next moment a pass has work even if nothing changes: a start, a horizon reached,
        a ghost or allocation ending, a retry."""
        horizon = self.config.placement.horizon
        due: list[int] = self.enactor.next_attempts()
        if self._any_evolving:
            due += self.evolving.due
        for outcome in result.outcomes.values():
            if outcome.hold_until is not None:
                due.append(outcome.hold_until)
            if outcome.estimated_start is not None:
                due += [outcome.estimated_start, outcome.estimated_start - horizon]
        return min((t for t in due if t > now), default=None)


def application_of(
    row: SessionRow, not_before: int | None = None, *, ghost: int | None = None
) -> Application:
    """A stored session as the policy's application table wants it; a request of an evolving
    application at its place: its application's, then its own (:func:`priority`)."""
    fields = {key: getattr(row, key) for key in _APP_FIELDS}
    order = priority(row.order) if row.typed is None else row.typed.priority
    return Application.model_validate(
        {**fields, "order": order, "not_before": not_before, "ghost": ghost}
    )


def session_end(row: SessionRow, fair_start: int) -> int | None:
    """When a session's hosts are given back: its allocation's end, its ghost's once done."""
    if row.state in (AppState.FINISH_SENT, AppState.GHOST) and row.done_at is not None:
        return application_of(row).hold_end(fair_start)
    return row.alloc_end


_APP_FIELDS: Final = tuple(
    name for name in Application.model_fields if name not in ("not_before", "ghost", "order")
)


def own_prefix(config: Config, store: Store) -> str:
    """How this bridge's reservations begin: the configured prefix and this bridge's instance
    id. Reservations of another bridge with the same prefix are foreign load to this one."""
    return f"{config.bridge.placeholder_prefix}{store.instance}-"
