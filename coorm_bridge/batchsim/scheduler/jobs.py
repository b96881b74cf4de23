"""The mock scheduler's records: the public job spec and history, and its private bookkeeping.

They live apart from :mod:`.scheduler` because every part of the scheduler (the class, its
backfilling in :mod:`.backfilling`, its reservations and nodes in :mod:`.reservations`) reads
them. :mod:`.scheduler` re-exports the public ones (:class:`SchedulingPolicy`,
:class:`LocalJobSpec`, :class:`JobRecord`), the names to import; the underscored ones are shared
by those modules only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from coorm_bridge.core.batch import JobState, ReservationSpec
from coorm_bridge.core.model import Duration, Frozen, Name


class SchedulingPolicy(StrEnum):
    CONSERVATIVE = "conservative"
    EASY = "easy"


class LocalJobSpec(Frozen):
    """A job of the cluster's own users (or the bridge's, inside a reservation)."""

    id: Name
    user: Name
    hosts: Annotated[int, Field(gt=0, strict=True)]
    walltime: Duration
    """The bound users give: the scheduler plans with it and kills the job when it is reached."""
    runtime: Duration
    """What the job actually runs, unknown to the scheduler; above ``walltime`` it is killed."""
    reservation: Name | None = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's history: ``start`` and ``end`` are when it really held its hosts (None: never)."""

    id: str
    user: str
    hosts: int
    submit: int
    start: int | None
    end: int | None
    state: JobState
    host_names: tuple[str, ...]
    reservation: str | None


# Event kinds, in the order they are handled at one time: ends free hosts before anything uses
# them, arrivals are queued after the plan took in this time's changes, starts come last.
_END, _RESERVATION_END, _NODE, _RESERVATION_START, _ARRIVAL, _START = range(6)

_Event = tuple[int, int, int, str, int]  # time, kind, sequence, job or reservation name, token


class _Job:
    """Mutable bookkeeping of one submitted job."""

    __slots__ = (
        "bound",
        "end",
        "end_at",
        "fails",
        "mask",
        "names",
        "plan_end",
        "plan_mask",
        "plan_start",
        "position",
        "spec",
        "start",
        "state",
        "submit",
    )

    def __init__(self, spec: LocalJobSpec, submit: int) -> None:
        self.spec = spec
        self.submit = submit
        self.state = JobState.UNKNOWN  # until it arrives
        self.position = -1  # arrival order: the queue order
        self.start: int | None = None
        self.end: int | None = None
        self.bound = 0  # running: when it must end (walltime, or its reservation's end)
        self.end_at = 0  # running: when it will end (the scheduler itself does not look)
        self.fails = False
        self.mask = 0
        self.names: tuple[str, ...] = ()
        self.plan_start: int | None = None
        self.plan_end = 0
        self.plan_mask = 0

    @property
    def walltime(self) -> int:
        return self.spec.walltime


class _Reservation:
    __slots__ = ("end", "mask", "name", "start", "users", "version")

    def __init__(self, spec: ReservationSpec, mask: int) -> None:
        self.name = spec.name
        self.start = spec.start
        self.end = spec.end
        self.mask = mask
        self.users = spec.users
        self.version = 0  # bumped on update: events of older versions are stale
