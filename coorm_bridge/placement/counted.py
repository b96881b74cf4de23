"""The reservation calls the bridge makes, counted: each one is work for a site's controller.

A request that changes moves the placeholders of the sessions behind it; on Slurm or OAR each move
is a call their controller serves. ``/metrics`` shows the count per call
(``coorm_reservation_calls_total``), and ``benchmarks/daemon_load.py`` prints it per application.
The placeholders' book is handed this adapter; everything else goes to the adapter unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.core.batch import (
    JobSpec,
    JobState,
    PlatformSnapshot,
    Reservation,
    ReservationHandle,
    ReservationSpec,
)
from coorm_bridge.core.model import ClusterInfo, Interconnect
from coorm_bridge.core.rules import ClusterRules


class CountedAdapter(Adapter):
    """``adapter``, with each create, update and delete of a reservation counted in ``calls``
    (a call the batch system refused counts too: it was made)."""

    def __init__(self, adapter: Adapter, calls: Counter[str]) -> None:
        self.adapter = adapter
        self.calls = calls

    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.calls["create"] += 1
        return self.adapter.create_reservation(cluster, spec)

    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        self.calls["update"] += 1
        return self.adapter.update_reservation(cluster, spec)

    def delete_reservation(self, cluster: str, name: str) -> None:
        self.calls["delete"] += 1
        self.adapter.delete_reservation(cluster, name)

    # -- the rest, as the adapter does it ----------------------------------------------------

    def clusters(self) -> list[ClusterInfo]:
        return self.adapter.clusters()

    def configured(self) -> list[str] | None:
        return self.adapter.configured()

    def interconnect(self) -> Interconnect:
        return self.adapter.interconnect()

    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        return self.adapter.snapshot(clusters)

    def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
        return self.adapter.polled_together(clusters)

    def reservation(self, cluster: str, name: str) -> Reservation | None:
        return self.adapter.reservation(cluster, name)

    def submit(self, cluster: str, job: JobSpec) -> str:
        return self.adapter.submit(cluster, job)

    def cancel(self, cluster: str, job_id: str) -> None:
        self.adapter.cancel(cluster, job_id)

    def job_state(self, cluster: str, job_id: str) -> JobState:
        return self.adapter.job_state(cluster, job_id)

    def front_end(self) -> FrontEnd | None:
        return self.adapter.front_end()

    def check_rights(self, cluster: str) -> None:
        self.adapter.check_rights(cluster)

    def rules(self, cluster: str) -> ClusterRules:
        return self.adapter.rules(cluster)

    def reservation_lead(self) -> int:
        return self.adapter.reservation_lead()

    def reservation_gap(self, cluster: str) -> int:
        return self.adapter.reservation_gap(cluster)

    def now(self) -> int:
        return self.adapter.now()

    def instant(self) -> float:
        return self.adapter.instant()

    def speedup(self) -> float | None:
        return self.adapter.speedup()

    def close(self) -> None:
        """The adapter is the service's to close, not this view of it."""
