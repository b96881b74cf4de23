"""The enactor: what the last pass decided, made real in the batch systems, outside the lock.

A pass (:mod:`coorm_bridge.service.passes`) plans and records in a moment; what it wants from the
batch systems is an *intent* per session: hold placeholders from a start, start now, shrink to a
ghost, release. The enactor carries them out one session at a time, in the pass's order, while
the HTTP API and the next passes go on: a batch system that takes seconds per call slows the
placements down, never the launchers' calls.

Each session is on its own: a co-allocation that fails is retried later (the session is placed no
earlier than its next attempt, so those behind it may use the hosts meanwhile, and its launcher
gets a ``placement_failed`` event with the batch system's reason); one refused with a hint ("it
could be held from X") is tried again at once, held from X; one that can never succeed
ends the session; one refused because the bridge itself lacks rights ends none: the admin is
told once (:mod:`.problems`) and the session retries with back-off until they are granted; an
unexpected error sets that session aside (``error``), never the others. A release that fails (a
job still running inside, a silent batch system) is retried with back-off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.states import ACTIVE, AppState
from coorm_bridge.placement.coallocation import CoAllocationFailed
from coorm_bridge.placement.placeholders import Placeholders
from coorm_bridge.service.config import Config
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.problems import Problems, check_rights
from coorm_bridge.service.recorder import Recorder
from coorm_bridge.service.stats import Stats
from coorm_bridge.store import SessionRow, Store, StoreFull
from coorm_bridge.store.rows import PlaceholderRow

log = logging.getLogger(__name__)

#: Back-off of a session that keeps failing, as a multiple of the poll interval, at most.
MAX_BACKOFF_FACTOR = 16


@dataclass(frozen=True, slots=True)
class Hold:
    """Hold placeholders over ``[start, start + duration)`` (moved in place if held already)."""

    start: int


@dataclass(frozen=True, slots=True)
class Start:
    """Hold placeholders from now, read their hosts back, and start the session."""


@dataclass(frozen=True, slots=True)
class Shrink:
    """Done: keep the hosts only until ``until`` (the ghost)."""

    until: int


@dataclass(frozen=True, slots=True)
class Release:
    """Cancel what still runs inside the placeholders, then delete them."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel ``owner``'s jobs on ``hosts`` of ``cluster``: preemptible work past its deadline
    (API v2), outside any placeholder of the bridge."""

    cluster: str
    hosts: tuple[str, ...]
    owner: str


Intent = Hold | Start | Shrink | Release | Cancel


@dataclass(frozen=True, slots=True)
class Backoff:
    """A failing session's next attempt (``retry_at``), and the batch system's hint: when it
    could hold what was refused (``hinted``). The policy places it no earlier than either, but
    the attempt is not put off until the hint: the placeholder is held from it now, so that
    nobody takes those hosts meanwhile."""

    failures: int
    retry_at: int
    hinted: int = 0

    @property
    def not_before(self) -> int:
        return max(self.retry_at, self.hinted)


class Enactor:
    """Carries out intents; :meth:`run` is called by the loop (one run at a time).

    ``lock`` is the bridge's lock, taken briefly to record an outcome, never across a batch
    call; ``working`` is held while batch systems are changed (one enactment or reconciliation
    at a time); ``trigger`` asks for a pass; ``problems`` are what an admin must fix (the
    bridge's rights), told once and asked again on success; ``stats`` counts placements, their
    failures and sessions set aside."""

    def __init__(
        self,
        *,
        config: Config,
        adapter: Adapter,
        store: Store,
        placeholders: Placeholders,
        poller: Poller,
        recorder: Recorder,
        problems: Problems,
        lock: AbstractContextManager[object],
        working: AbstractContextManager[object],
        trigger: Callable[[], None],
        stats: Stats,
    ) -> None:
        self.config = config
        self.adapter = adapter
        self.store = store
        self.placeholders = placeholders
        self.poller = poller
        self.recorder = recorder
        self.problems = problems
        self.lock = lock
        self.working = working
        self.trigger = trigger
        self.stats = stats
        self.order: tuple[str, ...] = ()
        self.intents: dict[str, Intent] = {}
        self.placement: dict[str, Backoff] = {}
        """Sessions whose placeholders could not be held, and when to try again."""
        self._based: dict[str, int] = {}
        """Per session, the earliest start its last :meth:`rebase` gave."""
        self.releases: dict[str, Backoff] = {}
        """Sessions whose placeholders could not be shrunk or deleted, and when to try again."""
        self._stopping = threading.Event()

    # -- from the passes (under the bridge's lock) --------------------------------------------

    def want(self, order: Sequence[str], intents: Mapping[str, Intent]) -> None:
        """The last pass's intents, in the order to carry them out; older ones are dropped."""
        self.order, self.intents = tuple(order), dict(intents)
        for gone in self.placement.keys() - self.intents.keys():
            del self.placement[gone]
        for gone in self.releases.keys() - self.intents.keys():
            del self.releases[gone]
        for gone in self._based.keys() - self.intents.keys():
            del self._based[gone]

    def rebase(self, sid: str, after: int) -> None:
        """Drop a failing session's back-off when it is placed no earlier than ``after`` from
        now on, before its retry (an announced update whose related request ended early: the
        hint it was refused with was about the old end)."""
        backoff = self.placement.get(sid)
        if backoff is not None and after < backoff.not_before and after != self._based.get(sid):
            del self.placement[sid]
        self._based[sid] = after

    def not_before(self) -> dict[str, int]:
        """Per failing session, the policy places it no earlier than its next attempt or the
        batch system's hint, whichever is later."""
        return {sid: b.not_before for sid, b in self.placement.items()}

    def next_attempts(self) -> list[int]:
        return [b.retry_at for b in (*self.placement.values(), *self.releases.values())]

    @property
    def pending(self) -> bool:
        return bool(self.intents)

    # -- carrying out -------------------------------------------------------------------------

    def stop(self) -> None:
        """Carry out nothing more after the intent in progress: a stop must not wait for every
        queued placement on a slow batch system (60 of 3 s each kept a daemon three minutes).
        What is left is planned again at the next start, from the store."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def resume(self) -> None:
        """Carry out intents again (a loop started anew)."""
        self._stopping.clear()

    def run(self) -> int:
        """Carry out what is due; returns how many intents were worked on."""
        with self.working:
            worked = 0
            for sid in self.order:
                if self._stopping.is_set():
                    break
                intent = self.intents.get(sid)
                now = self.adapter.now()
                if intent is None or self._later(sid, intent, now):
                    continue
                worked += 1
                try:
                    finished = self._carry(sid, intent, now)
                except StoreFull:  # not this one's: nothing can be written now
                    raise
                except Exception as error:  # a bug, for this session only
                    self._set_aside(sid, error, now)
                    finished = True
                if finished:
                    with self.lock:
                        if self.intents.get(sid) is intent:
                            del self.intents[sid]
            return worked

    def _later(self, sid: str, intent: Intent, now: int) -> bool:
        book = self.releases if isinstance(intent, Shrink | Release | Cancel) else self.placement
        backoff = book.get(sid)
        return backoff is not None and backoff.retry_at > now

    def _carry(self, sid: str, intent: Intent, now: int) -> bool:
        """One intent; True when it needs no further work (done, moot or failed for now)."""
        row = self.store.session(sid)
        if row is None:
            return True
        if isinstance(intent, Release):
            return self._release(row, now)
        if isinstance(intent, Cancel):
            self._cancel(intent)
            return True
        if isinstance(intent, Shrink):
            left = self.placeholders.shrink(row, intent.until)
            return self._released(row, left, "shrunk to its ghost", now)
        if row.state is AppState.WAITING:
            self._place(row, intent, now)
        return True  # else the session moved on since the pass (withdrawn, new request)

    def _place(self, row: SessionRow, intent: Hold | Start, now: int) -> None:
        """Hold its placeholders from a start, or start it now if they are usable."""
        sid = row.id
        # From the batch systems' time, not the pass's (a long pass may have crossed a second):
        # a start in the past would shorten the allocation. The calls below reach them a
        # moment later still, which Slurm (and the mock) take as asked.
        now = max(now, self.adapter.now())
        start = now if isinstance(intent, Start) else max(intent.start, now)
        unbegun: list[str] = []
        try:
            held = self.placeholders.ensure(row, start, now)
            if isinstance(intent, Start):
                held, unbegun = self.placeholders.confirm(row, held, self.adapter.now())
        except CoAllocationFailed as failed:
            self._failed(row, failed, now)
            return
        # Held (or already held): a cluster thought to refuse the bridge is asked again now.
        check_rights(
            self.adapter, self.problems, [c for c in held if self.problems.has("rights", c)], now
        )
        busy, retry_at = None, now + 1
        if isinstance(intent, Start):
            # Told to start, a launcher submits at once: every placeholder must have begun and
            # be free of others' jobs, or its components would not start together. Held from
            # the adapter's lead on, it is looked at again when it begins, then every second.
            busy = "; ".join(unbegun) if unbegun else self._overrun(held)
            retry_at = max(retry_at, *(p.start for p in held.values()))
        if busy is not None:
            with self.lock:
                # Held, but not usable yet: its launcher's jobs would wait there, on this
                # cluster only. Said once, looked at again until it is usable.
                level = logging.DEBUG if sid in self.placement else logging.INFO
                log.log(level, "session %s: not started yet: %s", sid, busy)
                self.placement[sid] = Backoff(0, retry_at)
                self.trigger()  # a pass places it no earlier, and comes back then
            return
        if isinstance(intent, Start):
            assert row.request is not None
            held = self.placeholders.stretch(row, held, now + row.request.duration)
        with self.lock:
            self.placement.pop(sid, None)
            if isinstance(intent, Start):
                fresh = self.store.session(sid)
                waiting = fresh is not None and fresh.state is AppState.WAITING
                if fresh is not None and waiting and fresh.request == row.request:
                    self.recorder.started(fresh, held, now)
                    self.stats.placements += 1
                self.trigger()  # its hosts leave the others' views at the next pass

    def _cancel(self, intent: Cancel) -> None:
        """Cancel what the owner runs on the hosts outside reservations (from the last
        snapshot, taken again first): what a preemptible request left running past its
        deadline. A failed call is logged; the job's own time limit ends it anyway."""
        self.poller.poll(intent.cluster)
        jobs = self.poller.owners_jobs_on(intent.cluster, intent.owner, intent.hosts)
        for job in jobs or ():
            try:
                self.adapter.cancel(intent.cluster, job.id)
                log.info("cancelled job %s of %s on %s: preempted", job.id, job.user,
                         intent.cluster)  # fmt: skip
            except Exception as error:
                log.warning("job %s on %s not cancelled: %s", job.id, intent.cluster, error)

    def _overrun(self, held: Mapping[str, PlaceholderRow]) -> str | None:
        """A job of someone else's still running on the held hosts (past its time limit: Slurm
        takes up to its time-limit check, 30 s, plus KillWait to stop one), or None.

        From the last snapshot; one that shows such a job is taken again to be sure, so that the
        common case costs no batch-system call."""
        for cluster, placeholder in sorted(held.items()):
            hosts, name = placeholder.host_names, placeholder.name
            job = self.poller.running_on(cluster, hosts, besides=name)
            if job is not None:  # the snapshot may be older than the job's end: look again
                self.poller.poll(cluster)
                job = self.poller.running_on(cluster, hosts, besides=name)
            if job is not None:
                where = ", ".join(sorted(set(hosts).intersection(job.host_names)))
                return f"{cluster}: job {job.id} still runs on {where}"
        return None

    def _release(self, row: SessionRow, now: int) -> bool:
        left = self.placeholders.release(row.id, inside=self.poller.jobs_in)
        if not left:
            self.trigger()  # the hosts are free for the others from the next pass
        return self._released(row, left, "released", now)

    def _released(self, row: SessionRow, left: list[str], what: str, now: int) -> bool:
        """Back off while some cluster keeps a placeholder (a job inside, a silent batch
        system); True once none is left."""
        if not left:
            self.releases.pop(row.id, None)
            return True
        old = self.releases.get(row.id)
        failures = 1 if old is None else old.failures + 1
        retry_at = now + self._backoff(failures)
        self.releases[row.id] = Backoff(failures, retry_at)
        log.log(
            logging.INFO if failures == 1 else logging.DEBUG,
            "placeholders of %s on %s not %s yet; trying again at %d",
            row.id,
            ", ".join(left),
            what,
            retry_at,
        )
        return False

    def _failed(self, row: SessionRow, failed: CoAllocationFailed, now: int) -> None:
        """Tell the launcher, refresh what the refusing clusters look like, and try again no
        earlier than the batch system's hint, or after a back-off; never again when it can
        never succeed."""
        self.stats.placement_failures += 1
        if failed.permanent:
            with self.lock:
                fresh = self.store.session(row.id)
                if fresh is not None and fresh.state in ACTIVE:
                    log.warning("session %s ends: %s", row.id, failed)
                    self.recorder.fail(fresh, str(failed), now)
                    self.trigger()
            return
        assert row.request is not None
        old = self.placement.get(row.id)
        failures = 1 if old is None else old.failures + 1
        why, hinted = str(failed), 0
        if failed.lacking:
            retry_at = self._lacking_rights(row.id, failed.lacking, failures, now)
            clusters = ", ".join(sorted(failed.lacking))
            why = (
                f"the bridge lacks the rights to hold reservations on {clusters}; its admin was "
                "told (GET /v1/health): this session keeps its place and is tried again until "
                f"they are granted ({failed})"
            )
        else:
            for cluster in failed.retry_after or failed.unavailable or row.request.nodes:
                self.poller.poll(cluster)
            hinted = max((t for t in failed.retry_after.values() if t > now), default=0)
            if failures < self.config.placement.attempts:
                retry_at = now + 1
            else:
                retry_at = now + self._backoff(failures)
            log.info(
                "session %s: %s (attempt %d, next at %d%s)", row.id, failed, failures, retry_at,
                f", from {hinted} on" if hinted else "",
            )  # fmt: skip
        with self.lock:
            self.placement[row.id] = Backoff(failures, retry_at, hinted)
            fresh = self.store.session(row.id)
            if fresh is not None and fresh.state in ACTIVE:
                self.recorder.placement_failed(fresh, why, retry_at, now)
            self.trigger()

    def _lacking_rights(self, sid: str, lacking: Mapping[str, str], failures: int, now: int) -> int:
        """The admin is told once (:class:`Problems`); the session backs off from its first
        failure (retrying at once cannot help) and its own lines go to DEBUG after the first.
        Returns when to try again."""
        for cluster, message in lacking.items():
            self.problems.report("rights", cluster, message, now)
        retry_at = now + self._backoff(failures + self.config.placement.attempts - 1)
        log.log(
            logging.INFO if failures == 1 else logging.DEBUG,
            "session %s waits: the bridge may not hold reservations on %s (attempt %d, next at %d)",
            sid,
            ", ".join(sorted(lacking)),
            failures,
            retry_at,
        )
        return retry_at

    def _backoff(self, failures: int) -> int:
        """Seconds before the next try: the poll interval, doubled with every failure past the
        allowed attempts, capped."""
        past = max(0, failures - self.config.placement.attempts)
        factor: int = min(2**past, MAX_BACKOFF_FACTOR)
        return max(1, round(self.config.placement.poll_interval * factor))

    def _set_aside(self, sid: str, error: Exception, now: int) -> None:
        """An unexpected error while handling one session ends that session, not the others:
        logged once with its traceback, counted, and told to its launcher."""
        self.stats.session_errors += 1
        log.error("session %s set aside after an unexpected error", sid, exc_info=error)
        try:
            with self.lock:
                row = self.store.session(sid)
                if row is not None and row.state in ACTIVE:
                    why = f"the bridge could not handle this session: {type(error).__name__}"
                    self.recorder.fail(row, f"{why}: {error}", now)
                    self.trigger()
        except Exception:
            log.exception("session %s could not even be set aside", sid)
