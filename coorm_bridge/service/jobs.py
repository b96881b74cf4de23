"""Jobs into a session's placeholders, through the bridge's front end (the mock platform's).

A batch system with commands takes jobs itself (``ClusterInfo.submission``); the simulated one
has none, so the bridge takes them for it: only from the session's owner, only into a started
session's placeholder, within its allocation. The HTTP API only validates and writes the job
down (:class:`JobDesk`): it never waits on the batch system nor on a process. The worker
(:class:`.jobrunner.JobRunner`, run by the loop) submits it to the batch system, starts its
process through the adapter's :class:`~coorm_bridge.adapters.frontend.FrontEnd` once the
batch system runs it, and watches both until they end. The jobs of evolving applications'
requests (API v2, :mod:`.request_jobs`) pass the same checks and are written the same way
(:meth:`JobDesk.front_end`, :meth:`JobDesk.accept`, :meth:`JobDesk.cancel_in`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Final

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.core.states import AppState
from coorm_bridge.placement.placeholders import HELD
from coorm_bridge.protocol import JobAnswer, JobInfo, JobRequest
from coorm_bridge.service.catalogue import Catalogue
from coorm_bridge.service.errors import Conflict, Invalid, NotFound, NotYours, OverLimit
from coorm_bridge.store import JobCommand, JobRow, SessionRow, Store, new_job_id

#: Jobs one session may submit, ended ones included (a launcher runs a few per cluster).
MAX_JOBS: Final = 1000
#: The commands a launcher submits with, per batch system.
TOOLS: Final = {"slurm": "sbatch", "oar": "oarsub"}


class JobDesk:
    """The HTTP API's side of jobs. ``own(user, session)`` is the bridge's ownership check (404
    for a session that is not the caller's), ``lock`` the bridge's lock, ``wake`` tells the
    worker (the loop's job thread) there is something new."""

    def __init__(
        self,
        *,
        adapter: Adapter,
        store: Store,
        catalogue: Catalogue,
        lock: AbstractContextManager[object],
        own: Callable[[str, str], SessionRow],
        wake: Callable[[], None],
    ) -> None:
        self.adapter = adapter
        self.store = store
        self.catalogue = catalogue
        self.lock = lock
        self.own = own
        self.wake = wake

    def submit(self, user: str, session_id: str, body: JobRequest) -> JobAnswer:
        """Accept a job: checked, written down, and handed to the worker; nothing is run yet."""
        with self.lock:
            row = self.own(user, session_id)
            held = {p.cluster: p for p in self.store.placeholders(session_id)}
            into = held.get(body.cluster)
            front = self.front_end(
                row,
                user,
                f"session {session_id}",
                body.cluster,
                None if into is None else into.name,
            )
            if row.state is not AppState.STARTED:
                raise Conflict(
                    f"session {session_id} is {row.state.value}, not started: jobs go into the "
                    "placeholders of a started session"
                )
            if into is None or into.status is not HELD:
                clusters = ", ".join(c for c, p in sorted(held.items()) if p.status is HELD)
                raise Conflict(
                    f"cluster {body.cluster} is not in the allocation of session {session_id} "
                    f"(it holds {clusters or 'nothing'})"
                )
            end = row.alloc_end
            assert end is not None  # a started session has its end
            place = Place(
                row,
                f"session {session_id}",
                "the allocation's end",
                end,
                into.name,
                into.host_names,
            )
            job = self.accept(front, place, body)
        self.wake()
        return JobAnswer(job=job.id, cluster=job.cluster, hosts=job.host_names)

    def jobs(self, user: str, session_id: str) -> list[JobInfo]:
        """The session's jobs, oldest first (its owner's, or an admin's view)."""
        self.own(user, session_id)
        return [info_of(job) for job in self.store.jobs(session_id)]

    def cancel(self, user: str, session_id: str, job_id: str) -> JobInfo:
        """Ask for a job to end; the worker cancels it in the batch system and stops its
        process (SIGTERM, then SIGKILL after a grace). Asking again, or for an ended job, is
        harmless."""
        with self.lock:
            self.own(user, session_id)
            job = self.cancel_in(session_id, job_id, f"session {session_id}")
        self.wake()
        return info_of(job)

    # -- shared with the jobs of evolving applications' requests (:mod:`.request_jobs`) --------

    def front_end(
        self, row: SessionRow, user: str, what: str, cluster: str, reservation: str | None
    ) -> FrontEnd:
        """The front end that runs ``user``'s job in ``row`` on ``cluster``: Conflict when the
        caller is not the owner (an admin may look, not run), or when the bridge does not take
        jobs there (a batch system with commands of its own: ``reservation`` is where its
        launcher submits instead)."""
        if row.owner != user:
            raise NotYours(f"only {row.owner}, the owner of {what}, submits jobs into it")
        front = self.adapter.front_end()
        if front is None or self._submission_kind(cluster) in TOOLS:
            raise Conflict(self._takes_jobs_itself(cluster, reservation))
        return front

    def accept(self, front: FrontEnd, place: Place, body: JobRequest) -> JobRow:
        """The checks every job passes, wherever it goes (within ``place``'s end, the front
        end willing to run its owner's jobs, :data:`MAX_JOBS`, its folder), then the job
        written down at step ``new``; called holding the lock, the session's own checks done."""
        row = place.row
        now = self.adapter.now()
        if now + body.walltime > place.end:
            raise Conflict(
                f"a walltime of {body.walltime} s passes {place.ending} ({place.end}): at most "
                f"{max(0, place.end - now)} s are left"
            )
        refusal = front.refusal(row.owner)
        if refusal is not None:
            raise Conflict(refusal)
        if self.store.job_count(row.id) >= MAX_JOBS:
            raise OverLimit(f"{place.what} has submitted {MAX_JOBS} jobs, the most")
        if not os.path.isdir(body.workdir):
            raise Invalid(f"workdir: {body.workdir} is not a folder on the bridge's host")
        return self.store.add_job(
            JobRow(
                id=new_job_id(),
                session_id=row.id,
                cluster=body.cluster,
                name=body.name,
                command=JobCommand(
                    argv=body.argv,
                    environment=body.environment,
                    workdir=body.workdir,
                    stdout=body.stdout,
                    stderr=body.stderr,
                ),
                walltime=body.walltime,
                reservation=place.reservation,
                host_names=place.hosts,
                created=now,
            )
        )

    def cancel_in(
        self, session_id: str, job_id: str, what: str, cluster: str | None = None
    ) -> JobRow:
        """Job ``job_id`` of row ``session_id`` (on ``cluster``, if given) marked for the
        worker to cancel; called holding the lock, the caller's right to it checked."""
        job = self.store.job(job_id)
        if job is None or job.session_id != session_id or cluster not in (None, job.cluster):
            raise NotFound(f"no job {job_id} in {what}")
        if job.step != "ended" and not job.cancel:
            job = self.store.update_job(job_id, cancel=True)
        return job

    def _submission_kind(self, cluster: str) -> str | None:
        """Who takes jobs on ``cluster`` (``ClusterInfo.submission``): on a mixed site the
        bridge's front end serves the simulated platform's clusters, not the batch systems'."""
        info = next((c for c in self.catalogue.infos if c.name == cluster), None)
        return None if info is None or info.submission is None else info.submission.kind

    def _takes_jobs_itself(self, cluster: str, reservation: str | None) -> str:
        kind = self._submission_kind(cluster)
        if kind == "mock":
            return "this simulated platform has no front end (no state folder): it runs no jobs"
        how = f"with {TOOLS[kind]} (kind {kind})" if kind in TOOLS else "with its own commands"
        into = "" if reservation is None else f" into reservation {reservation}"
        return f"this cluster's batch system takes jobs itself: submit {how}{into}"


@dataclass(frozen=True, slots=True)
class Place:
    """Where an accepted job goes: its session's row (a v1 session, or a v2 request's), how
    messages name it and the end it must not pass, that end, its reservation (None: outside
    reservations) and its hosts."""

    row: SessionRow
    what: str
    ending: str
    end: int
    reservation: str | None
    hosts: tuple[str, ...]


def info_of(job: JobRow) -> JobInfo:
    return JobInfo(
        job=job.id,
        cluster=job.cluster,
        name=job.name,
        state=job.state,
        exit_code=job.exit_code,
        hosts=job.host_names,
        signal=job.signal,
        reason=job.reason,
        batch_job=job.batch_job,
        submitted=job.created,
        started=job.started,
        ended=job.ended,
    )
