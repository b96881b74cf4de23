"""The scheduler's jobs: what is submitted, the history it keeps, and its entry for each job.

:class:`LocalJobSpec`, :class:`JobRecord` and :class:`SchedulingPolicy` are public (exported by
:mod:`coorm_bridge.batchsim`); :class:`JobEntry` is the scheduler's own bookkeeping of one job,
which its parts hand to each other: the queue files it, the planner plans it, the running jobs
end it. It lives here, apart from them all, because each of them reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from coorm_bridge.core.batch import Job, JobState
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
    host_names: tuple[Name, ...] = ()
    """Exactly these hosts (as Slurm's ``--nodelist``), ``hosts`` of them; empty: any. The job
    starts only when all of them are free of other jobs, and, outside a reservation, of every
    reservation over its walltime (:meth:`.Admission.check_job` refuses names it cannot use)."""


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


class JobEntry:
    """Mutable bookkeeping of one submitted job: its state, queue position, plan and run."""

    __slots__ = (
        "bound",
        "end",
        "end_at",
        "fails",
        "mask",
        "named",
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
        self.named = 0  # the hosts it names (spec.host_names), as a mask; 0: any
        self.names: tuple[str, ...] = ()
        self.plan_start: int | None = None
        self.plan_end = 0
        self.plan_mask = 0

    @property
    def walltime(self) -> int:
        return self.spec.walltime

    def record(self) -> JobRecord:
        """Its history so far."""
        spec = self.spec
        return JobRecord(
            id=spec.id,
            user=spec.user,
            hosts=spec.hosts,
            submit=self.submit,
            start=self.start,
            end=self.end,
            state=self.state,
            host_names=self.names,
            reservation=spec.reservation,
        )

    def view(self) -> Job:
        """A pending or running job as a snapshot shows it: a running one until its bound, a
        pending one at its planned start, if any."""
        spec = self.spec
        if self.state is JobState.RUNNING:
            assert self.start is not None
            return Job(
                id=spec.id,
                user=spec.user,
                state=JobState.RUNNING,
                hosts=spec.hosts,
                host_names=self.names,
                walltime=self.bound - self.start,
                start=self.start,
                reservation=spec.reservation,
            )
        start = self.plan_start
        return Job(
            id=spec.id,
            user=spec.user,
            state=JobState.PENDING,
            hosts=spec.hosts,
            host_names=spec.host_names,  # asked for: where it will run (squeue's ReqNodeList)
            walltime=spec.walltime if start is None else self.plan_end - start,
            start=start,
            reservation=spec.reservation,
        )
