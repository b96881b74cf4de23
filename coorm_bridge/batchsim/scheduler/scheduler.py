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

:class:`LocalScheduler` composes parts, each with its own state: the hosts and their states
(:mod:`.hosts`), the plan of hosts over time (:mod:`.hostplan`), the calendar of events and the
current time (:mod:`.events`), the pending queue (:mod:`.queue`), the running jobs
(:mod:`.running`), the reservations' book and its changes (:mod:`.book`, :mod:`.reservations`),
Slurm's checks (:mod:`.admission`), and the planner of its policy (:mod:`.conservative`,
:mod:`.easy`). This module runs the events, the jobs' lifecycle and the node changes, and tells
the planner after each change to settle.
"""

from __future__ import annotations

from collections.abc import Sequence

from coorm_bridge.batchsim.scheduler.admission import Admission
from coorm_bridge.batchsim.scheduler.book import ReservationBook
from coorm_bridge.batchsim.scheduler.conservative import ConservativePlanner
from coorm_bridge.batchsim.scheduler.easy import EasyPlanner
from coorm_bridge.batchsim.scheduler.events import (
    ARRIVAL,
    END,
    NODE,
    RESERVATION_END,
    RESERVATION_START,
    Calendar,
    Event,
)
from coorm_bridge.batchsim.scheduler.hostplan import FOREVER, HostPlan
from coorm_bridge.batchsim.scheduler.hosts import Hosts
from coorm_bridge.batchsim.scheduler.jobs import JobEntry, JobRecord, LocalJobSpec, SchedulingPolicy
from coorm_bridge.batchsim.scheduler.queue import PendingQueue
from coorm_bridge.batchsim.scheduler.reservations import Reservations
from coorm_bridge.batchsim.scheduler.running import RunningJobs
from coorm_bridge.core.batch import (
    ClusterSnapshot,
    Job,
    JobState,
    NodeState,
    Reservation,
    ReservationHandle,
    ReservationSpec,
)

__all__ = ["LocalScheduler"]


class LocalScheduler:
    """The batch scheduler of one cluster; see the module docstring.

    Every call leaves the scheduler settled at :attr:`now`: jobs due now have started. Jobs
    submitted into a reservation use its cluster's policy among themselves, only on its hosts,
    and end at its end at the latest. When a reservation ends or is deleted, its pending jobs
    are cancelled (they could never run). Scheduled node-state changes are faults: the planner
    does not foresee them.
    """

    def __init__(
        self,
        cluster: str,
        hosts: Sequence[str],
        *,
        policy: SchedulingPolicy = SchedulingPolicy.CONSERVATIVE,
        start: int,
    ) -> None:
        self._hosts = Hosts(cluster, hosts)
        self.cluster = cluster
        self.policy = SchedulingPolicy(policy)
        self._calendar = calendar = Calendar(start)
        self._plan = plan = HostPlan(start, self._hosts.every)
        self._jobs: dict[str, JobEntry] = {}  # every job ever submitted, in submission order
        self._queue = PendingQueue()
        self._running = RunningJobs(self._hosts, plan, calendar)
        self._book = ReservationBook()
        planner = EasyPlanner if self.policy is SchedulingPolicy.EASY else ConservativePlanner
        self._planner = planner(plan, self._queue, self._running, self._book, calendar)
        self._admission = Admission(
            cluster,
            hosts=self._hosts,
            plan=plan,
            running=self._running,
            book=self._book,
            calendar=calendar,
        )
        self._reservations = Reservations(
            hosts=self._hosts,
            plan=plan,
            book=self._book,
            running=self._running,
            planner=self._planner,
            admission=self._admission,
            calendar=calendar,
        )

    # -- time -------------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self._calendar.now

    def advance(self, now: int) -> None:
        """Process, in time order, every event at or before ``now``; then stand at ``now``."""
        if now < self.now:
            raise ValueError(f"the scheduler cannot go back from {self.now} to {now}")
        while (t := self.next_event_time()) is not None and t <= now:
            self._step(t)
        self._calendar.move_to(now)
        self._plan.prune(now)

    def next_event_time(self) -> int | None:
        """When the scheduler next changes by itself (None: never, until someone acts)."""
        return self._calendar.next_time(self._live)

    # -- jobs -------------------------------------------------------------------------------

    def submit(self, spec: LocalJobSpec, at: int | None = None) -> str:
        """Queue a job now, or as a future arrival at ``at``; returns its id."""
        now = self.now
        if at is not None and at < now:
            raise ValueError(f"cannot submit in the past ({at} < {now})")
        if spec.id in self._jobs:
            raise self._admission.refused(f"Duplicate job id: {spec.id} was already submitted")
        named = self._admission.check_job(spec)
        job = JobEntry(spec, now if at is None else at)
        job.named = named
        self._jobs[spec.id] = job
        if job.submit > now:
            self._calendar.push(job.submit, ARRIVAL, spec.id)
        else:
            self._planner.settle([job])
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
            self._planner.drop(job)
            self._planner.retry_all()
        else:
            self._end_job(job, JobState.CANCELLED)
        self._planner.settle()

    def end(self, job_id: str, state: JobState) -> None:
        """A running job's process ended by itself: it ends now in ``state`` (completed or
        failed, by its exit status). A job no longer running: nothing; unknown: KeyError."""
        job = self._jobs[job_id]
        if job.state is JobState.RUNNING:
            self._end_job(job, state)
            self._planner.settle()

    def job(self, job_id: str) -> Job:
        """A pending or running job as :class:`Job`; KeyError for any other."""
        job = self._jobs.get(job_id)
        if job is None or job.state not in (JobState.PENDING, JobState.RUNNING):
            raise KeyError(job_id)
        return job.view()

    def job_state(self, job_id: str) -> JobState:
        """UNKNOWN for a job never seen, or not arrived yet."""
        job = self._jobs.get(job_id)
        return JobState.UNKNOWN if job is None else job.state

    def records(self) -> list[JobRecord]:
        """Every job ever submitted, in submission order."""
        return [job.record() for job in self._jobs.values()]

    # -- reservations -------------------------------------------------------------------------

    def create_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Hold hosts for ``spec`` (see :meth:`.Reservations.create`)."""
        handle = self._reservations.create(spec)
        self._planner.settle()
        return handle

    def update_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Change the times, size or users of ``spec.name`` (see :meth:`.Reservations.update`)."""
        handle = self._reservations.update(spec)
        self._planner.settle()
        return handle

    def delete_reservation(self, name: str) -> None:
        """Release a reservation (unknown: nothing); refused while jobs run in it, like Slurm."""
        if self._reservations.delete(name):
            self._planner.settle()

    # -- nodes --------------------------------------------------------------------------------

    def set_node_state(self, host: str, state: NodeState, at: int | None = None) -> None:
        """A fault, a drain or a repair, now or at ``at``: DOWN kills the job on the host."""
        index = self._hosts.index(host)
        state = NodeState(state)
        now = self.now
        if at is not None and at < now:
            raise ValueError(f"cannot change a node in the past ({at} < {now})")
        if at is not None and at > now:
            self._calendar.push(at, NODE, host, self._hosts.schedule(index, state))
            return
        self._apply_node_state(index, state)
        self._planner.settle()

    # -- reading ----------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """Nodes, running and pending jobs (with predicted starts) and current reservations."""
        jobs = sorted(
            (*self._running.values(), *self._queue.values()), key=lambda job: job.position
        )
        names_of = self._hosts.names_of
        return ClusterSnapshot(
            cluster=self.cluster,
            time=self.now,
            nodes=self._hosts.nodes(),
            jobs=tuple(job.view() for job in jobs),
            reservations=tuple(
                Reservation(
                    name=r.name,
                    start=r.start,
                    end=r.end,
                    hosts=r.mask.bit_count(),
                    host_names=names_of(r.mask),
                    users=r.users,
                )
                for r in self._book.in_time_order()
            ),
        )

    # -- events -----------------------------------------------------------------------------

    def _live(self, event: Event) -> bool:
        """Whether an event still means something (changed plans leave stale ones behind)."""
        time, kind, _, key, token = event
        if kind == NODE:
            return True
        if kind in (RESERVATION_START, RESERVATION_END):
            return self._book.is_due(key, token, time, end=kind == RESERVATION_END)
        job = self._jobs[key]
        if kind == END:
            return job.state is JobState.RUNNING and job.end_at == time
        if kind == ARRIVAL:
            return job.state is JobState.UNKNOWN
        return job.state is JobState.PENDING and job.plan_start == time

    def _step(self, t: int) -> None:
        """Handle everything due at ``t``: ends, faults, arrivals, then the starts they allow."""
        self._calendar.move_to(t)
        planner = self._planner
        arrivals: list[JobEntry] = []
        for event in self._calendar.take_due(t):
            if not self._live(event):
                continue
            kind, key, token = event[1], event[3], event[4]
            if kind == END:
                job = self._jobs[key]
                self._end_job(job, JobState.FAILED if job.fails else JobState.COMPLETED)
            elif kind == RESERVATION_END:
                self._reservations.close(key)
                planner.retry_all()
            elif kind == NODE:
                self._apply_node_state(*self._hosts.scheduled(token))
            elif kind == RESERVATION_START:
                planner.retry_all()
            else:
                arrivals.append(self._jobs[key])
        planner.settle(arrivals)

    # -- changes ------------------------------------------------------------------------------

    def _end_job(self, job: JobEntry, state: JobState) -> None:
        """A running job ends now; what it held until its bound goes back to the plan."""
        now = self.now
        self._running.end(job, state)
        if now < job.bound:
            self._plan.release(job.mask, now, job.bound)
            self._planner.freed(job.mask, now, job.bound)
        self._planner.retry_all()

    def _apply_node_state(self, index: int, state: NodeState) -> None:
        """A host's new state: back UP, its capacity is freed; DOWN or DRAINED, it leaves the
        plan (DOWN kills its job and has it replaced in reservations), breaking plans on it."""
        hosts, plan, planner = self._hosts, self._plan, self._planner
        old = hosts.state(index)
        if state is old:
            return
        hosts.set_state(index, state)
        bit = 1 << index
        if state is NodeState.UP:
            plan.set_up(plan.up | bit)
            planner.freed(bit, self.now, FOREVER)
            planner.retry_all()
            return
        if old is NodeState.UP:
            plan.set_up(plan.up & ~bit)
        if state is NodeState.DOWN:
            victim = self._running.on(bit)
            if victim is not None:
                self._end_job(victim, JobState.FAILED)
            self._reservations.replace_down(bit)
        planner.broken()
