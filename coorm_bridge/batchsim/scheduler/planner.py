"""Planning pending jobs on the host plan, and starting them: what both policies share.

The scheduler never peeks at ``runtime``: running jobs hold their hosts until their walltime bound
in the plan. A planned job holds named hosts over its planned window (:meth:`Planner._take`), so a
predicted start is one that host assignment honours. What changed since the plan was last
settled is told to the planner as it happens: capacity given back (:meth:`Planner.freed`: an end
before the bound, a cancellation, a reservation shrunk or gone, a node back up), capacity taken
away (:meth:`Planner.broken`: a new or changed reservation, a node down or drained), or a reason
for EASY to look at every pending job again (:meth:`Planner.retry_all`). :meth:`Planner.settle`
then re-plans for exactly that, queues the arrivals, and starts what is due now; the two
policies (:mod:`.conservative`, :mod:`.easy`) differ in how.

Work is kept proportional to what changed, since a replay is hundreds of thousands of events:
an arrival only places the new job, and capacity that goes away re-places, per partition (the
cluster outside reservations, or one reservation), the jobs from the first whose plan broke.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from coorm_bridge.batchsim.scheduler.book import ReservationBook
from coorm_bridge.batchsim.scheduler.events import START, Calendar
from coorm_bridge.batchsim.scheduler.hostplan import FOREVER, HostPlan, Region, lowest_bits
from coorm_bridge.batchsim.scheduler.jobs import JobEntry
from coorm_bridge.batchsim.scheduler.queue import PendingQueue
from coorm_bridge.batchsim.scheduler.running import RunningJobs
from coorm_bridge.core.batch import JobState


class Planner(ABC):
    """Plans the pending jobs of ``queue`` on ``plan`` and starts them into ``running``; see
    the module docstring. It reads reservations from ``book`` and files planned starts in
    ``calendar``."""

    def __init__(
        self,
        plan: HostPlan,
        queue: PendingQueue,
        running: RunningJobs,
        book: ReservationBook,
        calendar: Calendar,
    ) -> None:
        self._plan = plan
        self._queue = queue
        self._running = running
        self._book = book
        self._calendar = calendar
        # Capacity freed since the plan was last settled, as regions (see freed): compression
        # looks for earlier starts only where a window can use one of them.
        self._freed: list[Region] = []
        # Per partition (None: outside reservations), the queue position from which jobs lost
        # their plan and must be placed again.
        self._cuts: dict[str | None, int] = {}
        self._full_pass = False  # EASY: try every pending job, not only new arrivals

    # -- what the scheduler tells it ----------------------------------------------------------

    def settle(self, arrivals: Sequence[JobEntry] = ()) -> None:
        """Re-plan for what changed, queue the arrivals, start what is due now."""
        if self._freed or self._cuts:
            self._replan()
        queued = [job for job in arrivals if self._enqueue(job)]
        self._start_due(queued)
        self._full_pass = False
        self._freed.clear()
        self._cuts.clear()

    def freed(self, mask: int, start: int, end: int) -> None:
        """Record capacity the plan just gave back, with its free-run bounds."""
        low, high = self._plan.free_run(mask, start, end, self._calendar.now)
        self._freed.append((mask, start, end, low, high))

    def broken(self, force: str | None = None) -> None:
        """Capacity went away: in each partition, unplan every job from the first whose plan no
        longer holds (all of reservation ``force``'s). Done at once, before anything else takes
        hosts: holds are bits, they cannot overlap. The earlier jobs keep their places: they
        have priority.
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

    def retry_all(self) -> None:
        """EASY looks at every pending job at the next settle, not only the arrivals."""
        self._full_pass = True

    def drop(self, job: JobEntry, state: JobState = JobState.CANCELLED) -> None:
        """A pending job leaves the queue without running, in ``state``."""
        self._unplan(job)
        self._queue.leave(job)
        job.state = state

    def drop_all(self, reservation: str) -> None:
        """``reservation`` ended or is gone: its pending jobs can never run."""
        for job in list(self._queue.values()):
            if job.spec.reservation == reservation:
                self.drop(job)

    # -- what the policies do -------------------------------------------------------------------

    @abstractmethod
    def _replan(self) -> None:
        """Take in the capacity freed and the plans broken since the last settle."""

    @abstractmethod
    def _admit(self, job: JobEntry) -> None:
        """``job`` just joined the queue."""

    @abstractmethod
    def _start_due(self, queued: list[JobEntry]) -> None:
        """Start what is due now; ``queued``: the arrivals just queued."""

    # -- the queue and the plan -----------------------------------------------------------------

    def _enqueue(self, job: JobEntry) -> bool:
        """An arrival joins the queue (False: its reservation is gone or too small now)."""
        name = job.spec.reservation
        if name is not None:
            reservation = self._book.get(name)
            if reservation is None or job.spec.hosts > reservation.mask.bit_count():
                job.state = JobState.CANCELLED
                return False
        self._queue.join(job)
        self._admit(job)
        return True

    def _start(self, job: JobEntry, mask: int, bound: int) -> None:
        """Run ``job`` now on ``mask`` (already held in the plan until ``bound``)."""
        self._running.start(job, mask, bound)
        self._queue.leave(job)

    def _place(self, job: JobEntry, after: int, limit: int | None) -> bool:
        """Plan ``job`` at its earliest start in ``[after, limit)`` on the lowest free hosts."""
        found = self._earliest(job, after, limit)
        if found is None:
            return False
        self._take(job, *found)
        return True

    def _earliest(
        self, job: JobEntry, after: int, limit: int | None
    ) -> tuple[int, int, int] | None:
        """``(start, end, free hosts)`` of the job's earliest fit in ``[after, limit)``: on the
        whole cluster, or on its reservation's hosts and cut at the reservation's end; only on
        the hosts it names, if it names some (free of reservations too, outside one)."""
        spec = job.spec
        if spec.reservation is None:
            if job.named:
                found = self._plan.earliest_within(
                    job.named & self._plan.up,
                    spec.hosts,
                    spec.walltime,
                    after,
                    cap=FOREVER,
                    limit=limit,
                    reserved=True,
                )
            else:
                found = self._plan.earliest(spec.hosts, spec.walltime, after, limit)
            if found is None:
                return None
            start, free = found
            return start, start + spec.walltime, free
        reservation = self._book[spec.reservation]
        region = reservation.mask & self._plan.up
        found = self._plan.earliest_within(
            region & job.named if job.named else region,
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

    def _take(self, job: JobEntry, start: int, end: int, free: int) -> None:
        """Plan ``job`` over ``[start, end)`` on the lowest of the ``free`` hosts."""
        mask = lowest_bits(free, job.spec.hosts)
        self._plan.hold(mask, start, end)
        job.plan_start, job.plan_end, job.plan_mask = start, end, mask
        self._calendar.push(start, START, job.spec.id)

    def _unplan(self, job: JobEntry, *, freed: bool = True) -> None:
        if job.plan_start is not None:
            self._plan.release(job.plan_mask, job.plan_start, job.plan_end)
            if freed:
                self.freed(job.plan_mask, job.plan_start, job.plan_end)
            job.plan_start = None

    def _compress(self, job: JobEntry) -> bool:
        """Move a planned job to its earliest start if that is earlier (True); never later.

        The plain way, for EASY heads and jobs in reservations (few): take the job's hold out,
        search, put it back if nothing is earlier.
        """
        now = self._calendar.now
        start = job.plan_start
        if start is None:
            self._place(job, now, None)
            return False
        if start <= now:
            return False
        if job.spec.reservation is None and not self._plan.may_fit_before(
            job.spec.hosts, now, start
        ):
            return False
        end, mask = job.plan_end, job.plan_mask
        self._unplan(job, freed=False)
        if self._place(job, now, start):
            self.freed(mask, start, end)
            return True
        self._plan.hold(mask, start, end)  # its old place is still free: keep it
        job.plan_start, job.plan_end, job.plan_mask = start, end, mask
        return False

    def _plan_valid(self, job: JobEntry) -> bool:
        """Whether a planned job's hosts are still up and still its to use over its window."""
        assert job.plan_start is not None
        mask = job.plan_mask
        if mask & ~self._plan.up:
            return False
        name = job.spec.reservation
        if name is None:
            return not self._plan.reserved_overlap(mask, job.plan_start, job.plan_end)
        reservation = self._book.get(name)
        return (
            reservation is not None
            and not mask & ~reservation.mask
            and job.plan_start >= reservation.start
            and job.plan_end == min(job.plan_start + job.spec.walltime, reservation.end)
        )
