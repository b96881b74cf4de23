"""Background load for the co-allocation runs: segments of the shipped SWF traces, per seed.

Each cluster replays its own trace from its own random point (the seed picks it), so that the
three clusters are busy independently, as three sites are. The NASA iPSC/860 log is of a
128-node machine and is replayed as is on 128 hosts; the Lublin model log is of a 256-processor
machine and is replayed with two processors per host (each job asks half as many hosts, rounded
up), which keeps its load factor on 128 hosts. Submit times are divided by ``load`` (runtimes are
kept) to make the background heavier than the traces' own: the NASA log is about 47 % busy,
too light for a 32-host request to wait at all, and is replayed 1.5 times as fast (about 70 %,
short queues); the Lublin log, busier than its machine on some stretches (queues that grow
without bound, where any delay cascades to every later job), is slowed to 0.85 (long queues:
the cluster the application waits for). Walltimes are the logs' runtimes when they give
no request, as the replay does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

from coorm_bridge.batchsim import LocalJobSpec, ReplayJob, read_swf, replay_jobs, trace_path
from coorm_bridge.sim.coupling.platform import BACKGROUND, BackgroundJob


@dataclass(frozen=True)
class TraceSource:
    """A shipped trace and how its jobs map onto a cluster's hosts."""

    trace: str
    procs_per_host: int
    intensity: float
    """Submit times are divided by this (times the run's ``load``)."""


#: The three clusters of the experiment and the logs they replay.
SOURCES: dict[str, TraceSource] = {
    "alpha": TraceSource("nasa", 1, 1.5),
    "beta": TraceSource("lublin", 2, 0.85),
    "gamma": TraceSource("nasa", 1, 1.5),
}


@cache
def _replay(source: TraceSource, hosts: int) -> tuple[ReplayJob, ...]:
    """A trace's jobs for a cluster of ``hosts`` hosts (read once per process; larger jobs
    are clamped to the cluster, as a site would cap them)."""
    jobs = replay_jobs(
        read_swf(trace_path(source.trace)),
        procs_per_host=source.procs_per_host,
        max_hosts=hosts,
        too_large="clamp",
    )
    return tuple(sorted(jobs, key=lambda job: (job.submit, job.id)))


def segment(
    source: TraceSource,
    hosts: int,
    rng: random.Random,
    *,
    start: int,
    length: int,
    load: float,
) -> list[BackgroundJob]:
    """The jobs of a random stretch of ``source`` that arrive within ``length`` seconds of
    ``start`` once submit times are divided by ``load``."""
    jobs = _replay(source, hosts)
    load *= source.intensity
    first, last = jobs[0].submit, jobs[-1].submit
    span = round(length * load)
    origin = rng.randrange(first, max(first + 1, last - span))
    picked: list[BackgroundJob] = []
    for job in jobs:
        if job.submit < origin:
            continue
        if job.submit >= origin + span:
            break
        spec = LocalJobSpec(
            id=f"{BACKGROUND}{job.id}",
            user=job.user,
            hosts=job.hosts,
            walltime=job.walltime,
            runtime=job.runtime,
        )
        picked.append(BackgroundJob(spec, start + int((job.submit - origin) / load)))
    return picked
