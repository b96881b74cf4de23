"""MockAdapter: the bridge's adapter over a simulated site (:class:`coorm_bridge.batchsim.Site`).

The site is the batch system: its schedulers, clock, faults and journal are in
:mod:`coorm_bridge.batchsim`. This adds what the bridge needs beyond a batch system's calls: the
:class:`~coorm_bridge.adapters.base.Adapter` interface over them, and the front end that runs
launchers' jobs as processes on this host (:mod:`.frontend`), since the simulated site has no
commands to submit with. Tests and experiments drive the site itself through :attr:`site` and
its :attr:`~coorm_bridge.batchsim.Site.controls`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.adapters.mock.frontend import ProcessFrontEnd
from coorm_bridge.batchsim import (
    Clock,
    Journal,
    LocalScheduler,
    MockRules,
    PlatformSpec,
    Site,
    WallClock,
)
from coorm_bridge.core.batch import (
    JobSpec,
    JobState,
    NodeState,
    PlatformSnapshot,
    ReservationHandle,
    ReservationSpec,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link
from coorm_bridge.core.rules import ClusterRules

__all__ = ["MockAdapter"]


class MockAdapter(Adapter):
    """The simulated site of ``spec`` on ``clock``, kept in ``journal`` if given (see
    :class:`~coorm_bridge.batchsim.Site`), as an adapter.

    With a ``jobs`` folder it is also the bridge's front end (:mod:`.frontend`): jobs submitted
    through the bridge run as processes on this host, their folders in ``jobs``, as
    ``run_jobs`` and ``private`` allow (see :class:`.ProcessFrontEnd`).
    """

    def __init__(
        self,
        spec: PlatformSpec,
        clock: Clock | None = None,
        *,
        journal: Journal | None = None,
        jobs: Path | None = None,
        run_jobs: bool | None = None,
        private: bool = False,
    ) -> None:
        self.site = Site(spec, clock, journal=journal)
        """The simulated batch system itself."""
        site = self.site
        self._front_end = (
            None
            if jobs is None
            else ProcessFrontEnd(
                jobs, run_jobs, submit=site.submit, end=site.end_job, private=private
            )
        )

    # -- the adapter interface ------------------------------------------------------------------

    def now(self) -> int:
        return self.site.now()

    def instant(self) -> float:
        return self.site.instant()

    def speedup(self) -> float | None:
        """The wall clock's speed-up; None on a virtual clock."""
        clock = self.site.clock
        return clock.speedup if isinstance(clock, WallClock) else None

    def clusters(self) -> list[ClusterInfo]:
        return self.site.clusters()

    def front_end(self) -> FrontEnd | None:
        return self._front_end

    def interconnect(self) -> Interconnect:
        return self.site.interconnect()

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        return self.site.snapshot(clusters)

    def rules(self, cluster: str) -> ClusterRules:
        """The cluster's ``[[cluster.rule]]`` tables of the platform file."""
        return MockRules(cluster=cluster, rules=self.site.spec.cluster(cluster).rules)

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        return self.site.create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        return self.site.update_reservation(cluster, spec)

    def delete_reservation(self, cluster: str, name: str) -> None:
        self.site.delete_reservation(cluster, name)

    def submit(self, cluster: str, job: JobSpec) -> str:
        return self.site.submit(cluster, job)

    def cancel(self, cluster: str, job_id: str) -> None:
        self.site.cancel(cluster, job_id)

    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self.site.job_state(cluster, job_id)

    def close(self) -> None:
        """Close the site's journal, if any (the site is kept in it)."""
        self.site.close()

    # -- the site, for the tests that hold only the adapter -----------------------------------
    # One line each onto the site and its controls, where they are implemented and documented.
    # New code calls ``adapter.site`` and ``adapter.site.controls`` directly.

    @property
    def clock(self) -> Clock:
        return self.site.clock

    @property
    def start(self) -> int:
        return self.site.start

    @property
    def schedulers(self) -> dict[str, LocalScheduler]:
        return self.site.schedulers

    def end_job(self, cluster: str, job_id: str, state: JobState) -> None:
        self.site.end_job(cluster, job_id, state)

    def run_until(self, t: int) -> None:
        self.site.controls.run_until(t)

    def next_event_time(self) -> int | None:
        return self.site.controls.next_event_time()

    def outage(self, cluster: str, start: int, end: int) -> None:
        self.site.controls.outage(cluster, start, end)

    def refuse_reservations(self, cluster: str, count: int = 1, reason: str = "") -> None:
        self.site.controls.refuse_reservations(cluster, count, reason)

    def set_node_state(
        self, cluster: str, host: str, state: NodeState, at: int | None = None
    ) -> None:
        self.site.controls.set_node_state(cluster, host, state, at)

    def forget_user(self, user: str) -> None:
        self.site.controls.forget_user(user)

    def upgrade(self, cluster: str, /, **properties: object) -> ClusterInfo:
        return self.site.controls.upgrade(cluster, **properties)

    def set_links(self, links: Iterable[Link]) -> None:
        self.site.controls.set_links(links)
