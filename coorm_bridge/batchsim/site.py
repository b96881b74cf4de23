"""A simulated site, running: its clusters' schedulers on one clock, what its clients may ask.

One :class:`.Simulation` (a :class:`.LocalScheduler` per cluster, the site's faults) on one
:class:`.Clock`. Every call first brings the schedulers up to the clock's time, so the site
evolves the same way whether it is looked at every second or once an hour (events are processed
at their own times, not at call times), and a virtual clock replays days of load in seconds.

Given a :class:`.Journal`, the site outlives its process as a real batch system does: every call
that changes it is recorded (:mod:`.recording`) before it returns, and a new site on the same
journal replays them at their simulated times onto the same platform, which gives back the same
history, then goes on. Without one, the state lives in memory, as tests and benchmarks want.

What a client asks (snapshots, reservations, jobs) is :class:`Site`'s; what only a test or an
experiment does (move virtual time, inject faults, change the site) is its
:class:`.SiteControls`. The site is used from several threads (the daemon's polling, placement,
HTTP handlers) and the schedulers are plain data structures: one re-entrant lock around every
call keeps the simulation from ever being entered twice at once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from coorm_bridge.batchsim import calls
from coorm_bridge.batchsim.clock import Clock, WallClock
from coorm_bridge.batchsim.controls import SiteControls
from coorm_bridge.batchsim.faults import SimulatedRefusal
from coorm_bridge.batchsim.journal import Journal
from coorm_bridge.batchsim.platform import PlatformSpec
from coorm_bridge.batchsim.recording import CallRecorder
from coorm_bridge.batchsim.scheduler import LocalScheduler
from coorm_bridge.batchsim.simulation import Simulation
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    PlatformSnapshot,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect

log = logging.getLogger(__name__)

#: Seconds between two tries to rebuild a site whose journal could not be written.
RECOVERY_INTERVAL = 1.0

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(method: Callable[Concatenate[Site, _P], _R]) -> Callable[Concatenate[Site, _P], _R]:
    """Run ``method`` holding the site's lock (see the module docstring)."""

    @functools.wraps(method)
    def locked(self: Site, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


class Site:
    """The simulated site of ``spec`` on ``clock`` (default: a wall clock from the platform's
    ``start``, or now); see the module docstring.

    With a ``journal``, a new one is given the platform's identity and the clock's time as its
    start; a saved one must be of the same platform (else AdapterError) and the clock at or past
    its last call: the site is rebuilt from its saved start, then resumes at the clock's time.
    The site owns the journal: :meth:`close` closes it, as does a failure to build.
    """

    def __init__(
        self, spec: PlatformSpec, clock: Clock | None = None, *, journal: Journal | None = None
    ) -> None:
        self.lock = threading.RLock()
        """Held while the simulation is entered; re-entrant, so a control holds it across
        calls."""
        self._spec = spec
        self._next_recovery = 0.0
        self.clock = clock or WallClock(origin=spec.start)
        self._recorder = None if journal is None else CallRecorder(journal)
        now = self.clock.now()
        if self._recorder is None:
            self._simulation = Simulation(spec, now)
        else:
            try:  # the site owns its journal from here on, even when it cannot be built
                self._simulation = self._recorder.open(spec, now)
            except BaseException:
                self._recorder.journal.close()
                raise
        self.controls = SiteControls(self, self._simulation)
        """Virtual time, faults and changes of the site, for tests and experiments."""

    @property
    def journal(self) -> Journal | None:
        return None if self._recorder is None else self._recorder.journal

    @property
    def spec(self) -> PlatformSpec:
        """The platform as it is now (upgrades and link changes included)."""
        return self._simulation.spec

    @property
    def start(self) -> int:
        """The simulated time the site started at, before any restart."""
        return self._simulation.start

    @property
    def schedulers(self) -> dict[str, LocalScheduler]:
        """Each cluster's scheduler, for tests, experiments and benchmarks that look inside."""
        return self._simulation.schedulers

    # -- what clients ask ---------------------------------------------------------------------

    def now(self) -> int:
        """The site's time; no lock, the clock is safe to read from any thread."""
        return self.clock.now()

    def instant(self) -> float:
        """:meth:`now` to the fraction of a second."""
        return self.clock.instant()

    @_locked
    def clusters(self) -> list[ClusterInfo]:
        return [c.info() for c in self.spec.clusters]

    @_locked
    def interconnect(self) -> Interconnect:
        return Interconnect(links=self.spec.links)

    @_locked
    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        """Nodes, jobs and reservations of ``clusters`` (default: all) now."""
        names = list(self.schedulers) if clusters is None else clusters
        now = self.sync()
        shots = {}
        for name in names:
            shots[name] = self._answering(name, now).snapshot()
        return PlatformSnapshot(time=now, clusters=shots)

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        handle = self.execute(calls.CreateReservation(cluster=cluster, spec=spec))
        assert isinstance(handle, ReservationHandle)
        return handle

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        handle = self.execute(calls.UpdateReservation(cluster=cluster, spec=spec))
        assert isinstance(handle, ReservationHandle)
        return handle

    def delete_reservation(self, cluster: str, name: str) -> None:
        self.execute(calls.DeleteReservation(cluster=cluster, name=name))

    def submit(self, cluster: str, job: JobSpec) -> str:
        """Queue a job; it runs for its ``RUNTIME_KEY`` seconds (default: its walltime)."""
        job_id = self.execute(calls.Submit(cluster=cluster, job=job))
        assert isinstance(job_id, str)
        return job_id

    def cancel(self, cluster: str, job_id: str) -> None:
        self.execute(calls.Cancel(cluster=cluster, job_id=job_id))

    def end_job(self, cluster: str, job_id: str, state: JobState) -> None:
        """A job's process ended by itself (a front end ran it): the simulated job ends now,
        ``state`` COMPLETED or FAILED by its exit status; one no longer running stays as it is."""
        self.execute(calls.EndJob(cluster=cluster, job_id=job_id, state=state))

    @_locked
    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self._answering(cluster, self.sync()).job_state(job_id)

    def close(self) -> None:
        """Close the journal, if any (its lock is released; the site is kept in it)."""
        with self.lock:
            if self._recorder is not None:
                self._recorder.close()

    # -- carrying calls out -------------------------------------------------------------------

    @_locked
    def execute(self, call: calls.Call) -> object:
        """Carry out ``call`` now and journal it before returning: every change to the site
        goes through here, so that a restart replays it."""
        self._check_usable(None)
        now = self.sync()
        try:
            result = self._simulation.apply(call, now)
        except SimulatedRefusal as refusal:
            self._record(now, calls.RefusalUsed(cluster=refusal.cluster or ""), None)
            raise
        self._record(now, call, result)
        return result

    @_locked
    def sync(self) -> int:
        """Process every event up to the clock's time; returns that time."""
        now = self.clock.now()
        self._simulation.advance(now)
        return now

    def _answering(self, cluster: str, now: int) -> LocalScheduler:
        """``cluster``'s scheduler, unless the site cannot be used or its batch system is in
        an outage at ``now`` (Unavailable); called holding :attr:`lock`."""
        self._check_usable(cluster)
        return self._simulation.answering(cluster, now)

    def _check_usable(self, cluster: str | None) -> None:
        broken = None if self._recorder is None else self._recorder.broken
        if broken is None or self._recovered():
            return
        if cluster is None:
            raise Unavailable(f"the simulated platform cannot be used: {broken}")
        raise Unavailable(
            f"{cluster}: the simulated platform cannot be used: {broken}", cluster=cluster
        )

    def _recovered(self) -> bool:
        """After a write failed (a full disk), the site is rebuilt from its journal, as a
        restart would, once the journal takes writes again: the call that failed is not in it
        (its caller was told Unavailable), the rest is as saved. Tried at most every
        :data:`RECOVERY_INTERVAL` seconds; True once usable. Called holding :attr:`lock`."""
        recorder = self._recorder
        if recorder is None or time.monotonic() < self._next_recovery:
            return False
        self._next_recovery = time.monotonic() + RECOVERY_INTERVAL
        if not recorder.writable():
            return False
        try:
            simulation = recorder.open(self._spec, self.clock.now())
        except AdapterError as error:
            log.error("the simulated platform cannot be rebuilt from its journal: %s", error)
            return False
        self._simulation = simulation
        self.controls._simulation = simulation  # the same controls, whoever holds them
        recorder.broken = None
        log.warning(
            "the simulated platform saves its state again: rebuilt from %s", recorder.journal.path
        )
        return True

    def _record(self, now: int, call: calls.Call, result: object) -> None:
        if self._recorder is not None:
            self._recorder.record(now, call, result, self.clock)
