"""The scenario of one co-allocation run and the simulated site it is played on.

A scenario is plain data (clusters, background jobs with their arrival times, the coupled
application's request), so that every strategy and the baseline without the application replay
exactly the same background: the only difference between two runs is what the strategy did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import (
    RUNTIME_KEY,
    ClusterSpec,
    JobRecord,
    LocalJobSpec,
    LocalScheduler,
    PlatformSpec,
    VirtualClock,
)
from coorm_bridge.core.batch import JobSpec, JobState, ReservationHandle

#: Who runs the coupled application (its jobs and the reservations that admit them).
OWNER = "coupled"
#: Background jobs' ids start with this, so that they are told apart from the application's.
BACKGROUND = "bg-"


@dataclass(frozen=True)
class BackgroundJob:
    """A job of the cluster's own users, arriving at ``at``."""

    spec: LocalJobSpec
    at: int


@dataclass(frozen=True)
class Scenario:
    """One run's input: the same for every strategy and for the baseline.

    ``start`` is when the platform starts (the background replay begins there, well before
    ``arrival`` so that queues have formed); the application asks for ``hosts`` hosts on every
    cluster for ``duration`` seconds, all at the same time.
    """

    clusters: dict[str, int]
    background: dict[str, list[BackgroundJob]]
    start: int
    arrival: int
    hosts: int
    duration: int

    def platform(self) -> MockAdapter:
        """The site at ``start``, its background queued as future arrivals, on a virtual clock.

        Behind the mock adapter because the bridge's strategy places through the adapter
        interface, as the daemon does; the others use the site itself (``adapter.site``)."""
        spec = PlatformSpec(
            start=self.start,
            cluster=tuple(
                ClusterSpec(name=name, hosts=size) for name, size in self.clusters.items()
            ),
        )
        adapter = MockAdapter(spec, VirtualClock(self.start))
        for name, jobs in self.background.items():
            scheduler = adapter.site.schedulers[name]
            for job in jobs:
                scheduler.submit(job.spec, at=job.at)
        return adapter


@dataclass
class StrategyResult:
    """What one strategy did: when the application ran (absolute times), the node-seconds it
    held without running, its negotiation rounds, and the platform afterwards (for records)."""

    start: int
    end: int
    idle: int
    rounds: int
    adapter: MockAdapter
    jobs: dict[str, str] = field(default_factory=dict)
    """The application's job per cluster (the last submitted), by cluster."""
    notes: dict[str, float] = field(default_factory=dict)


def run_in_reservations(
    adapter: MockAdapter,
    reservations: Mapping[str, ReservationHandle],
    hosts: Mapping[str, int],
    *,
    name: str,
    start: int,
    duration: int,
    rounds: int,
) -> StrategyResult:
    """Submit the application's job into each cluster's reservation, run the platform to its
    end, and count the node-seconds the reservations held before the jobs began (none when the
    local schedulers start them on time: the records say when they really did)."""
    jobs = {
        cluster: adapter.submit(
            cluster, app_job(f"{name}-{cluster}", hosts[cluster], duration, duration, held.name)
        )
        for cluster, held in reservations.items()
    }
    advance(adapter, start + duration)
    ran = records(adapter)
    idle = 0
    for cluster, job in jobs.items():
        began = ran[f"{cluster}/{job}"].start
        if began is None:
            raise RuntimeError(f"the application's job on {cluster} never ran in its reservation")
        idle += hosts[cluster] * (began - start)
    return StrategyResult(
        start=start, end=start + duration, idle=idle, rounds=rounds, adapter=adapter, jobs=jobs
    )


def app_job(name: str, hosts: int, walltime: int, runtime: int, reservation: str | None) -> JobSpec:
    """One of the application's per-cluster jobs; ``runtime`` is what the mock runs it for."""
    return JobSpec(
        name=name,
        user=OWNER,
        argv=("coupled-app",),
        hosts=hosts,
        walltime=walltime,
        reservation=reservation,
        environment={RUNTIME_KEY: str(runtime)},
    )


def advance(adapter: MockAdapter, until: int) -> None:
    """Replay the platform up to ``until`` (every event at its own time)."""
    adapter.site.controls.run_until(until)


def next_time(adapter: MockAdapter, *candidates: int | None) -> int:
    """The next moment something may change: a platform event or one of ``candidates``."""
    times = [t for t in (adapter.site.controls.next_event_time(), *candidates) if t is not None]
    if not times:
        raise RuntimeError("nothing will ever happen again on this platform")
    return max(adapter.now() + 1, min(times))


def finish(adapter: MockAdapter) -> None:
    """Run the platform until no event is left: every background job has started and ended."""
    while (t := adapter.site.controls.next_event_time()) is not None:
        advance(adapter, t)


def records(adapter: MockAdapter) -> dict[str, JobRecord]:
    """Every job of every cluster by ``cluster/id``."""
    return {
        f"{name}/{record.id}": record
        for name, scheduler in adapter.site.schedulers.items()
        for record in scheduler.records()
    }


def running(scheduler: LocalScheduler, job_id: str) -> bool:
    return scheduler.job_state(job_id) is JobState.RUNNING
