"""The bridge's periodic work, on APScheduler: polling, passes, placements, reconciliation
(with a re-read of the clusters' properties and links), deleting ended sessions past their
retention; and, on a thread of its own, the front end's jobs. The loop drives each part itself:
the poller, the pass runner, the enactor, the reconciler, the catalogue and the job runner, all
handed to it by the composition root.

Each cluster has its own polling job, so that one silent batch system never delays the others
(clusters one batch-system answer covers, the partitions of a Slurm controller, share theirs);
after each poll the job is rescheduled with the poller's delay (backed off while the cluster does
not answer). The policy job ticks every ``policy.interval`` seconds and runs a pass only when one
is due, which is how "at most once per interval, when triggered" is kept. Placements run apart
from passes, so that a slow batch system delays them, not the passes (nor, through them, the
answers to launchers).

The steps (:meth:`Loop.poll`, :meth:`Loop.tick`, :meth:`Loop.reconcile`, :meth:`Loop.check_rights`)
are what the scheduled jobs run; :meth:`Loop.start` runs them once in order before serving, and
tests and tools step through them by hand without starting the scheduler.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.placement.reconcile import Reconciler
from coorm_bridge.service.batchrules import BatchRules
from coorm_bridge.service.catalogue import Catalogue
from coorm_bridge.service.config import Config
from coorm_bridge.service.due import Due
from coorm_bridge.service.enactor import Enactor
from coorm_bridge.service.jobrunner import JobRunner
from coorm_bridge.service.passes import PassRunner
from coorm_bridge.service.polling import Poller
from coorm_bridge.service.problems import Problems, check_rights
from coorm_bridge.service.stats import Stats
from coorm_bridge.store import Store, StoreFull

log = logging.getLogger(__name__)

#: Seconds between two reconciliation passes.
RECONCILE_EVERY = 60.0
#: Seconds between two looks for ended sessions past their retention (``bridge.retention``).
PURGE_EVERY = 3600.0
#: Seconds between two looks at the front end's jobs (sooner when a job comes or is cancelled).
JOBS_EVERY = 0.5
#: Seconds between two log lines saying the store is full.
FULL_SAID_EVERY = 60.0


class Loop:
    """The steps of the bridge's work, and the scheduler that runs them; ``start`` polls every
    cluster once first. ``working`` is the lock the enactor holds while it changes batch
    systems (a reconciliation waits for it); ``jobs_due`` is set when a job is submitted or
    cancelled; ``stats`` counts reconciliations and their repairs."""

    def __init__(
        self,
        *,
        config: Config,
        adapter: Adapter,
        store: Store,
        poller: Poller,
        rules: BatchRules,
        passes: PassRunner,
        enactor: Enactor,
        reconciler: Reconciler,
        catalogue: Catalogue,
        problems: Problems,
        job_runner: JobRunner,
        due: Due,
        working: AbstractContextManager[object],
        jobs_due: threading.Event,
        stats: Stats,
        reconcile_every: float = RECONCILE_EVERY,
    ) -> None:
        self.config = config
        self.adapter = adapter
        self.store = store
        self.poller = poller
        self.rules = rules
        self.passes = passes
        self.enactor = enactor
        self.reconciler = reconciler
        self.catalogue = catalogue
        self.problems = problems
        self.job_runner = job_runner
        self.due = due
        self.working = working
        self.stats = stats
        self.reconcile_every = reconcile_every
        self._rescheduling = threading.Lock()
        self._stopping = False
        self._enacting = False
        self._again = False
        self._jobs_due = jobs_due
        self._jobs_thread: threading.Thread | None = None
        self._full_said = -FULL_SAID_EVERY
        self._unchecked: set[str] = set()
        """Clusters whose rights were not checked yet (silent at start)."""
        self.scheduler = BackgroundScheduler(
            executors={
                "default": ThreadPoolExecutor(max(4, len(poller.clusters) + 2)),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )

    # -- the steps ----------------------------------------------------------------------------

    def check_rights(self, clusters: Iterable[str] | None = None) -> None:
        """Whether the batch systems let the bridge hold reservations (at start, before
        serving): an admin who must grant rights hears of it at once, not at the first
        session's refusal."""
        names = self.poller.clusters if clusters is None else clusters
        check_rights(self.adapter, self.problems, names, self.adapter.now())

    def poll(self, cluster: str) -> float:
        """Snapshot one cluster (and those read with it); returns the seconds until it should be
        polled again. A cluster that refused the bridge its rights is asked again now and then,
        so that health clears once an admin granted them, even with no session there to
        retry."""
        if self.poller.poll(cluster):
            self.due.trigger()
        group = self.poller.group(cluster)
        if not self.poller.status(cluster).failures:  # a batch system that answers
            self.rules.refresh(group)
            if any(name in self.catalogue.unread for name in group):
                self.catalogue.refresh()  # silent at start: its clusters' properties now
            unchecked = [name for name in group if name in self._unchecked]
            if unchecked:
                self._unchecked.difference_update(unchecked)
                self.check_rights(unchecked)
        if self.problems.due("rights", cluster, self.adapter.now()):
            self.check_rights([cluster])
        return self.poller.delay(cluster)

    def tick(self) -> bool:
        """A pass if one is due, then its placements; True if a pass ran. The scheduler runs
        the two apart (so that no pass waits on a batch system); tests and tools step through
        both at once."""
        ran = self.passes.plan()
        self.enactor.run()
        return ran

    def reconcile(self, clusters: Iterable[str] | None = None) -> dict[str, int]:
        """Compare the batch systems' reservations with the store and repair the difference
        (on ``clusters``, by default every one).

        It changes reservations, so it runs between two enactments, never during one; the
        bridge's lock is not held while the batch systems are asked."""
        with self.working:
            ours = self.reconciler.ours(self.poller.clusters if clusters is None else clusters)
            done = self.reconciler.reconcile(ours, self.adapter.now())
            self.stats.repairs.update(done)
            self.stats.reconciliations += 1
        if done:
            log.info("reconciliation: %s", ", ".join(f"{k} {v}" for k, v in done.items()))
            self.due.trigger()
        return done

    # -- the scheduler ------------------------------------------------------------------------

    def start(self) -> None:
        """Poll everything, check the bridge's rights and reconcile where the batch systems
        answered, run a first pass, then go on in the background. A batch system that did not
        answer is not asked again before serving (each question would wait for its timeout):
        its rights are checked at its first answer, its placeholders at the next
        reconciliation."""
        self.enactor.resume()
        groups = [group[0] for group in self.poller.groups]
        self._unchecked = set(self.poller.clusters)
        for cluster in groups:  # with the clusters read with it
            self.poll(cluster)
        answered = [name for name in self.poller.clusters if not self.poller.status(name).stale]
        self._unchecked.difference_update(answered)
        self.check_rights(answered)
        self.reconcile(answered)
        self.tick()
        interval = self.config.policy.interval
        for cluster in groups:
            delay = self.poller.delay(cluster)
            # Two instances: one due while the last still runs reaches the poller, which
            # counts it as an overrun and returns (APScheduler would log each one it skips).
            self.scheduler.add_job(
                self._poll,
                IntervalTrigger(seconds=delay),
                args=(cluster,),
                id=f"poll-{cluster}",
                max_instances=2,
            )
        self.scheduler.add_job(self._tick, IntervalTrigger(seconds=interval), id="policy")
        # Placements: started when a pass wants something (and every poll interval, for
        # retries coming due); one run at a time, which goes on while there is work.
        self.scheduler.add_job(
            self._wake_enactor, IntervalTrigger(seconds=self.config.placement.poll_interval)
        )
        self.scheduler.add_job(
            self._reconcile, IntervalTrigger(seconds=self.reconcile_every), id="reconcile"
        )
        # At once too, in the background: a daemon restarted more often than hourly still
        # deletes what its retention let go.
        self.scheduler.add_job(
            self._purge,
            IntervalTrigger(seconds=PURGE_EVERY),
            id="purge",
            next_run_time=datetime.now(UTC),
        )
        self.scheduler.start()
        # The front end's jobs on a thread of their own: a process's end is seen within half a
        # second, and a job submitted or cancelled at once, whatever the scheduler runs.
        self._jobs_thread = threading.Thread(target=self._jobs, name="jobs", daemon=True)
        self._jobs_thread.start()

    def stop(self) -> None:
        """Stop after the running jobs. ``shutdown(wait=True)`` holds the scheduler's job-store
        lock while it waits for them, and a polling job reschedules itself through that lock:
        jobs are told to stop touching the scheduler first, or the two would wait for each other."""
        with self._rescheduling:
            self._stopping = True
        self.enactor.stop()
        self._jobs_due.set()
        if self._jobs_thread is not None:
            self._jobs_thread.join()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def _poll(self, cluster: str) -> None:
        if self.poller.overran(cluster):
            return
        try:
            delay = self.poll(cluster)
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
            planned = self.passes.plan()
        except StoreFull as full:
            self._full(full)
            self.due.trigger()  # the same pass, as soon as the store takes it
            return
        except Exception:
            # A bug in one pass must not stop the next ones; the next pass starts afresh.
            log.exception("policy pass failed")
            self.due.trigger()
            return
        if planned and self.enactor.pending:
            self._wake_enactor()

    def _full(self, error: StoreFull) -> None:
        """A full disk is an admin's to free, not a bug: said once a minute, no traceback;
        the work is done again once the store takes it (nothing of it was written)."""
        now = time.monotonic()
        if now >= self._full_said + FULL_SAID_EVERY:
            self._full_said = now
            log.error("%s: the bridge goes on once space is freed", error)

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
        """Placements until none is left to do (one run at a time)."""
        while True:
            try:
                self.enactor.run()
            except StoreFull as full:
                self._full(full)
            except Exception:
                log.exception("carrying out the placements failed")
            with self._rescheduling:
                if not self._again or self._stopping:
                    self._enacting = False
                    return
                self._again = False

    def _reconcile(self) -> None:
        try:
            self.reconcile()
        except Exception:
            log.exception("reconciliation failed")
        try:
            self.catalogue.refresh()
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
                self.job_runner.run()
            except StoreFull as full:
                self._full(full)
            except Exception:
                log.exception("looking after the front end's jobs failed")

    def purge(self) -> int:
        """Delete the ended sessions kept longer than ``bridge.retention``, with their events,
        and give the space back to the file system; returns how many sessions went."""
        before = self.adapter.now() - self.config.bridge.retention
        removed = self.store.purge_finished(before)
        freed = self.store.reclaim()
        if removed or freed:
            log.info(
                "deleted %d sessions ended before %d (bridge.retention), %d pages given back",
                removed,
                before,
                freed,
            )
        return removed

    def _purge(self) -> None:
        try:
            self.purge()
        except Exception:
            log.exception("deleting ended sessions failed")
