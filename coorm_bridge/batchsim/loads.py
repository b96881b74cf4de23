"""The background load of a platform file as the local jobs each cluster's users submit.

Apart from the site because it is the one place where outside data (SWF traces, the platform
file's synthetic parameters) becomes simulated jobs: here every job is put within the platform's
limits (:mod:`.limits`), so a trace with a corrupt record or a load stretched past year 9999
never reaches the bridge as a time it cannot store. Jobs out of range are left out and counted
in the log, as the replay of a trace leaves out what it cannot use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from coorm_bridge.batchsim.limits import MAX_DURATION, MAX_TIME
from coorm_bridge.batchsim.platform import PlatformSpec, SyntheticLoad, TraceLoad
from coorm_bridge.batchsim.scheduler import LocalJobSpec
from coorm_bridge.batchsim.swf import ReplayJob, read_swf, replay_jobs, synthetic_jobs
from coorm_bridge.core.batch import AdapterError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadJob:
    """One job of a load: what is submitted, and when it arrives."""

    spec: LocalJobSpec
    at: int


def load_jobs(
    spec: PlatformSpec, number: int, load: TraceLoad | SyntheticLoad, start: int
) -> list[LoadJob]:
    """The jobs of the ``number``-th load (from 1) of a platform started at ``start``, in
    arrival order; raises AdapterError when a trace cannot be read."""
    cluster = spec.cluster(load.cluster)
    jobs: Iterable[ReplayJob]
    skipped = 0
    if isinstance(load, TraceLoad):
        path = spec.trace_path(load)
        try:
            trace = read_swf(path)
        except OSError as error:
            raise AdapterError(f"cannot read trace {path}: {error.strerror}") from error
        except ValueError as error:
            raise AdapterError(f"cannot use trace {path}: {error}") from error
        replay = replay_jobs(
            trace,
            procs_per_host=load.procs_per_host,
            time_scale=load.time_scale,
            offset=start + load.offset,
            max_hosts=cluster.hosts,
            too_large=load.too_large,
        )
        jobs = replay[: load.max_jobs]
        skipped = replay.report.out_of_range
    else:
        generated = synthetic_jobs(
            load.seed,
            load.count,
            load.max_hosts or max(1, cluster.hosts // 4),
            load.mean_interarrival,
            load.mean_runtime,
        )
        jobs = [job.model_copy(update={"submit": job.submit + start}) for job in generated]
    kept: list[LoadJob] = []
    out_of_range = skipped
    for job in sorted(jobs, key=lambda j: j.submit):
        if job.submit > MAX_TIME or job.walltime > MAX_DURATION:
            out_of_range += 1
            continue
        local = LocalJobSpec(
            id=f"load{number}-{job.id}",
            user=job.user,
            hosts=min(job.hosts, cluster.hosts),
            walltime=job.walltime,
            runtime=job.runtime,
        )
        kept.append(LoadJob(local, max(job.submit, start)))
    if out_of_range:
        logger.warning(
            "load %d on %s: %d jobs left out, arriving after year 9999 or longer than 100 years",
            number,
            cluster.name,
            out_of_range,
        )
    return kept
