"""Per-cluster polling: the latest snapshot of each batch system, its free hosts, and its health.

Each cluster is polled on its own (a silent batch system must not hold up the others). A failed
poll keeps the last good snapshot, so the policy goes on with a stale but sensible picture rather
than with none, marks the cluster stale (health "degraded"), and backs off: polling a batch system
that is overloaded every few seconds only makes it worse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.core.batch import AdapterError, ClusterSnapshot, Job, JobState
from coorm_bridge.core.occupancy import free_profile
from coorm_bridge.core.profile import Profile

log = logging.getLogger(__name__)

#: A silent cluster is polled at most this many times less often than a healthy one.
MAX_BACKOFF_FACTOR = 16
#: A poll that has run for this many poll intervals marks its clusters stale until it returns:
#: a controller that is stopped, or too busy to answer, shows in health within two polls
#: rather than after its commands' own timeouts.
OVERDUE = 2


@dataclass
class ClusterStatus:
    """What the bridge knows of one batch system."""

    snapshot: ClusterSnapshot | None = None
    free: Profile | None = None
    """Hosts the batch system leaves free (foreign load only, the bridge's placeholders not)."""
    accounted: frozenset[str] | None = None
    """The placeholders ``free`` left out (None: every one of the bridge's)."""
    last_ok: int | None = None
    failures: int = 0
    """Polls failed in a row (0: the last one answered)."""
    error: str | None = None
    overruns: int = 0
    """Polls that came due while the one before still ran (since the start)."""
    running_for: float | None = None
    """Seconds the poll under way has run, once that is :data:`OVERDUE` intervals or more
    (None: no poll that long), as :meth:`Poller.statuses` saw it."""

    @property
    def stale(self) -> bool:
        return self.failures > 0 or self.snapshot is None or self.running_for is not None


class Poller:
    """Fetches snapshots cluster by cluster and keeps what the policy and placement need."""

    def __init__(
        self,
        adapter: Adapter,
        clusters: list[str],
        prefix: str,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.prefix = prefix
        self.interval = interval
        self._status = {name: ClusterStatus() for name in clusters}
        self._group = {name: group for group in adapter.polled_together(clusters) for name in group}
        self._lock = threading.Lock()
        self._clock = clock
        self._running: dict[tuple[str, ...], float] = {}
        """The groups being polled now, and since when (``clock``)."""
        self._told: set[tuple[str, ...]] = set()
        """The running polls whose overrun was logged (once per poll)."""

    @property
    def clusters(self) -> list[str]:
        return list(self._status)

    @property
    def groups(self) -> list[tuple[str, ...]]:
        """The clusters polled together (one batch-system answer for all), each group once."""
        return list(dict.fromkeys(self._group[name] for name in self._status))

    def group(self, cluster: str) -> tuple[str, ...]:
        """``cluster`` and the clusters polled with it."""
        return self._group.get(cluster, (cluster,))

    def poll(self, cluster: str) -> bool:
        """Take a snapshot of ``cluster`` and of the clusters read with it (see
        :meth:`Adapter.polled_together`); True when free hosts changed (a pass is due).

        Never raises for the batch system's sake: a failure is counted and reported in health.
        A group that cannot be read at once is read cluster by cluster, so that a failure
        stays with the cluster it belongs to.
        """
        group = self._group.get(cluster, (cluster,))
        if self.overran(cluster):
            return False
        with self._lock:
            self._running[group] = self._clock()
        try:
            return self._poll_group(group)
        finally:
            with self._lock:
                self._running.pop(group, None)
                self._told.discard(group)

    def overran(self, cluster: str) -> bool:
        """Whether the poll of ``cluster``'s group is still under way; then this poll, due
        meanwhile, is counted as an overrun (logged once per poll) and not made."""
        group = self._group.get(cluster, (cluster,))
        with self._lock:
            since = self._running.get(group)
            if since is None:
                return False
            for name in group:
                self._status[name].overruns += 1
            told = group in self._told
            self._told.add(group)
        if not told:
            log.warning(
                "cluster %s: its poll has not answered for %.0f s; the next ones wait for it",
                ", ".join(group),
                self._clock() - since,
            )
        return True

    def _poll_group(self, group: tuple[str, ...]) -> bool:
        if len(group) > 1:
            try:
                shots = self.adapter.snapshot(list(group)).clusters
                changed = [self._took(name, shots[name]) for name in group]  # every one
                return any(changed)
            except (AdapterError, KeyError):
                pass
        changed = [self._poll_one(name) for name in group]
        return any(changed)

    def _poll_one(self, cluster: str) -> bool:
        try:
            shot = self.adapter.snapshot([cluster]).clusters[cluster]
        except (AdapterError, KeyError) as error:
            self._failed(cluster, error)
            return False
        return self._took(cluster, shot)

    def _took(self, cluster: str, shot: ClusterSnapshot) -> bool:
        accounted = self._status[cluster].accounted
        try:
            free = free_profile(shot, self.prefix, accounted)
        except (AdapterError, KeyError) as error:
            self._failed(cluster, error)
            return False
        with self._lock:
            status = self._status[cluster]
            if status.failures:
                log.warning("cluster %s answers again", cluster)
            old = status.free
            status.snapshot, status.free, status.accounted = shot, free, accounted
            status.last_ok, status.failures, status.error = shot.time, 0, None
        return old is None or old.truncated(shot.time) != free.truncated(shot.time)

    def _failed(self, cluster: str, error: Exception) -> None:
        with self._lock:
            status = self._status[cluster]
            status.failures += 1
            status.error = str(error) or type(error).__name__
            first = status.failures == 1
        if first:
            log.warning("cluster %s does not answer: %s", cluster, error)

    def delay(self, cluster: str) -> float:
        """Seconds until the next poll of ``cluster`` (and its group): doubled after each
        failure in a row of every cluster in it, capped."""
        group = self._group.get(cluster, (cluster,))
        failures = min(self._status[name].failures for name in group)
        return float(self.interval * min(2**failures, MAX_BACKOFF_FACTOR))

    def status(self, cluster: str) -> ClusterStatus:
        return self._status[cluster]

    def free(self, accounted: Mapping[str, frozenset[str]] | None = None) -> dict[str, Profile]:
        """Free hosts per cluster; a cluster never heard from has none (nothing can be promised
        on it until it answers). ``accounted``: per cluster, the bridge's placeholders that the
        policy subtracts itself; any other of its reservations (one being released, say) holds
        its hosts like foreign load until the batch system has let it go."""
        with self._lock:
            free: dict[str, Profile] = {}
            for name, status in self._status.items():
                if status.snapshot is None or status.free is None:
                    free[name] = Profile.constant(0)
                    continue
                wanted = None if accounted is None else accounted.get(name, frozenset())
                if wanted != status.accounted:
                    status.free = free_profile(status.snapshot, self.prefix, wanted)
                    status.accounted = wanted
                free[name] = status.free
            return free

    def jobs_in(self, cluster: str, reservation: str) -> list[str]:
        """The unfinished jobs inside a reservation, as the last snapshot shows them."""
        shot = self._status[cluster].snapshot
        if shot is None:
            return []
        return [j.id for j in shot.jobs if j.reservation == reservation and not j.state.finished]

    def running_on(self, cluster: str, hosts: Iterable[str], besides: str) -> Job | None:
        """A job running on one of ``hosts`` other than inside reservation ``besides``, as the
        last snapshot shows it (None: none, or no snapshot yet)."""
        shot = self._status[cluster].snapshot
        wanted = set(hosts)
        if shot is None:
            return None
        return next(
            (
                j
                for j in shot.jobs
                if j.state is JobState.RUNNING
                and j.reservation != besides
                and wanted.intersection(j.host_names)
            ),
            None,
        )

    def owners_jobs_on(self, cluster: str, owner: str, hosts: Iterable[str]) -> list[Job] | None:
        """``owner``'s unfinished jobs outside reservations on any of ``hosts``, as the last
        snapshot shows them (None: no snapshot yet): what a preemptible request runs, which the
        bridge lends to the views and cancels when the request is preempted."""
        shot = self._status[cluster].snapshot
        if shot is None:
            return None
        wanted = set(hosts)
        return [
            j
            for j in shot.jobs
            if j.user == owner
            and j.reservation is None
            and not j.state.finished
            and wanted.intersection(j.host_names)
        ]

    def stale(self) -> tuple[str, ...]:
        return tuple(name for name, status in self.statuses().items() if status.stale)

    def statuses(self) -> dict[str, ClusterStatus]:
        """A copy of every cluster's status, taken at one moment; a cluster whose poll has run
        for :data:`OVERDUE` intervals is stale, and its error says for how long."""
        with self._lock:
            now = self._clock()
            copies = {}
            for name, status in self._status.items():
                copy = replace(status)
                since = self._running.get(self._group.get(name, (name,)))
                if since is not None and now - since >= OVERDUE * self.interval:
                    copy.running_for = now - since
                    late = f"its poll has not answered for {now - since:.0f} s"
                    copy.error = late if status.error is None else f"{late}; before: {status.error}"
                copies[name] = copy
            return copies
