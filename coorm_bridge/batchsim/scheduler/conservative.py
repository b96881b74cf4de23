"""Conservative backfilling: every pending job has a planned start that later jobs may not delay.

Each arrival is placed at once at its earliest start given the plan; a job ahead of it in the
queue never moves later for it. Freed capacity compresses the plan: pending jobs, in queue order,
move to their earliest start if it is earlier, until none can. Only the jobs whose window could
use a freed region are searched (:class:`.compression.Compression`), so compression costs what
changed rather than the whole queue.
"""

from __future__ import annotations

from coorm_bridge.batchsim.scheduler.compression import Compression
from coorm_bridge.batchsim.scheduler.jobs import JobEntry
from coorm_bridge.batchsim.scheduler.planner import Planner
from coorm_bridge.core.batch import JobState


class ConservativePlanner(Planner):
    """:class:`.Planner` for :attr:`SchedulingPolicy.CONSERVATIVE`; see the module docstring."""

    def _admit(self, job: JobEntry) -> None:
        self._place(job, self._calendar.now, None)

    def _replan(self) -> None:
        """Compress the jobs that kept their plan, then place again, in queue order, those that
        lost it (see :meth:`.Planner.broken`).

        Every planned job sits at its earliest start given the rest of the plan: arrivals are
        placed so, and compression keeps it so. An earlier start therefore needs capacity freed
        since, recorded as regions (:meth:`.Planner.freed`). Compression runs in rounds until
        nothing moves: each round takes the regions freed since the last one, finds the jobs
        that could use them and the starts they could take (:class:`.Compression`), and moves
        them, in queue order, to their earliest start if earlier; moves free new regions. No
        start ever increases, and most jobs need no search at all.
        """
        now = self._calendar.now
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
        # Jobs in reservations and jobs that name their hosts are few: compressed the plain
        # way; the index is for the cluster's local jobs, whose search is on any hosts.
        inside = [job for job in kept if job.spec.reservation is not None or job.named]
        index = Compression(
            [
                job
                for job in kept
                if job.spec.reservation is None and not job.named and job.plan_start is not None
            ]
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

    def _move_earlier(self, job: JobEntry, low: int, high: int) -> bool:
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
        self.freed(own & ~job.plan_mask, start, start + spec.walltime)
        self.freed(own & job.plan_mask, max(start, job.plan_end), start + spec.walltime)
        return True

    def _start_due(self, queued: list[JobEntry]) -> None:
        """Start, in queue order, every job planned to start now."""
        now = self._calendar.now
        due: list[JobEntry] = []
        for time, _, _, key, _ in self._calendar.take_starts():
            job = self._queue.get(key)
            if job is not None and job.plan_start == time:  # else a stale plan's
                due.append(job)
        for job in sorted(due, key=lambda job: job.position):
            if job.state is JobState.PENDING and job.plan_start == now:
                self._start(job, job.plan_mask, job.plan_end)
