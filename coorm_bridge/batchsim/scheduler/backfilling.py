"""The scheduler's queue and plan: conservative backfilling, its compression, and EASY's pass.

The scheduler never peeks at ``runtime``: running jobs hold their hosts until their walltime bound
in the plan. An early end, a cancellation or any other freed capacity compresses the plan: pending
jobs, in queue order, move to their earliest start if it is earlier, until none can. Work is kept
proportional to what changed, since a replay is hundreds of thousands of events: an arrival only
places the new job, and compression only searches for the jobs whose window could use the freed
hosts (:class:`.compression.Compression`); capacity that goes away (a new reservation, a fault)
re-places, per partition, the jobs from the first one whose plan broke.

:class:`BackfillingMixin` is a mixin of :class:`.scheduler.LocalScheduler` rather than an object of
its own: the plan, the queue and the events are the scheduler's state, which every part of it
changes in step, and a mixin keeps those parts reading it directly. The attributes it shares are
declared on it; the few methods it calls on the scheduler are declared for type checking only.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coorm_bridge.batchsim.scheduler.compression import Compression
from coorm_bridge.batchsim.scheduler.hostplan import HostPlan, Region, lowest_bits
from coorm_bridge.batchsim.scheduler.jobs import (
    _START,
    SchedulingPolicy,
    _Event,
    _Job,
    _Reservation,
)
from coorm_bridge.core.batch import JobState


class BackfillingMixin:
    """Plans pending jobs and starts them, per :attr:`policy`; see the module docstring."""

    # Set up by LocalScheduler.__init__.
    policy: SchedulingPolicy
    _now: int
    _plan: HostPlan
    _jobs: dict[str, _Job]
    _queue: dict[str, _Job]
    _reservations: dict[str, _Reservation]
    _events: list[_Event]
    _arrivals: int
    _freed: list[Region]
    _cuts: dict[str | None, int]
    _full_pass: bool

    if TYPE_CHECKING:  # defined by LocalScheduler

        def _push(self, time: int, kind: int, key: str, token: int = 0) -> None: ...

        def _live(self, event: _Event) -> bool: ...

        def _start(self, job: _Job, mask: int, bound: int) -> None: ...

    # -- the queue --------------------------------------------------------------------------

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
        found = self._earliest(job, after, limit)
        if found is None:
            return False
        self._take(job, *found)
        return True

    def _earliest(self, job: _Job, after: int, limit: int | None) -> tuple[int, int, int] | None:
        """``(start, end, free hosts)`` of the job's earliest fit in ``[after, limit)``: on the
        whole cluster, or on its reservation's hosts and cut at the reservation's end."""
        spec = job.spec
        if spec.reservation is None:
            found = self._plan.earliest(spec.hosts, spec.walltime, after, limit)
            if found is None:
                return None
            start, free = found
            return start, start + spec.walltime, free
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
            return None
        start, free = found
        return start, min(start + spec.walltime, reservation.end), free

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
        use them and the starts they could take (:class:`.compression.Compression`), and moves
        them, in queue order, to their earliest start if earlier; moves free new regions. No
        start ever increases, and most jobs need no search at all.
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
        found = self._earliest(job, self._now, self._now + 1)
        if found is None:
            return False
        start, end, free = found  # start is now: the search was limited to [now, now + 1)
        mask = lowest_bits(free, job.spec.hosts)
        self._plan.hold(mask, start, end)
        self._start(job, mask, end)
        return True
