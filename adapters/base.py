"""The adapter interface: what the bridge needs from a batch system, and nothing more.

Mock, Slurm and OAR adapters implement :class:`Adapter`. The bridge reads a
:class:`PlatformSnapshot`, derives free-host profiles from it
(:mod:`coorm_bridge.core.occupancy`) and
holds placeholder reservations through ``create/update/delete_reservation``. Failures are typed so
that the bridge reacts the right way: :class:`Unavailable` is retried with back-off while views are
marked stale, :class:`Refused` makes the placement loop recompute, :class:`Misconfigured` names
the setting the batch system shows to be wrong, a plain :class:`AdapterError` is a configuration
or programming problem that needs an admin.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.core.batch import (
    AdapterError,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    LacksRights,
    Misconfigured,
    Node,
    NodeState,
    NotPermitted,
    PlatformSnapshot,
    Refused,
    Reservation,
    ReservationHandle,
    ReservationSpec,
    Unavailable,
)
from coorm_bridge.core.model import (
    ClusterInfo,
    Interconnect,
)
from coorm_bridge.core.rules import NO_RULES, Bound, ClusterRules, UserRules


class Adapter(ABC):
    """One batch-system platform: one or more clusters behind the same kind of scheduler.

    The daemon calls its adapter from several threads (per-cluster polling, placement, HTTP
    handlers), so implementations must be thread-safe. Every method may raise
    :class:`Unavailable`; writes may raise :class:`Refused`.
    """

    @abstractmethod
    def clusters(self) -> list[ClusterInfo]:
        """The clusters this adapter serves (CINFO)."""

    def configured(self) -> list[str] | None:
        """The clusters' names as the configuration gives them, known without asking the batch
        system; None (the default) when only :meth:`clusters` can say. A daemon whose batch
        system does not answer at start (:class:`Unavailable` from :meth:`clusters`) starts with
        these, their properties as last read, and reads them again once it answers."""
        return None

    @abstractmethod
    def interconnect(self) -> Interconnect:
        """Latency and bandwidth between its clusters (ICINFO)."""

    @abstractmethod
    def snapshot(self, clusters: list[str] | None = None) -> PlatformSnapshot:
        """Nodes, jobs, predicted starts and reservations, now (all clusters when None)."""

    def polled_together(self, clusters: Sequence[str]) -> list[tuple[str, ...]]:
        """``clusters`` in groups that one :meth:`snapshot` reads at the price of one (the
        partitions of one Slurm controller): the bridge polls a group at once. By default each
        cluster is polled on its own, so that a silent one never holds up the others."""
        return [(cluster,) for cluster in clusters]

    @abstractmethod
    def create_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        """Hold hosts; all or nothing (a smaller reservation than asked is deleted and Refused)."""

    def reservation(self, cluster: str, name: str) -> Reservation | None:
        """One reservation as the batch system holds it now (None: it has none of that name).

        The bridge reads a placeholder back before it tells a launcher its hosts, since a batch
        system may have swapped a host that went down. The default reads a whole snapshot;
        adapters that can ask for one reservation should."""
        shot = self.snapshot([cluster]).clusters[cluster]
        return next((r for r in shot.reservations if r.name == name), None)

    @abstractmethod
    def update_reservation(self, cluster: str, spec: ReservationSpec) -> ReservationHandle:
        """Change the times, size or users of the reservation named ``spec.name`` in place."""

    @abstractmethod
    def delete_reservation(self, cluster: str, name: str) -> None:
        """Release a reservation; deleting one that is already gone is not an error."""

    @abstractmethod
    def submit(self, cluster: str, job: JobSpec) -> str:
        """Submit a job (into ``job.reservation`` when set); returns the batch system's job id."""

    @abstractmethod
    def cancel(self, cluster: str, job_id: str) -> None:
        """Cancel a job; cancelling a finished job is not an error."""

    @abstractmethod
    def job_state(self, cluster: str, job_id: str) -> JobState:
        """Where a submitted job stands (UNKNOWN once the batch system has forgotten it)."""

    def front_end(self) -> FrontEnd | None:
        """The bridge's own front end, for a batch system that takes no jobs itself (the mock):
        jobs submitted through the bridge run as processes on its host. None (the default):
        launchers submit with the batch system's commands (``ClusterInfo.submission``)."""
        return None

    def check_rights(self, cluster: str) -> None:  # noqa: B027 - optional hook
        """Raise :class:`LacksRights` when the bridge may not hold reservations on ``cluster``,
        :class:`Unavailable` when that cannot be told now. Asked at start (so that an admin
        hears of it before any session fails) and while it lacks them; the default (batch
        systems that check nothing, the mock) says nothing."""

    def rules(self, cluster: str) -> ClusterRules:
        """The rules ``cluster``'s batch system applies to its users' jobs (limits, access
        lists), read now: the bridge asks with the poll, on the poller's thread, keeps the
        answer, and checks each user's requests against it (placeholders are held by the
        bridge's account, so the batch system would not apply them itself). May raise
        :class:`Unavailable`. The default: a batch system that sets none, or that applies its
        rules itself when the placeholder is made as the user (OAR's admission rules)."""
        return NO_RULES

    def reservation_lead(self) -> int:
        """Seconds ahead of now a reservation must start to be made as asked. OAR validates a
        reservation at its scheduler's next pass and moves one that starts earlier to then, so
        the bridge holds from ``now + lead`` on every cluster of a request; the default is 0
        (Slurm and the mock make a reservation that starts now as asked)."""
        return 0

    def reservation_gap(self, cluster: str) -> int:
        """Seconds the batch system keeps free after a reservation on its hosts before another
        may begin there: where a request's announced update (API v2, ``next``) can be held at
        the earliest. OAR keeps its scheduler's security time after every job; the default is
        0 (Slurm and the mock take one reservation right after another)."""
        return 0

    def now(self) -> int:
        """The batch systems' current time in Unix seconds.

        The bridge takes all its times from here so that a simulated platform (whose clock may
        run faster than real time or be virtual) and the bridge agree; real batch systems run on
        the host's clock, hence the default.
        """
        return int(time.time())

    def instant(self) -> float:
        """:meth:`now` to the fraction of a second: for a time the bridge must not round down,
        such as a ``done`` that starts a ghost (a ghost from the whole second before would end
        up to a second early, and a local job could start on its hosts then). The host's
        clock; an adapter whose :meth:`now` keeps another time gets that whole second."""
        exact = time.time()
        whole = self.now()
        return exact if math.floor(exact) == whole else float(whole)

    def speedup(self) -> float | None:
        """Seconds of :meth:`now` per second of the host's clock: 1.0 for batch systems, which
        run on it (the default); a simulated platform's speed-up on an accelerated clock; None
        on a virtual clock, which moves only when told. Batch systems that share one bridge
        (``kind = "mixed"``) must all run at 1.0, on the host's time."""
        return 1.0

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing
        """Release connections; the default holds none."""


#: The plug-in interface: the adapter and the vocabulary it is written in (defined in
#: :mod:`coorm_bridge.core.batch`, which the bridge's own modules import).
__all__ = [
    "Adapter",
    "AdapterError",
    "Bound",
    "ClusterRules",
    "ClusterSnapshot",
    "Job",
    "JobSpec",
    "JobState",
    "LacksRights",
    "Misconfigured",
    "Node",
    "NodeState",
    "NotPermitted",
    "PlatformSnapshot",
    "Refused",
    "Reservation",
    "ReservationHandle",
    "ReservationSpec",
    "Unavailable",
    "UserRules",
]
