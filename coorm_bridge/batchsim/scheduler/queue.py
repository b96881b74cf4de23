"""The pending jobs, in the order they arrived: the order FCFS serves them.

One queue for the whole cluster, but partitioned: jobs outside reservations compete for the
cluster, and the jobs of each reservation among themselves for its hosts. A job's position is
its place in arrival order, which also breaks ties wherever jobs are compared.
"""

from __future__ import annotations

from collections.abc import ValuesView

from coorm_bridge.batchsim.scheduler.jobs import JobEntry
from coorm_bridge.core.batch import JobState


class PendingQueue:
    """The cluster's pending jobs by id, in arrival order."""

    __slots__ = ("_arrivals", "_jobs")

    def __init__(self) -> None:
        self._jobs: dict[str, JobEntry] = {}
        self._arrivals = 0

    def join(self, job: JobEntry) -> None:
        """``job`` arrives: it is pending, behind every job that arrived before."""
        job.state = JobState.PENDING
        job.position = self._arrivals
        self._arrivals += 1
        self._jobs[job.spec.id] = job

    def leave(self, job: JobEntry) -> None:
        """``job`` starts or is dropped (the caller sets its new state)."""
        del self._jobs[job.spec.id]

    def get(self, job_id: str) -> JobEntry | None:
        """The pending job ``job_id``, or None when it is not pending."""
        return self._jobs.get(job_id)

    def values(self) -> ValuesView[JobEntry]:
        """The pending jobs, in arrival order."""
        return self._jobs.values()

    def heads(self) -> dict[str | None, JobEntry]:
        """The first pending job of each partition (None: outside reservations)."""
        heads: dict[str | None, JobEntry] = {}
        for job in self._jobs.values():
            heads.setdefault(job.spec.reservation, job)
        return heads

    def first_in(self, part: str | None) -> JobEntry | None:
        """The first pending job of one partition, if any."""
        return next((job for job in self._jobs.values() if job.spec.reservation == part), None)
