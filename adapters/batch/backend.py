"""What one way of talking to a batch system (its commands, a REST API, a C library) provides.

A back-end only builds requests and parses answers; :class:`.adapter.BatchAdapter` does the rest.
Every failure is one :class:`BatchFailure` whose :data:`ErrorKind` says how the adapter reacts,
so that no back-end has to know the adapter interface's error types.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeAlias, TypeVar

from coorm_bridge.core.batch import (
    AdapterError,
    Job,
    JobSpec,
    JobState,
    Node,
    Reservation,
    ReservationSpec,
)
from coorm_bridge.core.model import Submission
from coorm_bridge.core.rules import NO_RULES, ClusterRules

#: Why the batch system said no. "unreachable": no answer (Unavailable); "busy", "overlap",
#: "in_use", "invalid_time": a conflict the placement loop works around (Refused);
#: "invalid_user": it does not know a reservation's user (NotPermitted: that session ends);
#: "no_rights": it will not let the bridge's own account do it (LacksRights: an admin must
#: act, no session ends); "user_refused": it will not now for that session's user (a limit of
#: theirs: Refused, tried again, the bridge's rights are not in doubt); "misconfigured": a
#: setting names what the batch system does not have (Misconfigured: the daemon does not
#: start); "no_such_reservation" on a delete: already gone (success); the rest: AdapterError.
ErrorKind = Literal[
    "unreachable",
    "busy",
    "overlap",
    "in_use",
    "invalid_time",
    "invalid_user",
    "no_rights",
    "user_refused",
    "misconfigured",
    "no_such_reservation",
    "no_such_job",
    "other",
]


class BatchFailure(Exception):
    """A request the batch system did not carry out, with the kind of reason it gave, and
    when it said the same request could succeed (OAR does, for a refused reservation).

    ``key``, for a ``misconfigured`` failure: the setting at fault as the cluster's settings
    name it, a key of its ``[[adapter.cluster]]`` table (``partition``) or of the ``[adapter]``
    table (``host_property``); the adapter turns it into the key's place in the file."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        retry_after: int | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.key = key


@dataclass(frozen=True)
class Binding:
    """How one coorm cluster is addressed in its batch system.

    ``name`` is the cluster's name for launchers; each batch system subclasses this with what
    its back-ends need to reach it (Slurm: controller, ``-M`` cluster, partition).
    """

    name: str

    def submission(self) -> Submission | None:
        """How launchers submit jobs to this cluster (``ClusterInfo.submission``), as far as
        the binding knows; None by default."""
        return None


@dataclass(frozen=True)
class Hardware:
    """What the batch system knows of a cluster's hosts (the smallest host sets the guarantees)."""

    hosts: int
    cores_per_host: int
    ram_per_host_mib: int


B = TypeVar("B", bound=Binding)

#: What one cluster's read gives: nodes, jobs (running and pending) and reservations.
Read: TypeAlias = tuple[list[Node], list[Job], list[Reservation]]

#: Why one cluster could not be read: the batch system's failure, an answer its parsers could not
#: read (ValueError), or the runner's own verdict (say Unavailable when a command timed out).
ReadFailure: TypeAlias = BatchFailure | ValueError | AdapterError


class Backend(ABC, Generic[B]):
    """Reads and writes one way; raises :class:`BatchFailure` on any failure of the batch
    system, ValueError on a request it would not even send (an invalid name)."""

    @abstractmethod
    def hardware(self, binding: B) -> Hardware: ...

    @abstractmethod
    def read(self, binding: B, now: int) -> Read:
        """Nodes, jobs (running and pending, with predicted starts) and reservations."""

    def source(self, binding: B) -> Hashable:
        """Which answer of the batch system a cluster's read comes from: clusters with the same
        source are read by one call of :meth:`read_all` (the partitions of one Slurm controller).
        By default each cluster is read on its own."""
        return binding.name

    def read_all(self, bindings: Sequence[B], now: int) -> dict[str, Read | ReadFailure]:
        """:meth:`read` of several clusters, by name: each one's read, or what kept it from being
        read (the others are read all the same: one silent batch system fails only its own).

        Back-ends whose clusters share a batch system's answer (the partitions of one Slurm
        controller) override this to ask once; this default reads them one by one.
        """
        results: dict[str, Read | ReadFailure] = {}
        for binding in bindings:
            try:
                results[binding.name] = self.read(binding, now)
            except (BatchFailure, ValueError, AdapterError) as failure:
                results[binding.name] = failure
        return results

    @abstractmethod
    def reservation(self, binding: B, name: str) -> Reservation | None: ...

    @abstractmethod
    def create_reservation(self, binding: B, spec: ReservationSpec) -> None: ...

    @abstractmethod
    def update_reservation(self, binding: B, spec: ReservationSpec, *, begun: bool = False) -> None:
        """``begun``: the reservation has started (its start stays as it is)."""

    @abstractmethod
    def delete_reservation(self, binding: B, name: str) -> None: ...

    @abstractmethod
    def submit(self, binding: B, job: JobSpec) -> str: ...

    @abstractmethod
    def cancel(self, binding: B, job_id: str) -> None: ...

    @abstractmethod
    def job_state(self, binding: B, job_id: str) -> JobState: ...

    def rules(self, binding: B) -> ClusterRules:
        """The rules the batch system applies to its users' jobs on this cluster (see
        :meth:`.Adapter.rules`); by default none."""
        return NO_RULES

    def check_rights(self, binding: B) -> None:
        """Raise a ``no_rights`` failure when the batch system will not let this account hold
        reservations (see :meth:`.Adapter.check_rights`); by default nothing is checked."""

    def close(self) -> None:
        """Release connections."""
