"""The bridge's periodic work, on APScheduler: polling, passes, reconciliation (with a re-read of
the clusters' properties and links), purging; and, on a thread of its own, the front end's jobs.

Each cluster has its own polling job, so that one silent batch system never delays the others
(clusters one batch-system answer covers, the partitions of a Slurm controller, share theirs);
after each poll the job is rescheduled with the poller's delay (backed off while the cluster does
not answer). The policy job ticks every ``policy.interval`` seconds and runs a pass only when one
is due, which is how "at most once per interval, when triggered" is kept.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from coorm_bridge.service.bridge import Bridge

log = logging.getLogger(__name__)

#: Seconds between two reconciliation passes (and how long finished sessions are kept).
RECONCILE_EVERY = 60.0
KEEP_FINISHED = 7 * 24 * 3600
#: Seconds between two looks at the front end's jobs (sooner when a job comes or is cancelled).
JOBS_EVERY = 0.5


class Loop:
    """Starts and stops the scheduler; ``start`` polls every cluster once first."""

    def __init__(self, bridge: Bridge, reconcile_every: float = RECONCILE_EVERY) -> None:
        self.bridge = bridge
        self.reconcile_every = reconcile_every
        self._rescheduling = threading.Lock()
        self._stopping = False
        self._enacting = False
        self._again = False
        self._jobs_due = threading.Event()
        self._jobs_thread: threading.Thread | None = None
        clusters = bridge.runner.poller.clusters
        self.scheduler = BackgroundScheduler(
            executors={
                "default": ThreadPoolExecutor(max(4, len(clusters) + 2)),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )

    def start(self) -> None:
        """Check the bridge's rights, poll everything, reconcile, run a first pass, then go on
        in the background."""
        self.bridge.check_rights()
        groups = [group[0] for group in self.bridge.runner.poller.groups]
        for cluster in groups:  # with the clusters read with it
            self.bridge.poll(cluster)
        self.bridge.reconcile()
        self.bridge.tick()
        interval = self.bridge.config.policy.interval
        for cluster in groups:
            delay = self.bridge.runner.poller.delay(cluster)
            self.scheduler.add_job(
                self._poll, IntervalTrigger(seconds=delay), args=(cluster,), id=f"poll-{cluster}"
            )
        self.scheduler.add_job(self._tick, IntervalTrigger(seconds=interval), id="policy")
        # Placements: started when a pass wants something (and every poll interval, for
        # retries coming due); one run at a time, which goes on while there is work.
        self.scheduler.add_job(
            self._wake_enactor, IntervalTrigger(seconds=self.bridge.config.placement.poll_interval)
        )
        self.scheduler.add_job(
            self._reconcile, IntervalTrigger(seconds=self.reconcile_every), id="reconcile"
        )
        self.scheduler.add_job(self._purge, IntervalTrigger(hours=1), id="purge")
        self.scheduler.start()
        # The front end's jobs on a thread of their own: a process's end is seen within half a
        # second, and a job submitted or cancelled at once, whatever the scheduler runs.
        self.bridge.jobs.wake = self._jobs_due.set
        self._jobs_thread = threading.Thread(target=self._jobs, name="jobs", daemon=True)
        self._jobs_thread.start()

    def stop(self) -> None:
        """Stop after the running jobs. ``shutdown(wait=True)`` holds the scheduler's job-store
        lock while it waits for them, and a polling job reschedules itself through that lock:
        jobs are told to stop touching the scheduler first, or the two would wait for each other."""
        with self._rescheduling:
            self._stopping = True
        self._jobs_due.set()
        if self._jobs_thread is not None:
            self._jobs_thread.join()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def _poll(self, cluster: str) -> None:
        try:
            delay = self.bridge.poll(cluster)
        except Exception:
            log.exception("polling %s failed", cluster)
            return
        with self._rescheduling:
            if self._stopping:
                return
            job = self.scheduler.get_job(f"poll-{cluster}")
            if job is not None and job.trigger.interval != timedelta(seconds=delay):
                start = datetime.now(job.next_run_time.tzinfo) + timedelta(seconds=delay)
                job.reschedule(IntervalTrigger(seconds=delay, start_date=start))

    def _tick(self) -> None:
        try:
            planned = self.bridge.plan()
        except Exception:
            # A bug in one pass must not stop the next ones; the next pass starts afresh.
            log.exception("policy pass failed")
            self.bridge.runner.trigger()
            return
        if planned and self.bridge.runner.enactor.pending:
            self._wake_enactor()

    def _wake_enactor(self) -> None:
        """Start a placement run unless one is running; that one then goes round again.

        The job is added under the rescheduling lock, as polls reschedule theirs: a stop
        coming in between would otherwise shut the scheduler down, holding the lock add_job
        needs while it waits for this very job (a deadlock)."""
        with self._rescheduling:
            if self._stopping:
                return
            if self._enacting:
                self._again = True
                return
            self._enacting = True
            self.scheduler.add_job(self._enact, id="enact", replace_existing=True)

    def _enact(self) -> None:
        """Placements run apart from passes: a slow batch system delays them, not the passes
        (nor, through them, the answers to launchers)."""
        while True:
            try:
                self.bridge.enact()
            except Exception:
                log.exception("carrying out the placements failed")
            with self._rescheduling:
                if not self._again or self._stopping:
                    self._enacting = False
                    return
                self._again = False

    def _reconcile(self) -> None:
        try:
            self.bridge.reconcile()
        except Exception:
            log.exception("reconciliation failed")
        try:
            self.bridge.refresh_catalogue()
        except Exception:
            log.exception("re-reading the clusters' properties failed")

    def _jobs(self) -> None:
        """Rounds of the front end's jobs until the loop stops (the processes go on: they
        outlive the daemon, and the next one picks them up)."""
        while not self._stopping:
            self._jobs_due.wait(JOBS_EVERY)
            self._jobs_due.clear()
            if self._stopping:
                return
            try:
                self.bridge.job_runner.run()
            except Exception:
                log.exception("looking after the front end's jobs failed")

    def _purge(self) -> None:
        removed = self.bridge.store.purge_finished(self.bridge.now() - KEEP_FINISHED)
        if removed:
            log.info("purged %d finished sessions", removed)
