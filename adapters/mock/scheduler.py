"""One cluster's local batch scheduler in simulated time, as Slurm or OAR would run it.

This is the embedded default platform of the daemon (tests and experiments run on it), so it
behaves like a production scheduler: FCFS queue, conservative (every pending job has a planned
start that later jobs may not delay) or EASY backfilling (only the head is protected), advance
reservations with Slurm's refusals, node faults, jobs killed at their walltime. Time is whole
Unix seconds and only moves through :meth:`LocalScheduler.advance`; the same calls always give
the same event sequence (ties go by arrival order, then host index; no set or hash order).

Planning is per host (:mod:`.planning`), not by host count. A count-based profile would be
exact without reservations, but reservations hold specific hosts over a window and fragment the
cluster: a job can fit by count while no single set of hosts is free for its whole walltime. Here
every planned job holds named hosts in the plan, so a predicted start is always honoured (it can
only move earlier) unless a new reservation, a reservation change or a node fault intervenes; the
price is that the lowest-index hosts chosen for a planned job cannot be swapped later, which can
leave a little less room for backfilling than deferred assignment would.

The scheduler never peeks at ``runtime``: running jobs hold their hosts until their walltime bound
in the plan. An early end, a cancellation or any other freed capacity compresses the plan: pending
jobs, in queue order, move to their earliest start if it is earlier, until none can. Work is kept
proportional to what changed, since a replay is hundreds of thousands of events: an arrival only
places the new job, and compression only searches for the jobs whose window could use the freed
hosts (:class:`.planning.Compression`); capacity that goes away (a new reservation, a fault)
re-places, per partition, the jobs from the first one whose plan broke.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from coorm_bridge.adapters.base import (
    ClusterSnapshot,
    Job,
    JobState,
    Node,
    NodeState,
    Refused,
    Reservation,
    ReservationHandle,
    ReservationSpec,
)
from coorm_bridge.adapters.mock.planning import (
    FOREVER,
    Compression,
    HostPlan,
    Region,
    bit_indices,
    lowest_bits,
)
from coorm_bridge.model import NAME_PATTERN, Duration, Frozen, Name


class SchedulingPolicy(StrEnum):
    CONSERVATIVE = "conservative"
    EASY = "easy"


class LocalJobSpec(Frozen):
    """A job of the cluster's own users (or the bridge's, inside a reservation)."""

    id: Name
    user: Name
    hosts: Annotated[int, Field(gt=0, strict=True)]
    walltime: Duration
    """The bound users give: the scheduler plans with it and kills the job when it is reached."""
    runtime: Duration
    """What the job actually runs, unknown to the scheduler; above ``walltime`` it is killed."""
    reservation: Name | None = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's history: ``start`` and ``end`` are when it really held its hosts (None: never)."""

    id: str
    user: str
    hosts: int
    submit: int
    start: int | None
    end: int | None
    state: JobState
    host_names: tuple[str, ...]
    reservation: str | None


# Event kinds, in the order they are handled at one time: ends free hosts before anything uses
# them, arrivals are queued after the plan took in this time's changes, starts come last.
_END, _RESERVATION_END, _NODE, _RESERVATION_START, _ARRIVAL, _START = range(6)

_Event = tuple[int, int, int, str, int]  # time, kind, sequence, job or reservation name, token


class _Job:
    """Mutable bookkeeping of one submitted job."""

    __slots__ = (
        "bound",
        "end",
        "end_at",
        "fails",
        "mask",
        "names",
        "plan_end",
        "plan_mask",
        "plan_start",
        "position",
        "spec",
        "start",
        "state",
        "submit",
    )

    def __init__(self, spec: LocalJobSpec, submit: int) -> None:
        self.spec = spec
        self.submit = submit
        self.state = JobState.UNKNOWN  # until it arrives
        self.position = -1  # arrival order: the queue order
        self.start: int | None = None
        self.end: int | None = None
        self.bound = 0  # running: when it must end (walltime, or its reservation's end)
        self.end_at = 0  # running: when it will end (the scheduler itself does not look)
        self.fails = False
        self.mask = 0
        self.names: tuple[str, ...] = ()
        self.plan_start: int | None = None
        self.plan_end = 0
        self.plan_mask = 0

    @property
    def walltime(self) -> int:
        return self.spec.walltime


