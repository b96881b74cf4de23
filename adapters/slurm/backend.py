"""What one way of talking to Slurm (its commands, slurmrestd, pyslurm) must provide.

A back-end only builds requests and parses answers (psij-python's split): the generic
:class:`~coorm_bridge.adapters.slurm.adapter.SlurmAdapter` validates, verifies what Slurm made,
fills in missing start estimates and turns failures into the adapter interface's typed errors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from coorm_bridge.adapters.base import Job, JobSpec, JobState, Node, Reservation, ReservationSpec

#: Why Slurm said no. "unreachable": no answer (Unavailable); "busy", "overlap", "in_use",
#: "invalid_time": a conflict the placement loop works around (Refused); the rest: AdapterError.
FailureKind = Literal[
    "unreachable",
    "busy",
    "overlap",
    "in_use",
    "invalid_time",
    "invalid_user",
    "no_such_reservation",
    "no_such_job",
    "other",
]


class SlurmFailure(Exception):
    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Binding:
    """How one coorm cluster is addressed: its controller's environment (SLURM_CONF), its
    Slurm cluster name for ``-M`` and the partition it is limited to."""

    name: str
    cluster: str | None = None
    partition: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hardware:
    """What Slurm knows of a cluster's hosts (the smallest host sets the guarantees)."""

    hosts: int
    cores_per_host: int
    ram_per_host_mib: int


class Backend(ABC):
    """Reads and writes one kind of way; raises :class:`SlurmFailure` on any failure."""

    @abstractmethod
    def hardware(self, binding: Binding) -> Hardware: ...

    @abstractmethod
    def read(self, binding: Binding, now: int) -> tuple[list[Node], list[Job], list[Reservation]]:
        """Nodes, jobs (running and pending, with Slurm's predicted starts) and reservations."""

    @abstractmethod
    def reservation(self, binding: Binding, name: str) -> Reservation | None: ...

    @abstractmethod
    def create_reservation(self, binding: Binding, spec: ReservationSpec) -> None: ...

    @abstractmethod
    def update_reservation(
        self, binding: Binding, spec: ReservationSpec, *, begun: bool = False
    ) -> None:
        """``begun``: the reservation has started (its start stays as it is)."""

    @abstractmethod
    def delete_reservation(self, binding: Binding, name: str) -> None: ...

    @abstractmethod
    def submit(self, binding: Binding, job: JobSpec) -> str: ...

    @abstractmethod
    def cancel(self, binding: Binding, job_id: str) -> None: ...

    @abstractmethod
    def job_state(self, binding: Binding, job_id: str) -> JobState: ...

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""
