"""The front end's worker: each job from the batch system's queue to its process's end.

A job goes ``new`` → ``submitting`` → ``queued`` (in the batch system) → ``launching`` →
``running`` (its process runs) → ``ended``. Each step is written before the batch system or the
front end is asked for the next, so that a crash in between is known after a restart: a job
left ``submitting`` or ``launching`` is never asked again (it may have happened), it is looked
for instead. The simulated batch system decides when a job runs and when it must end (its time
limit, a host down, its reservation released): the process follows it, started when the batch
system starts the job, stopped when it ends it. And when the process ends by itself, the batch
system is told (completed or failed by its exit status).

A daemon that stops leaves the processes running, as a batch system's jobs outlive its clients:
a restarted one finds them by pid (with their start time, so a reused pid is never taken for
one) and reads the exit status of those that ended meanwhile; a job whose process is gone with
no status is failed. Nothing is ever run twice.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Final

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd, Launched, ProcessEnd, ProcessSpec
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState, Unavailable
from coorm_bridge.core.states import AppState
from coorm_bridge.store import JobRow, Store, StoreFull

log = logging.getLogger(__name__)

#: Seconds past a stop's grace after which its process is killed outright (the supervisor did
#: not do it).
STOP_MARGIN: Final = 5.0
#: The longest reason kept for a job (the store's bound).
MAX_REASON: Final = 2000
#: What a job gets of the daemon's environment, unless it gives its own.
INHERITED: Final = ("PATH", "HOME", "LANG")


class JobRunner:
    """One round at a time (:meth:`run`), from the loop's own thread."""

    def __init__(self, adapter: Adapter, store: Store) -> None:
        self.adapter = adapter
        self.store = store
        self._stopping: dict[str, float] = {}
        """Jobs whose process was sent SIGTERM, and when to SIGKILL it (monotonic)."""
        self._round = threading.Lock()
        self.failures = 0
        """Jobs set aside after an unexpected error."""

    def run(self) -> int:
        """Move every unfinished job on as far as it can go now; returns how many there were."""
        with self._round:
            jobs = self.store.unfinished_jobs()
            front = self.adapter.front_end()
            for job in jobs:
                try:
                    if front is None:
                        self._end(job, "failed", reason="the bridge has no front end any more")
                    else:
                        self._advance(front, job)
                except Unavailable as error:
                    log.debug("job %s waits for its batch system: %s", job.id, error)
                except StoreFull:  # not this one's: nothing can be written now
                    raise
                except Exception as error:  # a bug, for this job only
                    self.failures += 1
                    log.error("job %s set aside after an unexpected error", job.id, exc_info=error)
                    why = f"the bridge could not handle this job: {type(error).__name__}: {error}"
                    self._end(job, "failed", reason=why)
            return len(jobs)

    def _advance(self, front: FrontEnd, job: JobRow) -> None:
        session = self.store.session(job.session_id)
        leave = job.cancel or session is None or session.state is not AppState.STARTED
        if job.step == "new":
            if leave:
                self._end(job, "cancelled", reason="cancelled before it was submitted")
                return
            # Submitted, then started at once when the batch system runs it at once: the
            # process starts with the batch system's job, not a round later.
            if not self._submit(front, job):
                return
            fresh = self.store.job(job.id)
            assert fresh is not None
            job = fresh
        if job.step == "submitting":
            self._lost_submission(job)
        elif job.step == "queued":
            self._queued(front, job, leave)
        elif job.step == "launching":
            self._lost_launch(front, job)
        elif job.step == "running":
            self._running(front, job, leave)

    # -- into the batch system --------------------------------------------------------------

    def _submit(self, front: FrontEnd, job: JobRow) -> bool:
        """True once the batch system has it. A request's job (API v2) names its hosts: it
        runs on those and no others, which may be a part of its reservation's, or outside
        reservations; a v1 session's takes any of its placeholder's (a host replaced there
        since is as good)."""
        session = self.store.session(job.session_id)
        assert session is not None
        spec = JobSpec(
            name=job.name,
            user=session.owner,
            argv=job.command.argv,
            hosts=len(job.host_names),
            walltime=job.walltime,
            reservation=job.reservation,
            workdir=job.command.workdir,
            host_names=job.host_names if session.parent is not None else (),
        )
        job = self.store.update_job(job.id, step="submitting")
        try:
            batch_job = front.submit(job.cluster, spec)
        except Unavailable:
            self.store.update_job(job.id, step="new")  # nothing was made: ask again later
            raise
        except AdapterError as error:
            self._end(job, "failed", reason=f"the batch system refused it: {error}")
            return False
        self.store.update_job(job.id, step="queued", batch_job=batch_job)
        log.info("job %s of session %s is %s on %s", job.id, job.session_id, batch_job, job.cluster)
        return True

    def _lost_submission(self, job: JobRow) -> None:
        """A crash came while it was being submitted: whether the batch system has it is not
        known, so it is not submitted again; a job of its owner in the reservation (outside
        reservations: on its hosts) that no job of the bridge knows is that one, and is
        cancelled."""
        session = self.store.session(job.session_id)
        known = {j.batch_job for j in self.store.jobs(job.session_id) if j.batch_job is not None}
        if job.reservation is None:  # others of the owner's sessions may run there too
            known |= {j.batch_job for j in self.store.unfinished_jobs() if j.batch_job}
        shot = self.adapter.snapshot([job.cluster]).clusters[job.cluster]
        hosts = set(job.host_names)
        for stray in shot.jobs:
            if stray.id in known or stray.reservation != job.reservation:
                continue
            mine = stray.user == (session.owner if session is not None else None)
            if job.reservation is not None or (mine and hosts.intersection(stray.host_names)):
                log.info("cancelling %s, left in %s by a crash", stray.id, job.reservation)
                self.adapter.cancel(job.cluster, stray.id)
        why = "the bridge stopped while submitting it; it is not submitted again"
        self._end(job, "failed", reason=why)

    def _queued(self, front: FrontEnd, job: JobRow, leave: bool) -> None:
        assert job.batch_job is not None
        if leave:
            self.adapter.cancel(job.cluster, job.batch_job)
            self._end(job, "cancelled", reason=self._why_left(job))
            return
        state = self.adapter.job_state(job.cluster, job.batch_job)
        if state is JobState.PENDING:
            return
        if state is not JobState.RUNNING:
            why = f"the batch system ended it ({state.value}) before its process started"
            self._end(job, "cancelled" if state is JobState.CANCELLED else "failed", reason=why)
            return
        session = self.store.session(job.session_id)
        assert session is not None
        refusal = front.refusal(session.owner)
        if refusal is not None:  # the configuration changed since it was accepted
            self._give_up(front, job.cluster, job.batch_job, refusal)
            self._end(job, "failed", reason=refusal)
            return
        self._launch(front, job)

    # -- its process --------------------------------------------------------------------------

    def _launch(self, front: FrontEnd, job: JobRow) -> None:
        assert job.batch_job is not None
        batch = job.batch_job
        hosts = self._hosts(job)
        session = self.store.session(job.session_id)
        assert session is not None
        environment = {key: os.environ[key] for key in INHERITED if key in os.environ}
        environment |= job.command.environment
        environment |= {
            "COORM_JOB_ID": job.id,
            "COORM_JOB_HOSTS": ",".join(hosts),
            "COORM_CLUSTER": job.cluster,
        }
        spec = ProcessSpec(
            argv=job.command.argv,
            environment=environment,
            workdir=job.command.workdir,
            stdout=job.command.stdout,
            stderr=job.command.stderr,
            owner=session.owner,
        )
        job = self.store.update_job(job.id, step="launching", state="running", host_names=hosts)
        try:
            launched = front.launch(job.id, spec)
        except AdapterError as error:
            self._give_up(front, job.cluster, batch, str(error))
            self._end(job, "failed", reason=str(error))
            return
        self._record_launch(job, launched)

    def _record_launch(self, job: JobRow, launched: Launched) -> None:
        now = self.adapter.now()
        self.store.update_job(
            job.id, step="running", pid=launched.pid, since=launched.since, started=now
        )
        log.info("job %s runs as pid %d on %s", job.id, launched.pid, ", ".join(job.host_names))

    def _lost_launch(self, front: FrontEnd, job: JobRow) -> None:
        """A crash came while its process was being started: found if it started, else it
        never will (never started twice)."""
        launched = front.recover(job.id)
        if launched is not None:
            self._record_launch(job, launched)
            return
        assert job.batch_job is not None
        why = "the bridge stopped while starting its process; it is not started again"
        self._give_up(front, job.cluster, job.batch_job, why)
        self._end(job, "failed", reason=why)

    def _running(self, front: FrontEnd, job: JobRow, leave: bool) -> None:
        assert job.pid is not None
        assert job.batch_job is not None
        batch = job.batch_job
        launched = Launched(pid=job.pid, since=job.since)
        outcome = front.outcome(job.id, launched)
        if outcome is None:
            if job.stop is None:
                if leave:
                    self.adapter.cancel(job.cluster, batch)
                    job = self.store.update_job(job.id, stop="cancel", reason=self._why_left(job))
                else:
                    state = self.adapter.job_state(job.cluster, batch)
                    if state is JobState.RUNNING:
                        return
                    why = (
                        f"the batch system ended it ({state.value}): its time limit, a host "
                        "down, its reservation gone, or its hosts taken back (preempted)"
                    )
                    job = self.store.update_job(job.id, stop="batch", reason=why)
            self._stop(front, job, launched)
            return
        self._stopping.pop(job.id, None)
        front.ended(job.cluster, batch, outcome)  # nothing if the batch system ended it first
        if job.stop == "cancel":
            final = "cancelled"
        elif job.stop is None and outcome.succeeded:
            final = "completed"
        else:
            final = "failed"
        self._end(
            job,
            final,
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            reason=job.reason or outcome.reason,
        )

    def _stop(self, front: FrontEnd, job: JobRow, launched: Launched) -> None:
        """SIGTERM once (the supervisor sends SIGKILL after the grace); SIGKILL outright if it
        is still there well after that."""
        deadline = self._stopping.get(job.id)
        if deadline is None:
            front.stop(job.id, launched)
            self._stopping[job.id] = time.monotonic() + front.grace + STOP_MARGIN
            log.info("job %s: stopping its process (%s)", job.id, job.reason)
        elif time.monotonic() >= deadline:
            front.stop(job.id, launched, force=True)

    # -- helpers ------------------------------------------------------------------------------

    def _give_up(self, front: FrontEnd, cluster: str, batch_job: str, why: str) -> None:
        """A job whose process will never run: the batch system's job ends too, failed when it
        runs (its process could not), cancelled when it waits."""
        state = self.adapter.job_state(cluster, batch_job)
        if state is JobState.RUNNING:
            front.ended(cluster, batch_job, ProcessEnd(reason=why))
        elif not state.finished:
            self.adapter.cancel(cluster, batch_job)

    def _hosts(self, job: JobRow) -> tuple[str, ...]:
        """Where the batch system runs it (a host may have been swapped since it was taken)."""
        try:
            shot = self.adapter.snapshot([job.cluster]).clusters[job.cluster]
        except AdapterError:
            return job.host_names
        for seen in shot.jobs:
            if seen.id == job.batch_job and seen.host_names:
                return seen.host_names
        return job.host_names

    def _why_left(self, job: JobRow) -> str:
        if job.cancel:
            return "cancelled by its owner"
        session = self.store.session(job.session_id)
        if session is not None and session.parent is not None:  # a request's (API v2)
            typed, state = session.typed, session.state.value
            deadline = None if typed is None else typed.preempt_by
            if deadline is not None and (session.done_at or 0) >= deadline:
                state = f"preempted: its hosts were not given back by {deadline}"
            return f"its request {session.name} ended ({state}): the jobs it left are cancelled"
        if session is not None and session.state in (AppState.FINISH_SENT, AppState.GHOST):
            return "its application sent done: the jobs it left are cancelled"
        state = "gone" if session is None else session.state.value
        return f"its session ended ({state}): the jobs it left are cancelled"

    def _end(self, job: JobRow, state: str, **fields: Any) -> None:
        if fields.get("reason"):
            fields["reason"] = fields["reason"][:MAX_REASON]  # a batch system's words: bounded
        self.store.update_job(job.id, step="ended", state=state, ended=self.adapter.now(), **fields)
        log.info(
            "job %s %s%s", job.id, state, f": {fields['reason']}" if fields.get("reason") else ""
        )
