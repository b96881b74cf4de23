"""The adapter interface: what the bridge needs from a batch system, and nothing more.

Mock, Slurm and OAR adapters implement :class:`Adapter`. The bridge reads a
:class:`PlatformSnapshot`, derives free-host profiles from it
(:mod:`coorm_bridge.placement.occupancy`) and
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
from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from coorm_bridge.adapters.frontend import FrontEnd
from coorm_bridge.core.model import (
    MAX_TIME,
    ClusterInfo,
    Duration,
    Frozen,
    HostCount,
    Interconnect,
    Name,
    PositiveCount,
    Time,
    UserName,
)


class AdapterError(Exception):
    """A permanent failure: bad configuration, a batch system that answers nonsense."""

    def __init__(self, message: str, *, cluster: str | None = None) -> None:
        super().__init__(message)
        self.cluster = cluster


class Unavailable(AdapterError):
    """The batch system did not answer (timeout, connection refused, daemon down): retry later."""


class Refused(AdapterError):
    """The batch system said no to a reservation or a job (busy hosts, overlap, too large).

    ``retry_after`` is the batch system's hint, when it gives one: the earliest time at which the
    same request could succeed.
    """

    def __init__(
        self, message: str, *, cluster: str | None = None, retry_after: int | None = None
    ) -> None:
        super().__init__(message, cluster=cluster)
        self.retry_after = retry_after


class Misconfigured(AdapterError):
    """A setting of the ``[adapter]`` table that the batch system shows to be wrong (a partition
    it does not have, a property no resource has): the admin's mistake, so the daemon refuses to
    start and names the file and the key, as for a mistake the file alone shows.

    ``key`` is the setting's place in the ``[adapter]`` table as the file writes it
    (``cluster.0.partition``, ``system.1.host_property``); ``reason`` says what is wrong and
    what the batch system has instead."""

    def __init__(self, reason: str, *, key: str, cluster: str | None = None) -> None:
        super().__init__(f"{cluster}: {reason}" if cluster else f"{key}: {reason}", cluster=cluster)
        self.key = key
        self.reason = reason

    def under(self, place: str) -> Misconfigured:
        """The same mistake, its key inside the table at ``place`` (a mixed site's system)."""
        return Misconfigured(self.reason, key=f"{place}.{self.key}", cluster=self.cluster)


class NotPermitted(AdapterError):
    """The batch system will never do this for this owner (a user it does not know, no right to
    the partition): retrying cannot help, so the session it is for ends, and only that one."""


class LacksRights(AdapterError):
    """The batch system will not let the bridge itself do this (Slurm: its account is not an
    operator): no session is at fault, so none ends; an admin must act, and ``reason`` (the
    batch system's words and the remedy, without the cluster's name) is what to tell them."""

    def __init__(self, message: str, *, cluster: str | None = None, reason: str = "") -> None:
        super().__init__(message, cluster=cluster)
        self.reason = reason or message


class NodeState(StrEnum):
    UP = "up"
    DOWN = "down"
    DRAINED = "drained"


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class Node(Frozen):
    name: Name
    state: NodeState = NodeState.UP


class Job(Frozen):
    """A job of the local batch system, as its scheduler sees it now.

    Running jobs have ``start``; pending ones have the scheduler's predicted ``start`` when it
    gives one (Slurm leaves many without), else None. ``end`` is the bound ``start + walltime``.
    """

    id: str = Field(min_length=1, max_length=64)
    user: str = ""
    state: JobState
    hosts: PositiveCount
    host_names: tuple[Name, ...] = ()
    walltime: Duration
    start: Time | None = None
    reservation: Name | None = None

    @model_validator(mode="after")
    def _running_has_start(self) -> Self:
        if self.state is JobState.RUNNING and self.start is None:
            raise ValueError("a running job has a start time")
        if self.start is not None and self.start + self.walltime > MAX_TIME:
            raise ValueError(f"job {self.id} would end after the year 9999")
        return self

    @property
    def end(self) -> int | None:
        return None if self.start is None else self.start + self.walltime


class Reservation(Frozen):
    """An advance reservation in the batch system: ours (a placeholder) or someone else's."""

    name: Name
    start: Time
    end: Time
    hosts: PositiveCount
    host_names: tuple[Name, ...] = ()
    users: tuple[UserName, ...] = ()
    launched: bool | None = None
    """Whether jobs submitted into it can start now. None: from its start on (Slurm, the
    mock); OAR launches a container only at a scheduler pass after its start."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end <= self.start:
            raise ValueError(f"reservation {self.name} ends ({self.end}) before it starts")
        return self

    def begun(self, now: int) -> bool:
        """Whether a job submitted into it at ``now`` can start at once."""
        return self.start <= now if self.launched is None else self.launched


class ClusterSnapshot(Frozen):
    """One cluster's state at ``time``; the bridge turns it into a free-host profile."""

    cluster: Name
    time: Time
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...] = ()
    reservations: tuple[Reservation, ...] = ()