class _Reservation:
    __slots__ = ("end", "mask", "name", "start", "users", "version")

    def __init__(self, spec: ReservationSpec, mask: int) -> None:
        self.name = spec.name
        self.start = spec.start
        self.end = spec.end
        self.mask = mask
        self.users = spec.users
        self.version = 0  # bumped on update: events of older versions are stale


class LocalScheduler:
    """The batch scheduler of one cluster; see the module docstring.

    Every call leaves the scheduler settled at :attr:`now`: jobs due now have started. Jobs
    submitted into a reservation use its cluster's policy among themselves, only on its hosts,
    and end at its end at the latest. When a reservation ends or is deleted, its pending jobs
    are cancelled (they could never run). A reservation host that goes DOWN is replaced by a free
    one at that moment when there is one (Slurm's REPLACE_DOWN), else kept; a DRAINED one is
    kept. Scheduled node-state changes are faults: the planner does not foresee them.
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

    # -- reservations -----------------------------------------------------------------------

    def create_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Hold hosts for ``spec``; pending jobs never block it, they are re-planned around it."""
        if spec.name in self._reservations:
            raise self._refused(f"Duplicate reservation name: {spec.name} already exists")
        self._check_reservation(spec, None)
        mask = self._choose_hosts(spec, None)
        reservation = _Reservation(spec, mask)
        self._reservations[spec.name] = reservation
        self._plan.reserve(mask, spec.start, spec.end)
        self._push_reservation_events(reservation)
        self._invalidate()
        self._settle()
        return self._handle(reservation)

    def update_reservation(self, spec: ReservationSpec) -> ReservationHandle:
        """Change the times, size or users of ``spec.name``; checks as for creation.

        Hosts are kept where they still suit (those of its running jobs always), so that jobs
        inside it keep running. With running jobs its start cannot move.
        """
        reservation = self._reservations.get(spec.name)
        if reservation is None:
            raise self._refused(f"Requested reservation is invalid: no reservation {spec.name}")
        if spec.start != reservation.start and self._own_running(reservation.name):
            raise self._refused(
                f"Requested reservation is in use: {spec.name} has running jobs, its start "
                "cannot move"
            )
        self._check_reservation(spec, reservation)
        mask = self._choose_hosts(spec, reservation)
        old_start, old_end, old_mask = reservation.start, reservation.end, reservation.mask
        self._plan.unreserve(old_mask, old_start, old_end)
        self._plan.reserve(mask, spec.start, spec.end)
        reservation.start, reservation.end, reservation.mask = spec.start, spec.end, mask
        reservation.users = spec.users
        reservation.version += 1
        self._push_reservation_events(reservation)
        # Free every plan the change breaks before running jobs inside may take more time.
        self._invalidate(force=spec.name)
        for job in self._own_running(spec.name):
            assert job.start is not None
            bound = min(job.start + job.spec.walltime, spec.end)
            if bound < job.bound:
                self._plan.release(job.mask, bound, job.bound)
            elif bound > job.bound:
                self._plan.hold(job.mask, job.bound, bound)
            self._set_bound(job, bound)
        if old_mask & ~mask or old_start < spec.start or old_end > spec.end:
            self._free(old_mask, old_start, old_end)
            self._full_pass = True
        self._settle()
        return self._handle(reservation)

    def delete_reservation(self, name: str) -> None:
        """Release a reservation (unknown: nothing); refused while jobs run in it, like Slurm."""
        reservation = self._reservations.get(name)
        if reservation is None:
            return
        running = self._own_running(name)
        if running:
            raise self._refused(
                f"Requested reservation is in use: job {running[0].spec.id} runs in {name}"
            )
        self._close_reservation(reservation)
        self._plan.unreserve(reservation.mask, reservation.start, reservation.end)
        self._free(reservation.mask, reservation.start, reservation.end)
        self._full_pass = True
        self._settle()

    # -- nodes ------------------------------------------------------------------------------

    def set_node_state(self, host: str, state: NodeState, at: int | None = None) -> None:
        """A fault, a drain or a repair, now or at ``at``: DOWN kills the job on the host."""
        index = self._index[host]
        state = NodeState(state)
        if at is not None and at < self._now:
            raise ValueError(f"cannot change a node in the past ({at} < {self._now})")
        if at is not None and at > self._now:
            self._node_changes.append((index, state))
            self._push(at, _NODE, host, len(self._node_changes) - 1)
            return
        self._apply_node_state(index, state)
        self._settle()

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
            reservation = self._reservations.get(key)
            return reservation is not None and reservation.version == token
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

    def _settle(self, arrivals: Sequence[_Job] = ()) -> None:
        """Re-plan for what changed, queue the arrivals, start what is due now."""
        if self._freed or self._cuts:
            if self.policy is SchedulingPolicy.CONSERVATIVE:
                self._replan_conservative()
            else:
                self._replan_easy()
        queued = [job for job in arrivals if self._enqueue(job)]
        if self.policy is SchedulingPolicy.CONSERVATIVE:
            self._start_planned()
        else:
            self._easy_pass(None if self._full_pass else queued)
        self._full_pass = False
        self._freed.clear()
        self._cuts.clear()

    # -- the queue --------------------------------------------------------------------------

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

    def _enqueue(self, job: _Job) -> bool:
        """An arrival joins the queue (False: its reservation is gone or too small now)."""
        name = job.spec.reservation
        if name is not None:
            reservation = self._reservations.get(name)
            if reservation is None or job.spec.hosts > reservation.mask.bit_count():
                job.state = JobState.CANCELLED
                return False
        job.state = JobState.PENDING
        job.position = self._arrivals
        self._arrivals += 1
        self._queue[job.spec.id] = job
        if self.policy is SchedulingPolicy.CONSERVATIVE:
            self._place(job, self._now, None)
        return True

    def _drop_pending(self, job: _Job, state: JobState = JobState.CANCELLED) -> None:
        self._unplan(job)
        del self._queue[job.spec.id]
        job.state = state

    def _place(self, job: _Job, after: int, limit: int | None) -> bool:
        """Plan ``job`` at its earliest start in ``[after, limit)`` on the lowest free hosts."""
        spec = job.spec
        if spec.reservation is None:
            found = self._plan.earliest(spec.hosts, spec.walltime, after, limit)
            if found is None:
                return False
            start, free = found
            end = start + spec.walltime
        else:
            reservation = self._reservations[spec.reservation]
            found = self._plan.earliest_within(
                reservation.mask & self._plan.up,
                spec.hosts,
                spec.walltime,
                max(after, reservation.start),
                cap=reservation.end,
                limit=limit,
            )
            if found is None:
                return False
            start, free = found
            end = min(start + spec.walltime, reservation.end)
        self._take(job, start, end, free)
        return True

    def _take(self, job: _Job, start: int, end: int, free: int) -> None:
        """Plan ``job`` over ``[start, end)`` on the lowest of the ``free`` hosts."""
        mask = lowest_bits(free, job.spec.hosts)
        self._plan.hold(mask, start, end)
        job.plan_start, job.plan_end, job.plan_mask = start, end, mask
        self._push(start, _START, job.spec.id)

    def _unplan(self, job: _Job, *, freed: bool = True) -> None:
        if job.plan_start is not None:
            self._plan.release(job.plan_mask, job.plan_start, job.plan_end)
            if freed:
                self._free(job.plan_mask, job.plan_start, job.plan_end)
            job.plan_start = None

    def _compress(self, job: _Job) -> bool:
        """Move a planned job to its earliest start if that is earlier (True); never later.

        The plain way, for EASY heads and jobs in reservations (few): take the job's hold out,
        search, put it back if nothing is earlier.
        """
        start = job.plan_start
        if start is None:
            self._place(job, self._now, None)
            return False
        if start <= self._now:
            return False
        if job.spec.reservation is None and not self._plan.may_fit_before(
            job.spec.hosts, self._now, start
        ):
            return False
        end, mask = job.plan_end, job.plan_mask
        self._unplan(job, freed=False)
        if self._place(job, self._now, start):
            self._free(mask, start, end)
            return True
        self._plan.hold(mask, start, end)  # its old place is still free: keep it
        job.plan_start, job.plan_end, job.plan_mask = start, end, mask
        return False

    def _free(self, mask: int, start: int, end: int) -> None:
        """Record capacity just freed (after the plan gave it back), with its free-run bounds."""
        low, high = self._plan.free_run(mask, start, end, self._now)
        self._freed.append((mask, start, end, low, high))

    def _move_earlier(self, job: _Job, low: int, high: int) -> bool:
        """Move a planned local job to its earliest start in ``[low, high)`` if there is one.

        The search counts the job's own hosts as free over its own window instead of taking its
        hold out of the plan, and a count-only check rules most jobs out first.
        """
        start, spec, own = job.plan_start, job.spec, job.plan_mask
        assert start is not None
        if not self._plan.count_fits(
            spec.hosts,
            spec.walltime,
            low,
            high,
            own_count=(own & self._plan.up).bit_count(),
            own_start=start,
        ):
            return False
        found = self._plan.earliest(spec.hosts, spec.walltime, low, high, own=own, own_start=start)
        if found is None:
            return False
        self._unplan(job, freed=False)
        self._take(job, found[0], found[0] + spec.walltime, found[1])
        # What it left: its old window on hosts it no longer uses, and the end of its old window
        # on those it kept (a narrow strip when it moved a little: few jobs can use that).
        self._free(own & ~job.plan_mask, start, start + spec.walltime)
        self._free(own & job.plan_mask, max(start, job.plan_end), start + spec.walltime)
        return True

    def _plan_valid(self, job: _Job) -> bool:
        """Whether a planned job's hosts are still up and still its to use over its window."""
        assert job.plan_start is not None
        mask = job.plan_mask
        if mask & ~self._plan.up:
            return False
        name = job.spec.reservation
        if name is None:
            return not self._plan.reserved_overlap(mask, job.plan_start, job.plan_end)
        reservation = self._reservations.get(name)
        return (
            reservation is not None
            and not mask & ~reservation.mask
            and job.plan_start >= reservation.start
            and job.plan_end == min(job.plan_start + job.spec.walltime, reservation.end)
        )

    def _invalidate(self, force: str | None = None) -> None:
        """Capacity went away: in each partition (the cluster outside reservations, or one
        reservation), unplan every job from the first whose plan no longer holds (all of
        ``force``'s). Done at once, before anything else takes hosts: holds are bits, they
        cannot overlap. The earlier jobs keep their places: they have priority.
        """
        cuts = self._cuts
        if force is not None:
            cuts[force] = -1
        for job in self._queue.values():
            part = job.spec.reservation
            if job.plan_start is not None and not self._plan_valid(job):
                cuts[part] = min(cuts.get(part, job.position), job.position)
        for job in self._queue.values():
            part = job.spec.reservation
            if part in cuts and job.position >= cuts[part]:
                self._unplan(job)

    def _replan_conservative(self) -> None:
        """Compress the jobs that kept their plan, then place again, in queue order, those that
        lost it (see :meth:`_invalidate`).

        Every planned job sits at its earliest start given the rest of the plan: arrivals are
        placed so, and compression keeps it so. An earlier start therefore needs capacity freed
        since, recorded as regions (:meth:`_free`). Compression runs in rounds until nothing
        moves: each round takes the regions freed since the last one, finds the jobs that could
        use them and the starts they could take (:class:`.planning.Compression`), and moves them, in
        queue order, to their earliest start if earlier; moves free new regions. No start ever
        increases, and most jobs need no search at all.
        """
        now = self._now
        pending = list(self._queue.values())
        cuts = self._cuts
        again = [
            job
            for job in pending
            if job.spec.reservation in cuts and job.position >= cuts[job.spec.reservation]
        ]
        skip = {id(job) for job in again}
        kept = [job for job in pending if id(job) not in skip]
        for job in kept:
            if job.plan_start is None:
                self._place(job, now, None)  # it fit nowhere before; it may now
        inside = [job for job in kept if job.spec.reservation is not None]
        index = Compression(
            [job for job in kept if job.spec.reservation is None and job.plan_start is not None]
        )
        regions = self._freed
        done = 0
        while done < len(regions):
            batch, done = regions[done:], len(regions)
            for job in inside:
                if job.state is JobState.PENDING:
                    self._compress(job)  # few: the plain way
            chosen = index.candidates(batch, now)
            for job, low, high in sorted(chosen, key=lambda c: c[0].position):
                if self._move_earlier(job, low, high):
                    index.moved(job)
        for job in again:
            self._place(job, now, None)

    def _start_planned(self) -> None:
        """CONSERVATIVE: start, in queue order, every job planned to start now."""
        events, now = self._events, self._now
        due: list[_Job] = []
        while events and events[0][0] <= now and events[0][1] == _START:
            event = heapq.heappop(events)
            if self._live(event):
                due.append(self._jobs[event[3]])
        for job in sorted(due, key=lambda job: job.position):
            if job.state is JobState.PENDING and job.plan_start == now:
                self._start(job, job.plan_mask, job.plan_end)

    # -- EASY -------------------------------------------------------------------------------

    def _heads(self) -> dict[str | None, _Job]:
        """The first pending job of each partition: EASY protects these only."""
        heads: dict[str | None, _Job] = {}
        for job in self._queue.values():
            heads.setdefault(job.spec.reservation, job)
        return heads

    def _replan_easy(self) -> None:
        """Only heads have plans: compress them; those that lost theirs are placed by the pass."""
        if self._freed:
            for head in self._heads().values():
                if head.plan_start is not None:
                    self._compress(head)
        self._full_pass = True

    def _easy_pass(self, candidates: list[_Job] | None) -> None:
        """Start heads due now (planning each next head), then backfill: any other job that fits
        now without touching a head's planned hosts starts now.
        """
        now = self._now
        heads = self._heads()
        for part, first in list(heads.items()):
            head: _Job | None = first
            while head is not None:
                if head.plan_start is None:
                    self._place(head, now, None)
                if head.plan_start != now:
                    break
                self._start(head, head.plan_mask, head.plan_end)
                head = next(
                    (job for job in self._queue.values() if job.spec.reservation == part), None
                )
            if head is None:
                del heads[part]
            else:
                heads[part] = head
        protected = {id(job) for job in heads.values()}
        jobs = list(self._queue.values()) if candidates is None else candidates
        free = self._plan.free_at(now)
        for job in jobs:
            if job.state is not JobState.PENDING or id(job) in protected:
                continue
            fits = job.spec.reservation is not None or job.spec.hosts <= free
            if fits and self._backfill(job):
                free = self._plan.free_at(now)

    def _backfill(self, job: _Job) -> bool:
        """Start ``job`` now if it fits now around every plan (True if it started)."""
        now, spec = self._now, job.spec
        if spec.reservation is None:
            found = self._plan.earliest(spec.hosts, spec.walltime, now, now + 1)
            end = now + spec.walltime
        else:
            reservation = self._reservations[spec.reservation]
            found = self._plan.earliest_within(
                reservation.mask & self._plan.up,
                spec.hosts,
                spec.walltime,
                max(now, reservation.start),
                cap=reservation.end,
                limit=now + 1,
            )
            end = min(now + spec.walltime, reservation.end)
        if found is None:
            return False
        mask = lowest_bits(found[1], spec.hosts)
        self._plan.hold(mask, now, end)
        self._start(job, mask, end)
        return True

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

    # -- reservations, internals ------------------------------------------------------------

    def _refused(self, message: str, retry_after: int | None = None) -> Refused:
        return Refused(f"{self.cluster}: {message}", cluster=self.cluster, retry_after=retry_after)

    def _handle(self, reservation: _Reservation) -> ReservationHandle:
        return ReservationHandle(
            cluster=self.cluster,
            name=reservation.name,
            start=reservation.start,
            end=reservation.end,
            host_names=self._host_names(reservation.mask),
        )

    def _push_reservation_events(self, reservation: _Reservation) -> None:
        if reservation.start > self._now:
            self._push(reservation.start, _RESERVATION_START, reservation.name, reservation.version)
        self._push(reservation.end, _RESERVATION_END, reservation.name, reservation.version)

    def _close_reservation(self, reservation: _Reservation) -> None:
        """It ended or is deleted: its pending jobs can never run and are cancelled."""
        for job in list(self._queue.values()):
            if job.spec.reservation == reservation.name:
                self._drop_pending(job)
        del self._reservations[reservation.name]

    def _check_reservation(self, spec: ReservationSpec, current: _Reservation | None) -> None:
        size = spec.size
        if size > len(self._names):
            raise self._refused(
                f"Requested node configuration is not available: {size} hosts asked, "
                f"{self.cluster} has {len(self._names)}"
            )
        moved = current is None or spec.start != current.start
        if (moved and spec.start < self._now) or spec.end <= self._now:
            raise self._refused(
                f"Invalid time specification: [{spec.start}, {spec.end}) is in the past "
                f"(now {self._now})",
                self._retry_after(spec, current),
            )

    def _busy_hosts(self, at: int, ignore: str | None) -> int:
        """Hosts of running jobs that may still run at ``at`` (their bound; jobs of ``ignore``
        excepted)."""
        mask = 0
        for job in self._running.values():
            if job.bound > at and (ignore is None or job.spec.reservation != ignore):
                mask |= job.mask
        return mask

    def _reserved_hosts(self, start: int, end: int, ignore: str | None) -> int:
        """Hosts of the reservations (but ``ignore``) that overlap ``[start, end)``."""
        mask = 0
        for reservation in self._reservations.values():
            if reservation.name != ignore and reservation.start < end and start < reservation.end:
                mask |= reservation.mask
        return mask

    def _named_mask(self, spec: ReservationSpec) -> int:
        mask = 0
        for name in spec.host_names:
            index = self._index.get(name)
            if index is None:
                raise self._refused(f"Invalid node name specified: {name} is not in {self.cluster}")
            if mask >> index & 1:
                raise self._refused(f"Invalid node name specified: {name} is named twice")
            mask |= 1 << index
        return mask

    def _choose_hosts(self, spec: ReservationSpec, current: _Reservation | None) -> int:
        """The hosts ``spec`` gets, or Refused with Slurm's reason and a retry hint.

        Named hosts must all suit; otherwise the lowest-index suitable hosts (an update keeps
        its current ones first, and always those its running jobs use).
        """
        ignore = None if current is None else current.name
        up = self._plan.up
        busy = self._busy_hosts(spec.start, ignore)
        taken = self._reserved_hosts(spec.start, spec.end, ignore)
        must = 0
        if current is not None:
            for job in self._own_running(current.name):
                must |= job.mask
        if spec.host_names:
            return self._check_named(spec, current, must, busy, taken)
        size = spec.hosts
        if must.bit_count() > size:
            raise self._refused(
                f"Requested reservation is in use: its running jobs use {must.bit_count()} "
                f"hosts, more than {size}"
            )
        free = up & ~busy & ~taken & ~must
        if (free | must).bit_count() < size:
            if up.bit_count() < size:
                reason = f"Requested nodes are busy: only {up.bit_count()} hosts are up"
            elif (up & ~busy).bit_count() >= size and (up & ~taken).bit_count() < size:
                reason = "Reservation request overlaps with another reservation"
            else:
                reason = "Requested nodes are busy"
            raise self._refused(
                f"{reason} ({(free | must).bit_count()} of {size} hosts free over "
                f"[{spec.start}, {spec.end}))",
                self._retry_after(spec, current),
            )
        mask = must
        if current is not None:
            mask |= lowest_bits(current.mask & free, size - mask.bit_count())
        return mask | lowest_bits(free & ~mask, size - mask.bit_count())

    def _check_named(
        self, spec: ReservationSpec, current: _Reservation | None, must: int, busy: int, taken: int
    ) -> int:
        """The named hosts of ``spec`` if all suit (``must``: its running jobs' hosts)."""
        mask = self._named_mask(spec)
        up = self._plan.up
        if must & ~mask:
            raise self._refused(
                f"Requested reservation is in use: its running jobs use hosts outside "
                f"{', '.join(spec.host_names)}"
            )
        if mask & taken:
            raise self._refused(
                "Reservation request overlaps with another reservation: "
                + ", ".join(self._host_names(mask & taken)),
                self._retry_after(spec, current),
            )
        if mask & busy:
            raise self._refused(
                "Requested nodes are busy: " + ", ".join(self._host_names(mask & busy)),
                self._retry_after(spec, current),
            )
        if mask & ~up & ~must:
            raise self._refused(
                "Requested nodes are busy: "
                + ", ".join(self._host_names(mask & ~up & ~must))
                + " down or drained"
            )
        return mask

    def _fits(self, spec: ReservationSpec, current: _Reservation | None, start: int) -> bool:
        """Whether ``spec`` moved to ``start`` would get its hosts (same size and duration)."""
        ignore = None if current is None else current.name
        end = start + spec.end - spec.start
        must = 0
        if current is not None:
            for job in self._own_running(current.name):
                must |= job.mask
        free = (
            self._plan.up
            & ~self._busy_hosts(start, ignore)
            & ~self._reserved_hosts(start, end, ignore)
        ) | must
        if spec.host_names:
            named = 0
            for name in spec.host_names:
                index = self._index.get(name)
                if index is None:
                    return False
                named |= 1 << index
            return not named & ~free
        return free.bit_count() >= spec.hosts

    def _retry_after(self, spec: ReservationSpec, current: _Reservation | None) -> int | None:
        """The earliest start at which the same reservation would succeed, if any: hosts free
        up only when running jobs reach their bound or other reservations end."""
        base = max(spec.start, self._now)
        ignore = None if current is None else current.name
        candidates = {base}
        candidates.update(job.bound for job in self._running.values() if job.bound > base)
        candidates.update(
            r.end for r in self._reservations.values() if r.end > base and r.name != ignore
        )
        return next((t for t in sorted(candidates) if self._fits(spec, current, t)), None)

    # -- nodes, internals -------------------------------------------------------------------

    def _apply_node_state(self, index: int, state: NodeState) -> None:
        old = self._states[index]
        if state is old:
            return
        self._states[index] = state
        self._nodes = None
        bit = 1 << index
        if state is NodeState.UP:
            self._plan.set_up(self._plan.up | bit)
            self._free(bit, self._now, FOREVER)
            self._full_pass = True
            return
        if old is NodeState.UP:
            self._plan.set_up(self._plan.up & ~bit)
        if state is NodeState.DOWN:
            if bit & self._running_mask:
                victim = next(job for job in self._running.values() if job.mask & bit)
                self._end_job(victim, JobState.FAILED)
            self._replace_reserved_host(bit)
        self._invalidate()

    def _replace_reserved_host(self, bit: int) -> None:
        """REPLACE_DOWN: each reservation holding the host (down now) gets the lowest free
        suitable one instead, if any; a drained host stays (its job inside may finish)."""
        now = self._now
        for reservation in self._reservations.values():
            if not reservation.mask & bit or reservation.end <= now:
                continue
            free = (
                self._plan.up
                & ~reservation.mask
                & ~self._busy_hosts(max(reservation.start, now), None)
                & ~self._reserved_hosts(reservation.start, reservation.end, reservation.name)
            )
            if free:
                other = free & -free
                reservation.mask = reservation.mask & ~bit | other
                self._plan.unreserve(bit, reservation.start, reservation.end)
                self._plan.reserve(other, reservation.start, reservation.end)

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
