"""What every kind of deployment does: submit a cluster's job, read its state, cancel it.

One deployer per cluster, chosen by the submission the bridge describes for it
(``ClusterInfo.submission``: the mock, Slurm here or on a front-end, OAR). A deployer knows
nothing of sessions or views: it gets a :class:`~coorm_bridge.launchers.rundir.JobPlan` (the
hosts granted, the reservation, the command, its environment and files) and a time limit that
the caller computed from the start's end, which is a hard limit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from coorm_bridge.launchers.rundir import JobPlan

State = Literal["pending", "running", "completed", "failed", "cancelled", "unknown"]
FINISHED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "unknown"})


class DeployError(Exception):
    """A job could not be submitted, read or cancelled; the message names the cluster."""


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job as its batch system sees it; ``exit_code`` once it finished (when known)."""

    state: State
    exit_code: int | None = None
    detail: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.state == "completed" and self.exit_code in (0, None)


class SubmissionInfo(Protocol):
    """How the bridge says to submit on one cluster (``ClusterInfo.submission``)."""

    @property
    def kind(self) -> str: ...
    @property
    def partition(self) -> str | None: ...
    @property
    def cluster(self) -> str | None: ...
    @property
    def front_end(self) -> str | None: ...
    @property
    def slurm_conf(self) -> str | None: ...
    @property
    def cluster_property(self) -> str | None: ...
    @property
    def host_property(self) -> str | None: ...


class Deployer(ABC):
    """Submits, reads and cancels the jobs of one cluster."""

    kind: ClassVar[str]
    #: The batch system's time limits are whole multiples of this many seconds.
    unit: ClassVar[int] = 1
    #: Seconds the batch system may take from a submission to the job's start (its scheduler's
    #: next pass), left out of the time limit: a job started that late still ends with the
    #: allocation (see :meth:`~coorm_bridge.core.messages.StartEvent.time_limit`).
    slack: ClassVar[float] = 1

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster

    @abstractmethod
    def submit(self, plan: JobPlan, time_limit: int) -> str:
        """Submit ``plan`` into its reservation on its hosts; the job's id."""

    @abstractmethod
    def status(self, job: str) -> JobStatus:
        """The job's state now."""

    @abstractmethod
    def cancel(self, job: str) -> None:
        """Stop the job (a finished one is no error)."""

    def warm(self, hosts: Sequence[str], reservation: str | None) -> None:  # noqa: B027
        """Look up, at once, what the start's submission will ask of its hosts and reservation
        (their addresses, the reservation's id), so that it costs nothing when the jobs go in;
        by default nothing (most deployers need nothing)."""

    def refit(self, job: str, time_limit: int) -> bool:
        """Lower a pending job's time limit to ``time_limit`` seconds, so that it still fits the
        allocation when its batch system did not start it within :attr:`slack`; False when this
        batch system cannot (the job then waits, and the run fails at the allocation's end)."""
        return False

    def address(self, host: str) -> str:
        """Where the other jobs reach ``host`` (rendezvous); by default its name."""
        return host

    def close(self) -> None:  # noqa: B027 - most deployers hold nothing
        """Release connections."""
