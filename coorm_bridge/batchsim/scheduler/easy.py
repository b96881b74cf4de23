"""EASY backfilling: only the first pending job of each partition has a planned start.

The head of the queue (of the cluster outside reservations, and of each reservation) is planned
and protected: it starts at its planned start at the latest. Any other job starts now if it fits
now around every plan, heads' included, and waits otherwise, without a prediction. Cheaper than
conservative backfilling and more aggressive: a job behind the head may be delayed by one that
arrived after it.
"""

from __future__ import annotations

from coorm_bridge.batchsim.scheduler.hostplan import lowest_bits
from coorm_bridge.batchsim.scheduler.jobs import JobEntry
from coorm_bridge.batchsim.scheduler.planner import Planner
from coorm_bridge.core.batch import JobState


class EasyPlanner(Planner):
    """:class:`.Planner` for :attr:`SchedulingPolicy.EASY`; see the module docstring."""

    def _admit(self, job: JobEntry) -> None:
        """Nothing yet: the pass plans it if it is a head, backfills it if it fits."""

    def _replan(self) -> None:
        """Only heads have plans: compress them; those that lost theirs are placed by the pass."""
        if self._freed:
            for head in self._queue.heads().values():
                if head.plan_start is not None:
                    self._compress(head)
        self._full_pass = True

    def _start_due(self, queued: list[JobEntry]) -> None:
        """The pass, over every pending job after a change, else over the arrivals only."""
        self._pass(None if self._full_pass else queued)

    def _pass(self, candidates: list[JobEntry] | None) -> None:
        """Start heads due now (planning each next head), then backfill: any other job that fits
        now without touching a head's planned hosts starts now.
        """
        now = self._calendar.now
        queue = self._queue
        heads = queue.heads()
        for part, first in list(heads.items()):
            head: JobEntry | None = first
            while head is not None:
                if head.plan_start is None:
                    self._place(head, now, None)
                if head.plan_start != now:
                    break
                self._start(head, head.plan_mask, head.plan_end)
                head = queue.first_in(part)
            if head is None:
                del heads[part]
            else:
                heads[part] = head
        protected = {id(job) for job in heads.values()}
        jobs = list(queue.values()) if candidates is None else candidates
        free = self._plan.free_at(now)
        for job in jobs:
            if job.state is not JobState.PENDING or id(job) in protected:
                continue
            fits = job.spec.reservation is not None or job.spec.hosts <= free
            if fits and self._backfill(job):
                free = self._plan.free_at(now)

    def _backfill(self, job: JobEntry) -> bool:
        """Start ``job`` now if it fits now around every plan (True if it started)."""
        now = self._calendar.now
        found = self._earliest(job, now, now + 1)
        if found is None:
            return False
        start, end, free = found  # start is now: the search was limited to [now, now + 1)
        mask = lowest_bits(free, job.spec.hosts)
        self._plan.hold(mask, start, end)
        self._start(job, mask, end)
        return True
