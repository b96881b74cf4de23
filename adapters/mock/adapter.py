"""MockAdapter: a whole simulated site behind the adapter interface.

One :class:`LocalScheduler` per cluster, all on one :class:`Clock`. Every call first brings the
schedulers up to the clock's time, so the platform evolves the same way whether it is polled
every second or once an hour (events are processed at their own times, not at poll times), and
a virtual clock replays days of load in seconds. Faults are injected on demand: a cluster that
stops answering, nodes going down, reservations refused; outages can also be scheduled in the
platform file, for a daemon tested from another process.

The daemon calls its adapter from several threads (per-cluster polling, placement, HTTP
handlers), and the schedulers are plain data structures: one re-entrant lock around every public
method keeps the simulation from ever being entered twice at once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from coorm_bridge.adapters.base import (
    Adapter,
    AdapterError,
    JobSpec,
    JobState,
    NodeState,
    PlatformSnapshot,
    Refused,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.adapters.mock.clock import Clock, VirtualClock, WallClock
from coorm_bridge.adapters.mock.limits import MAX_DURATION, MAX_TIME, MAX_TIME_TEXT
from coorm_bridge.adapters.mock.loads import load_jobs
from coorm_bridge.adapters.mock.platform import PlatformSpec
from coorm_bridge.adapters.mock.scheduler import LocalJobSpec, LocalScheduler
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link

#: JobSpec environment key giving a mock job's simulated run time in seconds (default: walltime).
RUNTIME_KEY = "COORM_MOCK_RUNTIME"

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


@dataclass
class _Outage:
    start: int
    end: int


@dataclass
class _Refusals:
    remaining: int
    reason: str


class MockAdapter(Adapter):
    """The simulated platform; see the module docstring."""

    def __init__(self, spec: PlatformSpec, clock: Clock | None = None) -> None:
        self._lock = threading.RLock()
        self.spec = spec
        self.clock = clock or WallClock(origin=spec.start)
        start = self.clock.now()
        self.schedulers = {
            c.name: LocalScheduler(c.name, c.host_names(), policy=c.policy, start=start)
            for c in spec.clusters
        }
        self._outages: dict[str, list[_Outage]] = {c.name: [] for c in spec.clusters}
        self._refusals: dict[str, _Refusals] = {}
        self._next_id = 1
        for number, load in enumerate(spec.loads, 1):
            scheduler = self.schedulers[load.cluster]
            for job in load_jobs(spec, number, load, start):
                scheduler.submit(job.spec, at=job.at)
        for scheduled in spec.outages:
            self.outage(scheduled.cluster, start + scheduled.start, start + scheduled.end)

    # -- the adapter interface --------------------------------------------------------------

    def now(self) -> int:
        """The simulated platform's time; no lock, the clock is safe to read from any thread."""
        return self.clock.now()

    @_locked
    def clusters(self) -> list[ClusterInfo]:
        return [c.info() for c in self.spec.clusters]

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
        scheduler = self._answering(cluster, self._sync())
        self._check_reservation(cluster, spec)
        return scheduler.create_reservation(spec)

    @_locked
    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        scheduler = self._answering(cluster, self._sync())
        self._check_reservation(cluster, spec)
        return scheduler.update_reservation(spec)

    @_locked
    def delete_reservation(self, cluster: str, name: str) -> None:
        self._answering(cluster, self._sync()).delete_reservation(name)

    @_locked
    def submit(self, cluster: str, job: JobSpec) -> str:
        scheduler = self._answering(cluster, self._sync())
        if job.walltime > MAX_DURATION:
            raise Refused(
                f"{cluster}: Requested time limit is invalid: {job.walltime} s is more than "
                f"{MAX_DURATION} (100 years)",
                cluster=cluster,
            )
        local = LocalJobSpec(
            id=f"{cluster}.{self._next_id}",
            user=job.user,
            hosts=job.hosts,
            walltime=job.walltime,
            runtime=_simulated_runtime(job),
            reservation=job.reservation,
        )
        job_id = scheduler.submit(local)
        self._next_id += 1  # only once accepted: a refused submission changes nothing
        return job_id

    @_locked
    def cancel(self, cluster: str, job_id: str) -> None:
        scheduler = self._answering(cluster, self._sync())
        try:
            scheduler.cancel(job_id)
        except KeyError:
            raise AdapterError(f"no job {job_id} on {cluster}", cluster=cluster) from None

    @_locked
    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self._answering(cluster, self._sync()).job_state(job_id)

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
        upcoming = [s.next_event_time() for s in self.schedulers.values()]
        return min((u for u in upcoming if u is not None), default=None)

    # -- faults -------------------------------------------------------------------------------

    @_locked
    def outage(self, cluster: str, start: int, end: int) -> None:
        """The cluster's batch system does not answer during ``[start, end)`` (Unavailable)."""
        self._scheduler(cluster)
        if end <= start:
            raise ValueError("an outage ends after it starts")
        if start < 0 or end > MAX_TIME:
            raise ValueError(f"an outage is within [0, {MAX_TIME}] ({MAX_TIME_TEXT})")
        self._outages[cluster].append(_Outage(start, end))

    @_locked
    def refuse_reservations(self, cluster: str, count: int = 1, reason: str = "") -> None:
        """The next ``count`` reservation requests on ``cluster`` are refused."""
        self._scheduler(cluster)
        self._refusals[cluster] = _Refusals(count, reason or "Requested nodes are busy")

    @_locked
    def set_node_state(
        self, cluster: str, host: str, state: NodeState, at: int | None = None
    ) -> None:
        """A node goes down, is drained, or comes back, now or at ``at``."""
        if at is not None and at > MAX_TIME:
            raise ValueError(f"a node cannot change after {MAX_TIME_TEXT} ({at})")
        self._sync()
        self._scheduler(cluster).set_node_state(host, state, at)

    @_locked
    def upgrade(self, cluster: str, /, **properties: object) -> ClusterInfo:
        """The site changed a cluster's cores, RAM, scratch or speed (an upgrade, a new CPU
        generation): what ``clusters()`` reports from now on. Its hosts stay as they are: take
        hosts down with :meth:`set_node_state`."""
        self._scheduler(cluster)
        if "hosts" in properties or "name" in properties:
            raise ValueError("a simulated cluster keeps its name and hosts")
        specs = [
            type(spec).model_validate({**spec.model_dump(), **properties})
            if spec.name == cluster
            else spec
            for spec in self.spec.clusters
        ]
        self.spec = self.spec.model_copy(update={"clusters": tuple(specs)})
        return next(s.info() for s in specs if s.name == cluster)

    @_locked
    def set_links(self, links: Iterable[Link]) -> None:
        """The links between clusters changed (a new WAN link, a slower one): what
        ``interconnect()`` reports from now on."""
        self.spec = self.spec.model_copy(update={"links": tuple(links)})

    # -- internals ----------------------------------------------------------------------------

    def _sync(self) -> int:
        now = self.clock.now()
        for scheduler in self.schedulers.values():
            if now > scheduler.now:
                scheduler.advance(now)
        return now

    def _scheduler(self, cluster: str) -> LocalScheduler:
        try:
            return self.schedulers[cluster]
        except KeyError:
            known = ", ".join(self.schedulers)
            raise AdapterError(f"unknown cluster {cluster!r} (this platform has {known})") from None

    def _answering(self, cluster: str, now: int) -> LocalScheduler:
        scheduler = self._scheduler(cluster)
        for outage in self._outages[cluster]:
            if outage.start <= now < outage.end:
                raise Unavailable(
                    f"{cluster}: the batch system does not answer (simulated outage until "
                    f"{outage.end})",
                    cluster=cluster,
                )
        return scheduler

    def _check_reservation(self, cluster: str, spec: ReservationSpec) -> None:
        """Out-of-range times, then simulated refusals: both before anything else changes."""
        if spec.end > MAX_TIME:
            raise Refused(
                f"{cluster}: Invalid time specification: {spec.name} ends after {MAX_TIME_TEXT} "
                f"({spec.end} > {MAX_TIME})",
                cluster=cluster,
            )
        refusals = self._refusals.get(cluster)
        if refusals and refusals.remaining > 0:
            refusals.remaining -= 1
            raise Refused(f"{cluster}: {refusals.reason} (simulated refusal)", cluster=cluster)


def _simulated_runtime(job: JobSpec) -> int:
    text = job.environment.get(RUNTIME_KEY)
    if text is None:
        return job.walltime
    try:
        runtime = int(text)
    except ValueError:
        raise AdapterError(f"{RUNTIME_KEY} must be whole seconds, got {text!r}") from None
    if not 0 < runtime <= MAX_DURATION:
        raise AdapterError(f"{RUNTIME_KEY} must be positive and at most {MAX_DURATION}, got {text}")
    return runtime
