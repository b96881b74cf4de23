"""The simulated site's state, and what each call does to it: deterministic, without a clock.

Apart from :mod:`.site` (its clock, its lock and its journal) because this is what must give the
same history twice: built from the platform description and its start time, then changed only by
:meth:`Simulation.advance` and :meth:`Simulation.apply`, it ends in the same state from the same
calls at the same simulated times, however often it was looked at in between. That is what lets
a journal of calls (:mod:`.journal`) stand for the whole site after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from coorm_bridge.batchsim import calls
from coorm_bridge.batchsim.faults import Faults
from coorm_bridge.batchsim.limits import MAX_DURATION, MAX_TIME, MAX_TIME_TEXT
from coorm_bridge.batchsim.loads import load_jobs
from coorm_bridge.batchsim.platform import PlatformSpec
from coorm_bridge.batchsim.scheduler import LocalJobSpec, LocalScheduler
from coorm_bridge.core.batch import AdapterError, JobSpec, Refused, ReservationSpec
from coorm_bridge.core.model import ClusterInfo

#: JobSpec environment key giving a mock job's simulated run time in seconds (default: walltime).
RUNTIME_KEY = "COORM_MOCK_RUNTIME"


class Simulation:
    """One platform from ``start``: a :class:`LocalScheduler` per cluster with its load, and
    the site's :class:`.Faults` (its scheduled and injected outages among them)."""

    def __init__(self, spec: PlatformSpec, start: int) -> None:
        self.spec = spec
        self.start = start
        # A platform with a warm-up has been running its load for a while when it starts.
        begin = max(0, start - spec.warmup)
        self.schedulers = {
            c.name: LocalScheduler(c.name, c.host_names(), policy=c.policy, start=begin)
            for c in spec.clusters
        }
        self.faults = Faults(c.name for c in spec.clusters)
        self._next_id = 1
        for number, load in enumerate(spec.loads, 1):
            scheduler = self.schedulers[load.cluster]
            for job in load_jobs(spec, number, load, begin):
                scheduler.submit(job.spec, at=job.at)
        for scheduled in spec.outages:
            self.faults.add_outage(
                scheduled.cluster, start + scheduled.start, start + scheduled.end
            )
        self.advance(start)

    def advance(self, now: int) -> None:
        """Process every event up to ``now`` on every cluster."""
        for scheduler in self.schedulers.values():
            if now > scheduler.now:
                scheduler.advance(now)

    def next_event_time(self) -> int | None:
        """When the platform next changes by itself (None: idle until someone acts)."""
        upcoming = [s.next_event_time() for s in self.schedulers.values()]
        return min((u for u in upcoming if u is not None), default=None)

    def scheduler(self, cluster: str) -> LocalScheduler:
        try:
            return self.schedulers[cluster]
        except KeyError:
            known = ", ".join(self.schedulers)
            raise AdapterError(f"unknown cluster {cluster!r} (this platform has {known})") from None

    def answering(self, cluster: str, now: int) -> LocalScheduler:
        """The cluster's scheduler, unless its batch system is in an outage at ``now``."""
        scheduler = self.scheduler(cluster)
        self.faults.check_answering(cluster, now)
        return scheduler

    def apply(self, call: calls.Call, now: int) -> object:  # noqa: PLR0911 - one case per call
        """Carry out ``call`` at ``now`` (the schedulers stand there) and return its answer.
        An error leaves the platform as it was, except :class:`.SimulatedRefusal`."""
        match call:
            case calls.CreateReservation(cluster=cluster, spec=spec):
                scheduler = self.answering(cluster, now)
                self._check_reservation(cluster, spec)
                return scheduler.create_reservation(spec)
            case calls.UpdateReservation(cluster=cluster, spec=spec):
                scheduler = self.answering(cluster, now)
                self._check_reservation(cluster, spec)
                return scheduler.update_reservation(spec)
            case calls.DeleteReservation(cluster=cluster, name=name):
                self.answering(cluster, now).delete_reservation(name)
                return None
            case calls.Submit(cluster=cluster, job=job):
                return self._submit(self.answering(cluster, now), job)
            case calls.Cancel(cluster=cluster, job_id=job_id):
                try:
                    self.answering(cluster, now).cancel(job_id)
                except KeyError:
                    raise AdapterError(f"no job {job_id} on {cluster}", cluster=cluster) from None
                return None
            case calls.EndJob(cluster=cluster, job_id=job_id, state=state):
                try:
                    self.answering(cluster, now).end(job_id, state)
                except KeyError:
                    raise AdapterError(f"no job {job_id} on {cluster}", cluster=cluster) from None
                return None
            case calls.Upgrade(cluster=cluster, properties=properties):
                return self._upgrade(cluster, properties)
            case _:
                self._change_site(call)
                return None

    def _change_site(self, call: calls.SiteChange) -> None:
        """A change of the site itself: its nodes and links, and its faults."""
        match call:
            case calls.SetNodeState(cluster=cluster, host=host, state=state, at=at):
                if at is not None and at > MAX_TIME:
                    raise ValueError(f"a node cannot change after {MAX_TIME_TEXT} ({at})")
                self.scheduler(cluster).set_node_state(host, state, at)
            case calls.SetLinks(links=links):
                self.spec = self.spec.model_copy(update={"links": links})
            case calls.Outage(cluster=cluster, start=start, end=end):
                self.scheduler(cluster)
                if end <= start:
                    raise ValueError("an outage ends after it starts")
                if start < 0 or end > MAX_TIME:
                    raise ValueError(f"an outage is within [0, {MAX_TIME}] ({MAX_TIME_TEXT})")
                self.faults.add_outage(cluster, start, end)
            case calls.RefuseReservations(cluster=cluster, count=count, reason=reason):
                self.scheduler(cluster)
                self.faults.refuse(cluster, count, reason)
            case calls.RefusalUsed(cluster=cluster):
                self.faults.refusal_used(cluster)
            case calls.ForgetUser(user=user):
                self.faults.forget(user)
            case _:
                assert_never(call)

    def _check_reservation(self, cluster: str, spec: ReservationSpec) -> None:
        """Out-of-range times, then the site's faults: before anything else changes."""
        if spec.end > MAX_TIME:
            raise Refused(
                f"{cluster}: Invalid time specification: {spec.name} ends after {MAX_TIME_TEXT} "
                f"({spec.end} > {MAX_TIME})",
                cluster=cluster,
            )
        self.faults.check_reservation(cluster, spec)

    def _submit(self, scheduler: LocalScheduler, job: JobSpec) -> str:
        cluster = scheduler.cluster
        if job.walltime > MAX_DURATION:
            raise Refused(
                f"{cluster}: Requested time limit is invalid: {job.walltime} s is more than "
                f"{MAX_DURATION} (100 years)",
                cluster=cluster,
            )
        local = LocalJobSpec(
            id=f"{cluster}.{self._next_id}",
            user=job.user,
            hosts=job.hosts,
            walltime=job.walltime,
            runtime=_simulated_runtime(job),
            reservation=job.reservation,
            host_names=job.host_names,
        )
        job_id = scheduler.submit(local)
        self._next_id += 1  # only once accepted: a refused submission changes nothing
        return job_id

    def _upgrade(self, cluster: str, properties: Mapping[str, object]) -> ClusterInfo:
        self.scheduler(cluster)
        if "hosts" in properties or "name" in properties:
            raise ValueError("a simulated cluster keeps its name and hosts")
        specs = [
            type(spec).model_validate({**spec.model_dump(), **properties})
            if spec.name == cluster
            else spec
            for spec in self.spec.clusters
        ]
        self.spec = self.spec.model_copy(update={"clusters": tuple(specs)})
        return next(s.info() for s in specs if s.name == cluster)


def _simulated_runtime(job: JobSpec) -> int:
    text = job.environment.get(RUNTIME_KEY)
    if text is None:
        return job.walltime
    try:
        runtime = int(text)
    except ValueError:
        raise AdapterError(f"{RUNTIME_KEY} must be whole seconds, got {text!r}") from None
    if not 0 < runtime <= MAX_DURATION:
        raise AdapterError(f"{RUNTIME_KEY} must be positive and at most {MAX_DURATION}, got {text}")
    return runtime
