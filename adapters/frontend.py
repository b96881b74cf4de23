"""A front end: jobs run as processes on the bridge's own host, for a batch system without one.

Real batch systems take jobs themselves: a launcher runs ``sbatch --reservation=...`` on the
cluster's front end (``ClusterInfo.submission`` says where). The simulated platform has no such
commands, so the bridge offers its own: the service (:mod:`coorm_bridge.service.jobs`) accepts a
job into a session's placeholder, submits it to the simulated batch system, and runs it through
the adapter's :class:`FrontEnd` as a process on this machine while the simulated job runs.

The interface is kept apart from :mod:`.base` because only the mock has one; the service drives
it and never starts a process itself. A process outlives the daemon that started it (as a job
outlives a batch system's client), so everything needed to find it again after a restart is in
:class:`Launched`, which the service keeps in its store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from coorm_bridge.core.model import Frozen

if TYPE_CHECKING:  # base imports this module for Adapter.front_end
    from coorm_bridge.core.batch import JobSpec


class ProcessSpec(Frozen):
    """What to run: an argument vector (never a shell string), its whole environment, its
    working folder and the files its output goes to (created, or truncated)."""

    argv: tuple[str, ...] = Field(min_length=1)
    environment: dict[str, str]
    workdir: str
    stdout: str
    stderr: str
    owner: str | None = None
    """The session's owner: a daemon running as root runs the process as this account (None:
    as the daemon's own)."""


class Launched(Frozen):
    """A started process, findable again after a restart of the daemon."""

    pid: Annotated[int, Field(gt=1, strict=True)]
    since: Annotated[int, Field(ge=0, strict=True)] | None = None
    """When the kernel started it (clock ticks since boot), so that a pid the system gave to
    another process after this one ended is never taken for it; None where unknown."""


class ProcessEnd(Frozen):
    """How a process ended: its exit status, or the signal that killed it, or neither when
    that is not known (then ``reason`` says why)."""

    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0


class FrontEnd(ABC):
    """Runs jobs as processes on this host; see the module docstring. Thread-safe."""

    grace: float
    """Seconds between the SIGTERM of :meth:`stop` and the SIGKILL that follows it."""

    @abstractmethod
    def refusal(self, owner: str) -> str | None:
        """Why jobs of ``owner`` may not run here (None: they may). A front end runs them as
        its own account, or, when it can (root), as the owner's: a site decides which it
        accepts."""

    @abstractmethod
    def submit(self, cluster: str, job: JobSpec) -> str:
        """Submit ``job`` to the batch system (into its reservation) as one whose process this
        front end runs: it ends when :meth:`ended` says so, or at its time limit. Returns its
        id in the batch system; raises as :meth:`.Adapter.submit` does."""

    @abstractmethod
    def launch(self, job: str, spec: ProcessSpec) -> Launched:
        """Start job ``job``'s process now (``job`` names it, once: never launched twice)."""

    @abstractmethod
    def recover(self, job: str) -> Launched | None:
        """The process of a job whose :meth:`launch` a crash cut short before the caller could
        record its answer, if it started (None: it did not, and never will)."""

    @abstractmethod
    def outcome(self, job: str, launched: Launched) -> ProcessEnd | None:
        """How the process ended, or None while it runs; never waits."""

    @abstractmethod
    def stop(self, job: str, launched: Launched, *, force: bool = False) -> None:
        """Ask the process to end: SIGTERM, then SIGKILL after :attr:`grace` seconds; with
        ``force``, SIGKILL now. Stopping one that already ended does nothing."""

    @abstractmethod
    def ended(self, cluster: str, batch_job: str, outcome: ProcessEnd) -> None:
        """Tell the batch system that its job ``batch_job`` on ``cluster`` ended with its
        process (completed when it exited 0, else failed); one it already ended is left as is."""