class PlatformSnapshot(Frozen):
    time: Time
    clusters: dict[Name, ClusterSnapshot]


class ReservationSpec(Frozen):
    """What the bridge asks for: ``hosts`` anonymous hosts, or exactly ``host_names``."""

    name: Name
    start: Time
    end: Time
    hosts: HostCount = 0
    host_names: tuple[Name, ...] = ()
    users: tuple[UserName, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _sized(self) -> Self:
        if self.end <= self.start:
            raise ValueError(f"reservation {self.name} must end after it starts")
        if self.host_names and self.hosts not in (0, len(self.host_names)):
            raise ValueError("give a host count or a host list, or both agreeing")
        if not self.host_names and self.hosts == 0:
            raise ValueError("a reservation holds at least one host")
        return self

    @property
    def size(self) -> int:
        return len(self.host_names) or self.hosts

    def unmet_by(self, made: Reservation | ReservationHandle) -> str | None:
        """Why what the batch system made is not what was asked, None when it is.

        Batch systems do not always say no: Slurm 22.05 makes a smaller reservation than asked
        when a partition is short, and a start may be rounded. One check for everyone who asks
        (adapters reading back, co-allocation, placement): this name, exactly :attr:`size`
        distinct hosts (the named ones, when named), this start, and no earlier end.
        """
        if made.name != self.name:
            return f"a reservation named {made.name} instead of {self.name}"
        hosts = set(made.host_names)
        counted = made.hosts if isinstance(made, Reservation) else len(hosts)
        for number in (counted, len(hosts)):
            if number != self.size:
                return f"{number} hosts instead of {self.size}"
        if self.host_names and hosts != set(self.host_names):
            return f"hosts {sorted(hosts)} instead of {sorted(self.host_names)}"
        if made.start != self.start or made.end < self.end:
            return f"[{made.start}, {made.end}) instead of [{self.start}, {self.end})"
        return None


class ReservationHandle(Frozen):
    """A reservation as the batch system made it (hosts chosen, times possibly rounded)."""

    cluster: Name
    name: Name
    start: Time
    end: Time
    host_names: tuple[Name, ...]


class JobSpec(Frozen):
    """A job to submit into a reservation on behalf of ``user``: argument vector, never a shell."""

    name: Name
    user: UserName
    argv: tuple[str, ...] = Field(min_length=1)
    hosts: PositiveCount
    walltime: Duration
    reservation: Name | None = None
    workdir: str | None = None
    environment: dict[Name, str] = Field(default_factory=dict)


class Adapter(ABC):
    """One batch-system platform: one or more clusters behind the same kind of scheduler.

    The daemon calls its adapter from several threads (per-cluster polling, placement, HTTP
    handlers), so implementations must be thread-safe. Every method may raise
    :class:`Unavailable`; writes may raise :class:`Refused`.
    """

    @abstractmethod
    def clusters(self) -> list[ClusterInfo]:
        """The clusters this adapter serves (CINFO)."""

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

    def reservation_lead(self) -> int:
        """Seconds ahead of now a reservation must start to be made as asked. OAR validates a
        reservation at its scheduler's next pass and moves one that starts earlier to then, so
        the bridge holds from ``now + lead`` on every cluster of a request; the default is 0
        (Slurm and the mock make a reservation that starts now as asked)."""
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
