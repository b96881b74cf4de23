"""Compression's search index: which planned jobs newly freed capacity could move earlier.

Apart from :mod:`.hostplan`, which keeps and searches the slots: this index never reads them. It
files the scheduler's planned jobs (their windows: :class:`Planned`) and, given the regions the
plan gave back (:data:`.hostplan.Region`), picks the few jobs worth a search of the plan, so that
compression costs what changed rather than the whole queue.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import chain
from typing import Generic, Protocol, TypeVar

from coorm_bridge.batchsim.scheduler.hostplan import FOREVER, Region


class Planned(Protocol):
    """A job as compression sees it: its planned window and hosts (no plan: start None)."""

    plan_start: int | None
    plan_end: int
    plan_mask: int

    @property
    def walltime(self) -> int: ...


J = TypeVar("J", bound=Planned)


class Compression(Generic[J]):
    """The planned jobs of one compression, by walltime, start and end, to find fast which
    could start earlier thanks to newly freed regions.

    Every planned job sits at its earliest start given the rest of the plan, so an earlier
    start uses some host freed in a region, inside the job's window, and that host's free run
    holds the whole window: the window ends after the region begins, starts before it ends, and
    fits in the region's run bounds. A job's own hosts are free for itself into its own window,
    so it may also use a region on them that its own window follows (its start within the run
    bounds), whatever its walltime. Starts and ends only decrease while compressing: entries
    filed before still bound them from above, and a job that moved is filed again.
    """

    def __init__(self, jobs: Sequence[J]) -> None:
        self._by_walltime = sorted(jobs, key=lambda job: job.walltime)
        self._walltimes = [job.walltime for job in self._by_walltime]
        self._by_start = sorted(jobs, key=lambda job: job.plan_start or 0)
        self._starts = [job.plan_start or 0 for job in self._by_start]
        self._by_end = sorted(jobs, key=lambda job: job.plan_end)
        self._ends = [job.plan_end for job in self._by_end]

    def moved(self, job: J) -> None:
        """File a job's new start and end too (the old entries stay: they bound from above)."""
        if job.plan_start is not None:
            k = bisect_right(self._starts, job.plan_start)
            self._starts.insert(k, job.plan_start)
            self._by_start.insert(k, job)
            k = bisect_right(self._ends, job.plan_end)
            self._ends.insert(k, job.plan_end)
            self._by_end.insert(k, job)

    def candidates(self, batch: Sequence[Region], now: int) -> list[tuple[J, int, int]]:
        """The jobs that could start earlier thanks to ``batch``, with the starts to search
        (``[low, high)``), in no particular order."""
        chosen: dict[int, tuple[J, int, int]] = {}
        walltimes, starts, ends = self._walltimes, self._starts, self._ends
        for mask, first, last, run_start, run_end in batch:
            floor = run_start if run_start > now else now
            short = bisect_right(walltimes, run_end - floor)
            late = bisect_right(ends, first)
            fitting = self._by_walltime[:short] if short < len(ends) - late else self._by_end[late:]
            after = bisect_right(starts, first)
            following = self._by_start[after : bisect_right(starts, run_end, after)]
            for job in chain(fitting, following):
                start = job.plan_start
                if start is None or start <= floor:
                    continue  # started, cancelled, or nothing earlier to gain here
                walltime = job.walltime
                if job.plan_mask & mask and start <= run_end:
                    ceiling = FOREVER
                elif walltime <= run_end - floor and start + walltime > first:
                    ceiling = run_end
                else:
                    continue
                low = max(floor, first - walltime + 1)
                high = min(start, last, ceiling - walltime + 1)
                if low < high:
                    known = chosen.get(id(job))
                    if known is not None:
                        low, high = min(low, known[1]), max(high, known[2])
                    chosen[id(job)] = (job, low, high)
        return list(chosen.values())
