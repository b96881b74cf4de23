"""One cluster's local batch scheduler in simulated time, as Slurm or OAR would run it.

This is the embedded default platform of the daemon (tests and experiments run on it), so it
behaves like a production scheduler: FCFS queue, conservative (every pending job has a planned
start that later jobs may not delay) or EASY backfilling (only the head is protected), advance
reservations with Slurm's refusals, node faults, jobs killed at their walltime. Time is whole
Unix seconds and only moves through :meth:`LocalScheduler.advance`; the same calls always give
the same event sequence (ties go by arrival order, then host index; no set or hash order).

Planning is per host (:mod:`.hostplan`), not by host count. A count-based profile would be
exact without reservations, but reservations hold specific hosts over a window and fragment the
cluster: a job can fit by count while no single set of hosts is free for its whole walltime. Here
every planned job holds named hosts in the plan, so a predicted start is always honoured (it can
only move earlier) unless a new reservation, a reservation change or a node fault intervenes; the
price is that the lowest-index hosts chosen for a planned job cannot be swapped later, which can
leave a little less room for backfilling than deferred assignment would.

:class:`LocalScheduler` is cut in three, one module each, over one shared state: this module has
the class itself, its event loop, job lifecycle and snapshot; :mod:`.backfilling` plans and
starts pending jobs (conservative plan and its compression, EASY's pass); :mod:`.reservations`
has reservations and node states. The two are mixins, not collaborators, because they all
change the same plan, queue and events in step (see their docstrings). The scheduler's types
are in :mod:`.jobs`; import the public ones from :mod:`coorm_bridge.batchsim`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from coorm_bridge.batchsim.scheduler.backfilling import BackfillingMixin
from coorm_bridge.batchsim.scheduler.hostplan import HostPlan, Region, bit_indices
from coorm_bridge.batchsim.scheduler.jobs import (
    _ARRIVAL,
    _END,
    _NODE,
    _RESERVATION_END,
    _RESERVATION_START,
    _START,
    JobRecord,
    LocalJobSpec,
    SchedulingPolicy,
    _Event,
    _Job,
    _Reservation,
)
from coorm_bridge.batchsim.scheduler.reservations import ReservationsMixin
from coorm_bridge.core.batch import (
    ClusterSnapshot,
    Job,
    JobState,
    Node,
    NodeState,
    Refused,
    Reservation,
)
from coorm_bridge.core.model import NAME_PATTERN

__all__ = ["JobRecord", "LocalJobSpec", "LocalScheduler", "SchedulingPolicy"]


class LocalScheduler(ReservationsMixin, BackfillingMixin):
    """The batch scheduler of one cluster; see the module docstring.

    Every call leaves the scheduler settled at :attr:`now`: jobs due now have started. Jobs
    submitted into a reservation use its cluster's policy among themselves, only on its hosts,
    and end at its end at the latest. When a reservation ends or is deleted, its pending jobs
    are cancelled (they could never run). A reservation host that goes DOWN is replaced by a free
    one at that moment when there is one (Slurm's REPLACE_DOWN), else kept; a DRAINED one is
    kept. Scheduled node-state changes are faults: the planner does not foresee them.

    The reservation and node calls (:meth:`create_reservation`, :meth:`update_reservation`,
    :meth:`delete_reservation`, :meth:`set_node_state`) are in :mod:`.reservations`.
    """

    def __init__(
        self,
        cluster: str,
        hosts: Sequence[str],
        *,
        policy: SchedulingPolicy = SchedulingPolicy.CONSERVATIVE,
        start: int,
    ) -> None:
        for name in (cluster, *hosts):
            if not NAME_PATTERN.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid cluster or host name")
        if not hosts:
            raise ValueError(f"cluster {cluster} has no host")
        if len(set(hosts)) != len(hosts):
            raise ValueError(f"cluster {cluster} names a host twice")
        self.cluster = cluster
        self.policy = SchedulingPolicy(policy)
        self._names = tuple(hosts)
        self._index = {name: i for i, name in enumerate(self._names)}
        self._states = [NodeState.UP] * len(self._names)
        self._now = start
        self._plan = HostPlan(start, (1 << len(self._names)) - 1)
        self._jobs: dict[str, _Job] = {}  # every job ever submitted, in submission order
        self._queue: dict[str, _Job] = {}  # pending jobs, in arrival order
        self._running: dict[str, _Job] = {}
        self._running_mask = 0
        self._reservations: dict[str, _Reservation] = {}
        self._events: list[_Event] = []
        self._sequence = 0
        self._arrivals = 0
        self._node_changes: list[tuple[int, NodeState]] = []
        self._nodes: tuple[Node, ...] | None = None
        # Capacity freed since the plan was last settled, as regions (see _free): compression
        # looks for earlier starts only where a window can use one of them.
        self._freed: list[Region] = []
        # Per partition (None: outside reservations), the queue position from which jobs lost
        # their plan and must be placed again.
        self._cuts: dict[str | None, int] = {}
        self._full_pass = False  # EASY: try every pending job, not only new arrivals

    # -- time -------------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self._now

    def advance(self, now: int) -> None:
        """Process, in time order, every event at or before ``now``; then stand at ``now``."""
        if now < self._now:
            raise ValueError(f"the scheduler cannot go back from {self._now} to {now}")
        while (t := self.next_event_time()) is not None and t <= now:
            self._step(t)
        self._now = now
        self._plan.prune(now)

    def next_event_time(self) -> int | None:
        """When the scheduler next changes by itself (None: never, until someone acts)."""
        events = self._events
        while events and not self._live(events[0]):
            heapq.heappop(events)
        return events[0][0] if events else None

    # -- jobs -------------------------------------------------------------------------------

    def submit(self, spec: LocalJobSpec, at: int | None = None) -> str:
        """Queue a job now, or as a future arrival at ``at``; returns its id."""
        if at is not None and at < self._now:
            raise ValueError(f"cannot submit in the past ({at} < {self._now})")
        self._check_job(spec)
        job = _Job(spec, self._now if at is None else at)
        self._jobs[spec.id] = job
        if job.submit > self._now:
            self._push(job.submit, _ARRIVAL, spec.id)
        else:
            self._settle([job])
        return spec.id

    def cancel(self, job_id: str) -> None:
        """Pending: removed; running: ends now; finished: nothing; unknown: KeyError."""
        job = self._jobs[job_id]
        if job.state.finished:
            return
        if job.state is JobState.UNKNOWN:  # a future arrival
            job.state = JobState.CANCELLED
            return
        if job.state is JobState.PENDING:
            self._drop_pending(job)
            self._full_pass = True
        else:
            self._end_job(job, JobState.CANCELLED)
        self._settle()

    def end(self, job_id: str, state: JobState) -> None:
        """A running job's process ended by itself: it ends now in ``state`` (completed or
        failed, by its exit status). A job no longer running: nothing; unknown: KeyError."""
        job = self._jobs[job_id]
        if job.state is JobState.RUNNING:
            self._end_job(job, state)
            self._settle()

    def job(self, job_id: str) -> Job:
        """A pending or running job as :class:`Job`; KeyError for any other."""
        job = self._jobs.get(job_id)
        if job is None or job.state not in (JobState.PENDING, JobState.RUNNING):
            raise KeyError(job_id)
        return self._as_job(job)

    def job_state(self, job_id: str) -> JobState:
        """UNKNOWN for a job never seen, or not arrived yet."""
        job = self._jobs.get(job_id)
        return JobState.UNKNOWN if job is None else job.state

    def records(self) -> list[JobRecord]:
        """Every job ever submitted, in submission order."""
        return [
            JobRecord(
                id=job.spec.id,
                user=job.spec.user,
                hosts=job.spec.hosts,
                submit=job.submit,
                start=job.start,
                end=job.end,
                state=job.state,
                host_names=job.names,
                reservation=job.spec.reservation,
            )
            for job in self._jobs.values()
        ]

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, running and pending jobs (with predicted starts) and current reservations."""
        if self._nodes is None:
            self._nodes = tuple(
                Node(name=name, state=state)
                for name, state in zip(self._names, self._states, strict=True)
            )
        jobs = sorted(
            (*self._running.values(), *self._queue.values()), key=lambda job: job.position
        )
        reservations = sorted(self._reservations.values(), key=lambda r: (r.start, r.name))
        return ClusterSnapshot(
            cluster=self.cluster,
            time=self._now,
            nodes=self._nodes,
            jobs=tuple(self._as_job(job) for job in jobs),
            reservations=tuple(
                Reservation(
                    name=r.name,
                    start=r.start,
                    end=r.end,
                    hosts=r.mask.bit_count(),
                    host_names=self._host_names(r.mask),
                    users=r.users,
                )
                for r in reservations
            ),
        )

    # -- events -----------------------------------------------------------------------------

    def _push(self, time: int, kind: int, key: str, token: int = 0) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (time, kind, self._sequence, key, token))

    def _live(self, event: _Event) -> bool:
        """Whether an event still means something (changed plans leave stale ones behind)."""
        time, kind, _, key, token = event
        if kind == _NODE:
            return True
        if kind in (_RESERVATION_START, _RESERVATION_END):
            # The time too: a reservation deleted and created again under its name starts its
            # versions afresh, and its namesake's events must not end it.
            reservation = self._reservations.get(key)
            due = (
                None
                if reservation is None
                else (reservation.end if kind == _RESERVATION_END else reservation.start)
            )
            return reservation is not None and reservation.version == token and due == time
        job = self._jobs[key]
        if kind == _END:
            return job.state is JobState.RUNNING and job.end_at == time
        if kind == _ARRIVAL:
            return job.state is JobState.UNKNOWN
        return job.state is JobState.PENDING and job.plan_start == time

    def _step(self, t: int) -> None:
        """Handle everything due at ``t``: ends, faults, arrivals, then the starts they allow."""
        self._now = t
        events = self._events
        arrivals: list[_Job] = []
        while events and events[0][0] == t and events[0][1] != _START:
            event = heapq.heappop(events)
            if not self._live(event):
                continue
            kind, key, token = event[1], event[3], event[4]
            if kind == _END:
                job = self._jobs[key]
                self._end_job(job, JobState.FAILED if job.fails else JobState.COMPLETED)
            elif kind == _RESERVATION_END:
                self._close_reservation(self._reservations[key])
                self._full_pass = True
            elif kind == _NODE:
                self._apply_node_state(*self._node_changes[token])
            elif kind == _RESERVATION_START:
                self._full_pass = True
            else:
                arrivals.append(self._jobs[key])
        self._settle(arrivals)

    # -- refusals ---------------------------------------------------------------------------

    def _refused(self, message: str, retry_after: int | None = None) -> Refused:
        return Refused(f"{self.cluster}: {message}", cluster=self.cluster, retry_after=retry_after)

    def _check_job(self, spec: LocalJobSpec) -> None:
        if spec.id in self._jobs:
            raise self._refused(f"Duplicate job id: {spec.id} was already submitted")
        if spec.hosts > len(self._names):
            raise self._refused(
                f"Requested node configuration is not available: {spec.hosts} hosts asked, "
                f"{self.cluster} has {len(self._names)}"
            )
        if spec.reservation is None:
            return
        reservation = self._reservations.get(spec.reservation)
        if reservation is None:
            raise self._refused(
                f"Requested reservation is invalid: no reservation {spec.reservation}"
            )
        if spec.user not in reservation.users:
            raise self._refused(
                f"Access denied to requested reservation: {spec.user} is not a user of "
                f"{spec.reservation}"
            )
        if spec.hosts > reservation.mask.bit_count():
            raise self._refused(
                f"Requested node configuration is not available: {spec.hosts} hosts asked, "
                f"reservation {spec.reservation} holds {reservation.mask.bit_count()}"
            )

    # -- running jobs -----------------------------------------------------------------------

    def _start(self, job: _Job, mask: int, bound: int) -> None:
        """Run ``job`` now on ``mask`` (already held in the plan until ``bound``)."""
        if mask & ~self._plan.up or mask & self._running_mask:
            raise RuntimeError(f"scheduler bug: job {job.spec.id} planned on unavailable hosts")
        now = self._now
        del self._queue[job.spec.id]
        self._running[job.spec.id] = job
        self._running_mask |= mask
        job.state = JobState.RUNNING
        job.start = now
        job.mask = mask
        job.names = self._host_names(mask)
        job.plan_start = None
        self._set_bound(job, bound)

    def _set_bound(self, job: _Job, bound: int) -> None:
        """When a running job must end; it really ends at the earlier of that and its runtime."""
        assert job.start is not None
        job.bound = bound
        job.fails = job.spec.runtime > bound - job.start
        job.end_at = job.start + min(job.spec.runtime, bound - job.start)
        self._push(job.end_at, _END, job.spec.id)

    def _end_job(self, job: _Job, state: JobState) -> None:
        now = self._now
        del self._running[job.spec.id]
        self._running_mask &= ~job.mask
        job.state = state
        job.end = now
        if now < job.bound:
            self._plan.release(job.mask, now, job.bound)
            self._free(job.mask, now, job.bound)
        self._full_pass = True

    def _own_running(self, name: str) -> list[_Job]:
        return [job for job in self._running.values() if job.spec.reservation == name]

    # -- views ------------------------------------------------------------------------------

    def _host_names(self, mask: int) -> tuple[str, ...]:
        names = self._names
        return tuple(names[i] for i in bit_indices(mask))

    def _as_job(self, job: _Job) -> Job:
        spec = job.spec
        if job.state is JobState.RUNNING:
            assert job.start is not None
            return Job(
                id=spec.id,
                user=spec.user,
                state=JobState.RUNNING,
                hosts=spec.hosts,
                host_names=job.names,
                walltime=job.bound - job.start,
                start=job.start,
                reservation=spec.reservation,
            )
        start = job.plan_start
        return Job(
            id=spec.id,
            user=spec.user,
            state=JobState.PENDING,
            hosts=spec.hosts,
            walltime=spec.walltime if start is None else job.plan_end - start,
            start=start,
            reservation=spec.reservation,
        )
