"""MockAdapter: a whole simulated site behind the adapter interface.

One :class:`LocalScheduler` per cluster, all on one :class:`Clock`. Every call first brings the
schedulers up to the clock's time, so the platform evolves the same way whether it is polled
every second or once an hour (events are processed at their own times, not at poll times), and
a virtual clock replays days of load in seconds. Faults are injected on demand: a cluster that
stops answering, nodes going down, reservations refused; outages can also be scheduled in the
platform file, for a daemon tested from another process.

Given a :class:`.Journal`, the platform outlives its process as a real batch system does: every
call that changes it is recorded (:mod:`.calls`) before it returns, and a new adapter on the same
journal replays them at their simulated times onto the same platform, which gives back the same
history, then goes on (the daemon's plug-in resumes the clock as well, :mod:`.plugin`). Without
one, the state lives in memory, as tests and benchmarks want.

The daemon calls its adapter from several threads (per-cluster polling, placement, HTTP
handlers), and the schedulers are plain data structures: one re-entrant lock around every public
method keeps the simulation from ever being entered twice at once.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from pydantic import BaseModel

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.adapters.mock.frontend import ProcessFrontEnd
from coorm_bridge.batchsim import (
    RUNTIME_KEY,
    Anchor,
    Clock,
    Journal,
    LocalScheduler,
    PlatformSpec,
    SimulatedRefusal,
    Simulation,
    VirtualClock,
    WallClock,
    calls,
)
from coorm_bridge.core.batch import (
    AdapterError,
    JobSpec,
    JobState,
    NodeState,
    PlatformSnapshot,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link

__all__ = ["RUNTIME_KEY", "MockAdapter"]

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[MockAdapter, _P], _R],
) -> Callable[Concatenate[MockAdapter, _P], _R]:
    """Run ``method`` holding the adapter's lock (see the module docstring)."""

    @functools.wraps(method)
    def locked(self: MockAdapter, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class MockAdapter(Adapter):
    """The simulated platform; see the module docstring.

    With a ``journal``, a new one is given the platform's identity and the clock's time as its
    start; a saved one must be of the same platform (else AdapterError) and the clock at or past
    its last call: the platform is rebuilt from its saved start, then resumes at the clock's time.
    The adapter owns the journal: :meth:`close` closes it, as does a failure to build.

    With a ``jobs`` folder it is also the bridge's front end (:mod:`.frontend`): jobs submitted
    through the bridge run as processes on this host, their folders in ``jobs``, as
    ``run_jobs`` and ``private`` allow (see :class:`.ProcessFrontEnd`).
    """

    def __init__(
        self,
        spec: PlatformSpec,
        clock: Clock | None = None,
        *,
        journal: Journal | None = None,
        jobs: Path | None = None,
        run_jobs: bool | None = None,
        private: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        self.clock = clock or WallClock(origin=spec.start)
        self.journal = journal
        self._broken: str | None = None
        self._front_end = (
            None
            if jobs is None
            else ProcessFrontEnd(
                jobs, run_jobs, submit=self.submit, end=self.end_job, private=private
            )
        )
        now = self.clock.now()
        if journal is None:
            self.simulation = Simulation(spec, now)
            return
        try:  # the adapter owns its journal from here on, even when it cannot be built
            saved = journal.origin is not None
            start = journal.claim(spec.identity(), now)
            if start > now:
                raise AdapterError(f"the clock ({now}) is before the platform's start ({start})")
            self.simulation = Simulation(spec, start)
            if saved:
                self._replay(journal, now)
        except BaseException:
            journal.close()
            raise

    @property
    def spec(self) -> PlatformSpec:
        """The platform as it is now (upgrades and link changes included)."""
        return self.simulation.spec

    @property
    def start(self) -> int:
        """The simulated time the platform started at, before any restart."""
        return self.simulation.start

    @property
    def schedulers(self) -> dict[str, LocalScheduler]:
        """Each cluster's scheduler, for tests and benchmarks that look inside."""
        return self.simulation.schedulers

    # -- the adapter interface --------------------------------------------------------------

    def now(self) -> int:
        """The simulated platform's time; no lock, the clock is safe to read from any thread."""
        return self.clock.now()

    def instant(self) -> float:
        return self.clock.instant()

    def speedup(self) -> float | None:
        """The wall clock's speed-up; None on a virtual clock."""
        return self.clock.speedup if isinstance(self.clock, WallClock) else None

    @_locked
    def clusters(self) -> list[ClusterInfo]:
        return [c.info() for c in self.spec.clusters]

    def front_end(self) -> FrontEnd | None:
        return self._front_end

    @_locked
    def interconnect(self) -> Interconnect:
        return Interconnect(links=self.spec.links)

    @_locked
    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        names = list(self.schedulers) if clusters is None else clusters
        now = self._sync()
        shots = {}
        for name in names:
            shots[name] = self._answering(name, now).snapshot()
        return PlatformSnapshot(time=now, clusters=shots)

    @_locked
    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        handle = self._call(calls.CreateReservation(cluster=cluster, spec=spec))
        assert isinstance(handle, ReservationHandle)
        return handle

    @_locked
    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        handle = self._call(calls.UpdateReservation(cluster=cluster, spec=spec))
        assert isinstance(handle, ReservationHandle)
        return handle

    @_locked
    def delete_reservation(self, cluster: str, name: str) -> None:
        self._call(calls.DeleteReservation(cluster=cluster, name=name))

    @_locked
    def submit(self, cluster: str, job: JobSpec) -> str:
        job_id = self._call(calls.Submit(cluster=cluster, job=job))
        assert isinstance(job_id, str)
        return job_id

    @_locked
    def cancel(self, cluster: str, job_id: str) -> None:
        self._call(calls.Cancel(cluster=cluster, job_id=job_id))

    @_locked
    def end_job(self, cluster: str, job_id: str, state: JobState) -> None:
        """A job's process ended by itself (the front end ran it): the simulated job ends now,
        ``state`` COMPLETED or FAILED by its exit status; one no longer running stays as it is."""
        self._call(calls.EndJob(cluster=cluster, job_id=job_id, state=state))

    @_locked
    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self._answering(cluster, self._sync()).job_state(job_id)

    def close(self) -> None:
        """Close the journal, if any (its lock is released; the platform is kept in it)."""
        with self._lock:
            if self.journal is not None:
                self.journal.close()
                self._broken = "the simulated platform is closed"

    # -- simulation ---------------------------------------------------------------------------

    @_locked
    def run_until(self, t: int) -> None:
        """Replay every event up to ``t`` on a virtual clock (an error on a wall clock)."""
        if not isinstance(self.clock, VirtualClock):
            raise AdapterError("run_until needs a virtual clock; a wall clock runs by itself")
        while True:
            upcoming = [s.next_event_time() for s in self.schedulers.values()]
            due = min((u for u in upcoming if u is not None and u <= t), default=None)
            if due is None:
                break
            self.clock.advance_to(max(due, self.clock.now()))
            self._sync()
        self.clock.advance_to(max(t, self.clock.now()))
        self._sync()

    @_locked
    def next_event_time(self) -> int | None:
        """When the platform next changes by itself (None: idle until someone acts)."""
        return self.simulation.next_event_time()

    # -- faults -------------------------------------------------------------------------------

    @_locked
    def outage(self, cluster: str, start: int, end: int) -> None:
        """The cluster's batch system does not answer during ``[start, end)`` (Unavailable)."""
        self._call(calls.Outage(cluster=cluster, start=start, end=end))

    @_locked
    def refuse_reservations(self, cluster: str, count: int = 1, reason: str = "") -> None:
        """The next ``count`` reservation requests on ``cluster`` are refused."""
        reason = reason or "Requested nodes are busy"
        self._call(calls.RefuseReservations(cluster=cluster, count=count, reason=reason))

    @_locked
    def set_node_state(
        self, cluster: str, host: str, state: NodeState, at: int | None = None
    ) -> None:
        """A node goes down, is drained, or comes back, now or at ``at``."""
        self._call(calls.SetNodeState(cluster=cluster, host=host, state=state, at=at))

    @_locked
    def forget_user(self, user: str) -> None:
        """The batch system no longer knows ``user`` (as a uid with no passwd entry there):
        reservations for it are refused for good (:class:`NotPermitted`)."""
        self._call(calls.ForgetUser(user=user))

    @_locked
    def upgrade(self, cluster: str, /, **properties: object) -> ClusterInfo:
        """The site changed a cluster's cores, RAM, scratch or speed (an upgrade, a new CPU
        generation): what ``clusters()`` reports from now on. Its hosts stay as they are: take
        hosts down with :meth:`set_node_state`."""
        call = calls.Upgrade.model_validate({"cluster": cluster, "properties": properties})
        info = self._call(call)
        assert isinstance(info, ClusterInfo)
        return info

    @_locked
    def set_links(self, links: Iterable[Link]) -> None:
        """The links between clusters changed (a new WAN link, a slower one): what
        ``interconnect()`` reports from now on."""
        self._call(calls.SetLinks(links=tuple(links)))

    # -- calls, journaled -----------------------------------------------------------------------

    def _call(self, call: calls.Call) -> object:
        """Carry out ``call`` now and journal it before returning (see the module docstring)."""
        if self._broken is not None:
            raise Unavailable(f"the simulated platform cannot be used: {self._broken}")
        now = self._sync()
        try:
            result = self.simulation.apply(call, now)
        except SimulatedRefusal as refusal:
            self._record(now, calls.RefusalUsed(cluster=refusal.cluster or ""), None)
            raise
        self._record(now, call, result)
        return result

    def _record(self, now: int, call: calls.Call, result: object) -> None:
        """Journal a call that changed the platform; if that fails, the platform is out of step
        with its saved state and refuses every call until a restart replays what was saved."""
        if self.journal is None:
            return
        anchor = None
        if isinstance(self.clock, WallClock):
            sim, wall = self.clock.reading()
            anchor = Anchor(time=sim, wall=wall, speedup=self.clock.speedup)
        try:
            self.journal.append(now, call, _outcome(result), anchor)
        except AdapterError as error:
            self._broken = str(error)
            raise Unavailable(f"the simulated platform cannot save its state: {error}") from error

    def _replay(self, journal: Journal, now: int) -> None:
        """Re-apply every journaled call at its time; each must answer as it did then."""
        began = time.perf_counter()
        replayed = 0
        for entry in journal.entries():
            where = f"{journal.path}: call {entry.seq} ({entry.call.op} at {entry.at})"
            if entry.at > now:
                raise AdapterError(f"{where} is after the clock ({now}): time went back")
            self.simulation.advance(entry.at)
            try:
                outcome = _outcome(self.simulation.apply(entry.call, entry.at))
            except (AdapterError, ValueError, KeyError) as error:
                outcome = f"error: {error}"
            if outcome != entry.outcome:
                raise AdapterError(
                    f"{where} replays as {outcome}, not {entry.outcome}: this simulator "
                    "does not give the saved history back; move the file away to start "
                    "the platform afresh"
                )
            replayed += 1
        self.simulation.advance(now)
        logger.info(
            "mock platform resumed from %s: started at %d, %d calls replayed up to %d in %.2f s",
            journal.path,
            self.start,
            replayed,
            now,
            time.perf_counter() - began,
        )

    # -- internals ----------------------------------------------------------------------------

    def _sync(self) -> int:
        now = self.clock.now()
        self.simulation.advance(now)
        return now

    def _answering(self, cluster: str, now: int) -> LocalScheduler:
        if self._broken is not None:
            raise Unavailable(
                f"{cluster}: the simulated platform cannot be used: {self._broken}",
                cluster=cluster,
            )
        return self.simulation.answering(cluster, now)


def _outcome(result: object) -> str:
    """What a call answered, as journaled text: replaying it must answer the same."""
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result)
