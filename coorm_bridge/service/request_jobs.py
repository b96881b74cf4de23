"""Jobs of an evolving application's requests (API v2), through the bridge's front end.

A started request runs jobs on the mock platform as a v1 session does, with the same checks
and the same worker (:class:`.jobs.JobDesk` accepts and writes them; the HTTP API never waits on
the batch system). Each request is a session row of its own (:mod:`.evolving`) and its jobs
belong to that row, so :class:`.jobrunner.JobRunner` stops them when the request leaves
``started``: done, killed past a preemption's deadline, its application ended.

A job runs on exactly the request's hosts, or on those of them it names (a sweep runs one task
per host): the simulated scheduler starts it there and nowhere else, as Slurm's ``--nodelist``.
It runs in the request's reservation: its own placeholder (a pre-allocation, a non-preemptible
request), or, for an update started inside a pre-allocation, that one's; a preemptible request
holds no reservation, so its jobs run outside reservations, on hosts the bridge named idle.
"""

from __future__ import annotations

from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import RequestType
from coorm_bridge.placement.placeholders import HELD
from coorm_bridge.protocol import JobAnswer, JobInfo
from coorm_bridge.protocol_v2 import RequestInfo, RequestJobRequest
from coorm_bridge.service.errors import Conflict, Invalid
from coorm_bridge.service.evolving import Evolving
from coorm_bridge.service.jobs import JobDesk, Place, info_of
from coorm_bridge.store import SessionRow


class RequestJobs:
    """The HTTP API's side of requests' jobs: the request found through ``evolving`` (whose
    ownership rules are v2's: 404 for a session that is not the caller's, 409 for a v1 one),
    the job accepted, listed and cancelled by ``desk`` under its lock."""

    def __init__(self, *, desk: JobDesk, evolving: Evolving) -> None:
        self.desk = desk
        self.evolving = evolving

    def submit(
        self, user: str, session_id: str, request_id: str, body: RequestJobRequest
    ) -> JobAnswer:
        """Accept a job of a started request: checked, written down, handed to the worker."""
        desk = self.desk
        what = f"request {request_id} of session {session_id}"
        with desk.lock:
            child, info = self.evolving.request_row(user, session_id, request_id)
            if body.cluster != info.cluster:
                raise Conflict(
                    f"request {request_id} is on cluster {info.cluster}, not {body.cluster}: "
                    "its jobs run there"
                )
            reservation = self._reservation(user, session_id, child, info)
            front = desk.front_end(child, user, what, body.cluster, reservation)
            if info.state is not AppState.STARTED:
                raise Conflict(
                    f"request {request_id} is {info.state.value}, not started: its jobs run on "
                    "its hosts once it started, until it ends"
                )
            assert info.end is not None  # a started request has its end
            hosts = self._hosts(request_id, info, body)
            ending = f"the end of request {request_id}"
            job = desk.accept(front, Place(child, what, ending, info.end, reservation, hosts), body)
        desk.wake()
        return JobAnswer(job=job.id, cluster=job.cluster, hosts=job.host_names)

    def jobs(self, user: str, session_id: str, request_id: str) -> list[JobInfo]:
        """The request's jobs, oldest first (its owner's, or an admin's view)."""
        child, info = self.evolving.request_row(user, session_id, request_id)
        return [
            info_of(job) for job in self.desk.store.jobs(child.id) if job.cluster == info.cluster
        ]

    def cancel(self, user: str, session_id: str, request_id: str, job_id: str) -> JobInfo:
        """Ask for a job to end (the worker stops it, as a v1 job's); asking again, or for an
        ended job, is harmless."""
        desk = self.desk
        with desk.lock:
            child, info = self.evolving.request_row(user, session_id, request_id)
            what = f"request {request_id} of session {session_id}"
            job = desk.cancel_in(child.id, job_id, what, info.cluster)
        desk.wake()
        return info_of(job)

    # -- helpers ------------------------------------------------------------------------------

    def _reservation(
        self, user: str, session_id: str, child: SessionRow, info: RequestInfo
    ) -> str | None:
        """The reservation the request's jobs go into (None: outside reservations, a
        preemptible request's); Conflict for a started request whose reservation is not held."""
        if info.type is RequestType.PREEMPTIBLE or info.state is not AppState.STARTED:
            return info.reservation
        row = child
        if info.inside is not None:  # a spontaneous update: in its pre-allocation's
            row, _ = self.evolving.request_row(user, session_id, info.inside)
        held = self.desk.store.placeholder(row.id, info.cluster)
        if held is None or held.status is not HELD:
            raise Conflict(
                f"request {info.request} holds no reservation on {info.cluster} now: it runs no "
                "jobs"
            )
        return held.name

    def _hosts(
        self, request_id: str, info: RequestInfo, body: RequestJobRequest
    ) -> tuple[str, ...]:
        """The request's hosts, or those of them the job names."""
        if not info.host_names:
            raise Conflict(f"request {request_id}'s hosts are not known yet: try again")
        if not body.hosts:
            return info.host_names
        held = set(info.host_names)
        foreign = [host for host in body.hosts if host not in held]
        if foreign:
            raise Invalid(
                f"hosts: request {request_id} does not hold {', '.join(foreign)} (it holds "
                f"{', '.join(info.host_names)})"
            )
        return body.hosts
