"""Start times for pending jobs the batch system's scheduler left without one.

On a real Slurm queue many pending jobs have no predicted start (481 of 1,000, 536 of 5,000 in
the measurements of FINDINGS.md: backfill stops at its window and its time budget). Ignoring
them would show their hosts as free forever; the adapter plans them itself instead, in queue
order, each at the earliest time its host count fits for its walltime after everything the
batch system already placed (running jobs, predicted ones, reservations, unavailable nodes):
conservative backfilling in queue order, a guess of what it will do once it gets to them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque

from coorm_bridge.adapters.load import foreign_load
from coorm_bridge.core.batch import ClusterSnapshot, Job, JobState
from coorm_bridge.core.model import MAX_TIME
from coorm_bridge.core.profile import Profile


def estimate_starts(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with a start for every pending job that fits the cluster at all.

    Jobs pending inside a reservation keep no start: the reservation already holds their hosts.
    """
    missing = [
        i
        for i, job in enumerate(snapshot.jobs)
        if job.state is JobState.PENDING and job.start is None and job.reservation is None
    ]
    if not missing:
        return snapshot
    busy = Profile.from_intervals(len(snapshot.nodes), foreign_load(snapshot, own_prefix=None))
    free = _Free(busy, snapshot.time)
    jobs: list[Job] = list(snapshot.jobs)
    for i in missing:
        job = jobs[i]
        start = free.earliest_fit(job.hosts, job.walltime)
        if start is None or start > MAX_TIME - job.walltime:
            # Larger than the cluster's available nodes, or behind so long a queue that it would
            # end after the year 9999 (no valid time): it will not start.
            continue
        free.take(job.hosts, start, start + job.walltime)
        jobs[i] = job.model_copy(update={"start": start})
    return snapshot.model_copy(update={"jobs": tuple(jobs)})


class _Free:
    """The free hosts from ``now`` on (over-commitment counted as none), planned in place.

    What :meth:`Profile.earliest_fit` and :meth:`Profile.add` would answer, for less: planning
    5,000 jobs one after the other with immutable numpy profiles of a few hundred steps spends
    about 25 us a job in numpy calls and copies. Here the steps are lists changed in place and
    searched from where a job no larger and no longer went (most jobs of a long queue fit right
    there). Neighbouring steps of equal value are merged, as in a Profile.
    """

    def __init__(self, busy: Profile, now: int) -> None:
        steps = busy.steps(now)
        self.times = [time for time, _ in steps]
        self.values = [max(value, 0) for _, value in steps]
        #: Where the last job of each shape (hosts, walltime) went, and the last few jobs: free
        #: hosts only shrink, so no job can start before one no larger and no longer did.
        self.placed: dict[tuple[int, int], int] = {}
        self.recent: deque[tuple[int, int, int]] = deque(maxlen=8)

    def earliest_fit(self, hosts: int, duration: int) -> int | None:
        """The first start from ``now`` with ``hosts`` free for ``duration`` (None: never)."""
        times, values = self.times, self.values
        start = self.placed.get((hosts, duration), times[0])
        for h, d, s in self.recent:
            if h <= hosts and d <= duration and s > start:
                start = s
        k = bisect_right(times, start) - 1
        while True:
            while values[k] < hosts:
                k += 1
                if k == len(times):
                    return None  # never enough hosts again
                start = times[k]
            end = start + duration
            j = k + 1
            while j < len(times) and times[j] < end and values[j] >= hosts:
                j += 1
            if j == len(times) or times[j] >= end:
                self.placed[hosts, duration] = start
                self.recent.append((hosts, duration, start))
                return start
            k, start = j, times[j]

    def take(self, hosts: int, start: int, end: int) -> None:
        """``hosts`` fewer over ``[start, end)`` (``start`` at or after ``now``)."""
        times, values = self.times, self.values
        i = bisect_left(times, start)
        if i == len(times) or times[i] != start:
            times.insert(i, start)
            values.insert(i, values[i - 1])
        j = bisect_left(times, end, i)
        if j == len(times) or times[j] != end:
            times.insert(j, end)
            values.insert(j, values[j - 1])
        for k in range(i, j):
            values[k] -= hosts
        if j < len(times) and values[j] == values[j - 1]:
            del times[j], values[j]
        if i > 0 and values[i] == values[i - 1]:
            del times[i], values[i]
