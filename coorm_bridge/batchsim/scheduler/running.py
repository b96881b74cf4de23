"""The running jobs: the hosts they use, and when each must end.

A running job holds its hosts in the plan until its bound (its walltime, or its reservation's
end if sooner): the scheduler never peeks at how long it really runs. It really ends at the
earlier of its bound and its run time, an event filed in the calendar; a job killed at its
bound failed.
"""

from __future__ import annotations

from collections.abc import Iterable, ValuesView

from coorm_bridge.batchsim.scheduler.events import END, Calendar
from coorm_bridge.batchsim.scheduler.hostplan import HostPlan
from coorm_bridge.batchsim.scheduler.hosts import Hosts
from coorm_bridge.batchsim.scheduler.jobs import JobEntry
from coorm_bridge.core.batch import JobState


class RunningJobs:
    """The running jobs of one cluster, with :attr:`mask` the hosts they use."""

    __slots__ = ("_calendar", "_hosts", "_jobs", "_plan", "mask")

    def __init__(self, hosts: Hosts, plan: HostPlan, calendar: Calendar) -> None:
        self._hosts = hosts
        self._plan = plan
        self._calendar = calendar
        self._jobs: dict[str, JobEntry] = {}
        self.mask = 0

    def start(self, job: JobEntry, mask: int, bound: int) -> None:
        """Run ``job`` now on ``mask``, already held for it in the plan until ``bound``."""
        if mask & ~self._plan.up or mask & self.mask:
            raise RuntimeError(f"scheduler bug: job {job.spec.id} planned on unavailable hosts")
        self._jobs[job.spec.id] = job
        self.mask |= mask
        job.state = JobState.RUNNING
        job.start = self._calendar.now
        job.mask = mask
        job.names = self._hosts.names_of(mask)
        job.plan_start = None
        self.set_bound(job, bound)

    def set_bound(self, job: JobEntry, bound: int) -> None:
        """When a running job must end; it really ends at the earlier of that and its run time."""
        assert job.start is not None
        job.bound = bound
        job.fails = job.spec.runtime > bound - job.start
        job.end_at = job.start + min(job.spec.runtime, bound - job.start)
        self._calendar.push(job.end_at, END, job.spec.id)

    def end(self, job: JobEntry, state: JobState) -> None:
        """``job`` ends now in ``state``; the caller gives its hosts back to the plan."""
        del self._jobs[job.spec.id]
        self.mask &= ~job.mask
        job.state = state
        job.end = self._calendar.now

    def values(self) -> ValuesView[JobEntry]:
        return self._jobs.values()

    def on(self, bit: int) -> JobEntry | None:
        """The job running on the host of ``bit``, if any."""
        if not bit & self.mask:
            return None
        return next(job for job in self._jobs.values() if job.mask & bit)

    def of(self, reservation: str) -> list[JobEntry]:
        """The jobs running in ``reservation``."""
        return [job for job in self._jobs.values() if job.spec.reservation == reservation]

    def hosts_of(self, reservation: str) -> int:
        """The hosts the jobs running in ``reservation`` use: it must keep them."""
        mask = 0
        for job in self.of(reservation):
            mask |= job.mask
        return mask

    def busy(self, at: int, ignore: str | None) -> int:
        """Hosts of running jobs that may still run at ``at`` (until their bound), but the jobs
        of reservation ``ignore``."""
        mask = 0
        for job in self._jobs.values():
            if job.bound > at and (ignore is None or job.spec.reservation != ignore):
                mask |= job.mask
        return mask

    def bounds_after(self, t: int) -> Iterable[int]:
        """The bounds later than ``t``: when hosts may free up."""
        return (job.bound for job in self._jobs.values() if job.bound > t)
