"""Start times for pending jobs the batch system's scheduler left without one.

On a real Slurm queue many pending jobs have no predicted start (481 of 1,000, 536 of 5,000 in
the measurements of FINDINGS.md: backfill stops at its window and its time budget). Ignoring
them would show their hosts as free forever; the adapter plans them itself instead, in queue
order, each at the earliest time its host count fits for its walltime after everything the
batch system already placed (running jobs, predicted ones, reservations, unavailable nodes):
conservative backfilling in queue order, a guess of what it will do once it gets to them.
"""

from __future__ import annotations

from coorm_bridge.adapters.base import ClusterSnapshot, Job, JobState
from coorm_bridge.adapters.load import foreign_load
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
    now = snapshot.time
    busy = Profile.from_intervals(len(snapshot.nodes), foreign_load(snapshot, own_prefix=None))
    free = busy.clamped(0) if busy.min_value() < 0 else busy
    jobs: list[Job] = list(snapshot.jobs)
    for i in missing:
        job = jobs[i]
        start = free.earliest_fit(job.hosts, job.walltime, now)
        if start is None or start > MAX_TIME - job.walltime:
            # Larger than the cluster's available nodes, or behind so long a queue that it would
            # end after the year 9999 (no valid time): it will not start.
            continue
        free = free.add(-job.hosts, start, start + job.walltime)
        jobs[i] = job.model_copy(update={"start": start})
    return snapshot.model_copy(update={"jobs": tuple(jobs)})
