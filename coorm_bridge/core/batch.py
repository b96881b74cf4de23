"""The batch vocabulary: what the bridge and batch systems say to each other, as values.

Nodes and their states, jobs, reservations, snapshots of a cluster, what the bridge asks for
(a reservation, a job), and the typed failures that tell the bridge how to react:
:class:`Unavailable` is retried with back-off while views are marked stale, :class:`Refused`
makes the placement loop recompute, :class:`Misconfigured` names the setting the batch system
shows to be wrong, a plain :class:`AdapterError` is a configuration or programming problem that
needs an admin. The store, placement, the service, the simulator and the deployers all speak it;
the adapter interface (:mod:`coorm_bridge.adapters.base`) is written in it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import (
    MAX_TIME,
    Duration,
    Frozen,
    HostCount,
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
    """A job to submit into a reservation on behalf of ``user``: argument vector, never a shell.

    ``host_names``: exactly these hosts (as Slurm's ``--nodelist``), when a job must run on a
    part of what its owner was given (a request of an evolving application, one task per
    host); only the mock's front end asks for them. Empty: any ``hosts`` the batch system
    chooses."""

    name: Name
    user: UserName
    argv: tuple[str, ...] = Field(min_length=1)
    hosts: PositiveCount
    walltime: Duration
    reservation: Name | None = None
    workdir: str | None = None
    environment: dict[Name, str] = Field(default_factory=dict)
    host_names: tuple[Name, ...] = ()

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.host_names and len(self.host_names) != self.hosts:
            raise ValueError(
                f"job {self.name} names {len(self.host_names)} hosts but asks for {self.hosts}"
            )
        if len(set(self.host_names)) != len(self.host_names):
            raise ValueError(f"job {self.name} names a host twice")
        return self
