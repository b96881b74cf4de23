"""The rows the store keeps: sessions, placeholders and jobs, validated before any write.

Apart from :mod:`coorm_bridge.store.store` (which only moves them in and out of SQLite) because
the daemon's other parts (the HTTP API, placement, reconciliation) build and read them too.
"""

from __future__ import annotations

import base64
import secrets
from enum import StrEnum
from typing import Annotated, Final, Literal, Self

from pydantic import Field, model_validator

from coorm_bridge.core.model import Duration, Filter, Frozen, Name, Request, Time, UserName
from coorm_bridge.core.states import AppState, check
from coorm_bridge.core.typed import Relation, RequestType


def new_session_id() -> str:
    """16 characters of lowercase base32 (80 random bits).

    Unlike ``token_urlsafe`` it never starts with '-' or '_', so it is a valid ``Name``, safe in
    URLs, file names and the batch systems' reservation names, whatever their case rules.
    """
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


#: Bits of a request's number in its application, and of its depth in a chain of announced
#: updates, in its place in the policy's order (:func:`priority`).
SEQ_BITS: Final = 20
#: The most requests an application sends in its life, and the longest chain of updates.
MAX_SEQ_IN_APP: Final = (1 << SEQ_BITS) - 1


def priority(order: int, seq: int = 0, depth: int = 0) -> int:
    """A place in the policy's order: the application's subscription order first (CooRM's
    priority), then, for an evolving application's requests, the order it sent them in, then
    for an announced update (``next``) its depth behind the request it follows: it takes over
    that request's hosts before anyone else may. A v1 session is ``priority(order)``."""
    return (order << (2 * SEQ_BITS)) | (seq << SEQ_BITS) | depth


class Typed(Frozen):
    """What a request of an evolving application (API v2) adds to its row.

    Each such request is a session row of its own (``parent``: its application's session), so
    that it is placed, held, started, shrunk to a ghost and released as a v1 session is, with the
    same placeholders, reconciliation and recovery after a crash."""

    type: RequestType = RequestType.NON_PREEMPTIBLE
    related_to: Name | None = None
    """The request (its id in the application) it is related to."""
    related_how: Relation | None = None
    priority: Annotated[int, Field(ge=0, strict=True)]
    """Its place in the policy's order (:func:`priority`)."""
    inside: Name | None = None
    """A spontaneous update: the started pre-allocation (request id) whose hosts it uses."""
    host_names: tuple[Name, ...] = ()
    """The hosts of a request started inside a pre-allocation, or of a preemptible one."""
    members: tuple[tuple[Name, Name], ...] = ()
    """Requests sent ``coalloc`` with this one, (request id, cluster) each: one row, one
    co-allocated request across the clusters, placed, started and ended together."""
    give_back: tuple[Name, ...] = ()
    """A preemptible request told to give these of its hosts back by ``preempt_by``."""
    preempt_by: Time | None = None


class SessionRow(Frozen):
    """One launcher session: its subscription and where it stands in the CooRM state machine.

    An evolving application's session (``evolving``) sends typed requests, each a row of its
    own with ``parent`` set and ``typed`` filled (named by the request's id)."""

    id: Name
    order: Annotated[int, Field(ge=1, strict=True)]
    """Subscription order (the policy's priority): strictly increasing, never reused."""
    owner: UserName
    name: Annotated[str, Field(max_length=256)] | None = None
    filter: Filter
    clusters: tuple[Name, ...]
    """The clusters the filter let through at subscription: what the view covers."""
    state: AppState = AppState.SUBMITTED
    request: Request | None = None
    estimated_start: Time | None = None
    started_at: Time | None = None
    done_at: Time | None = None
    alloc_end: Time | None = None
    created: Time
    updated: Time
    parent: Name | None = None
    evolving: bool = False
    typed: Typed | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # A row the policy cannot read would fail every pass after a restart: refuse it at write.
        check(self)
        if (self.parent is None) != (self.typed is None):
            raise ValueError("a request of an evolving application has its parent and its type")
        if self.parent is not None and self.evolving:
            raise ValueError("a request row is not an application's session")
        return self


class PlaceholderStatus(StrEnum):
    REQUESTED = "requested"
    """Asked of the batch system; not confirmed yet (after a crash: check, re-create or drop)."""
    HELD = "held"
    GHOST = "ghost"
    """Held for a finished application during ``fair_start``; may be handed over in place."""
    RELEASING = "releasing"
    """Deletion asked of the batch system; the row goes once it is confirmed."""


class PlaceholderRow(Frozen):
    """One reservation the bridge holds in a batch system for one session on one cluster.

    To hand a ghost's placeholder over, delete the old row and put the new one (same ``name``)
    inside one :meth:`Store.transaction`.
    """

    session_id: Name
    cluster: Name
    name: Name
    start: Time
    end: Time
    hosts: Annotated[int, Field(gt=0, strict=True)]
    host_names: tuple[Name, ...] = ()
    """Empty until the batch system chose the hosts, then exactly ``hosts`` distinct names."""
    status: PlaceholderStatus = PlaceholderStatus.REQUESTED

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.end <= self.start:
            raise ValueError(f"placeholder {self.name} must end ({self.end}) after its start")
        if self.host_names and len(set(self.host_names)) != self.hosts:
            raise ValueError(
                f"placeholder {self.name} holds {self.hosts} hosts: give that many distinct "
                f"host names or none, not {len(self.host_names)}"
            )
        return self


def new_job_id() -> str:
    """12 characters of lowercase base32 (60 random bits): a valid ``Name``, like session ids."""
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()[:12]


#: Where a job stands, as launchers see it.
JobStateName = Literal["pending", "running", "completed", "failed", "cancelled"]
#: How far the bridge got with a job; each step is written before the batch system or the
#: front end is asked for the next, so that a crash in between is known after a restart.
JobStep = Literal["new", "submitting", "queued", "launching", "running", "ended"]
#: The public state of each step but the last (whose state is the job's outcome).
STEP_STATES: Final[dict[str, str]] = {
    "new": "pending",
    "submitting": "pending",
    "queued": "pending",
    "launching": "running",
    "running": "running",
}
#: Why the bridge stopped a job's process: its owner or its session's end ("cancel"), or the
#: batch system that ended the job under it (its time limit, a host down).
JobStop = Literal["cancel", "batch"]


class JobCommand(Frozen):
    """What a job runs: an argument vector, the environment it gives, where, and its output."""

    argv: tuple[str, ...] = Field(min_length=1)
    environment: dict[str, str] = Field(default_factory=dict)
    workdir: str
    stdout: str
    stderr: str


class JobRow(Frozen):
    """One job a launcher submitted through the bridge's front end into a session's
    placeholder on one cluster, and how far it got.

    ``session_id`` is a v1 session, or the row of an evolving application's request (API v2),
    whose job runs on exactly its ``host_names``; ``reservation`` None: outside reservations
    (a preemptible request's)."""

    id: Name
    session_id: Name
    cluster: Name
    name: Name
    command: JobCommand
    walltime: Duration
    reservation: Name | None
    host_names: tuple[Name, ...] = Field(min_length=1)
    step: JobStep = "new"
    state: JobStateName = "pending"
    cancel: bool = False
    """Its owner asked for it to be cancelled (persisted before the answer)."""
    stop: JobStop | None = None
    """Why the bridge stopped its process, once it did."""
    batch_job: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """Its id in the batch system, once submitted."""
    pid: Annotated[int, Field(gt=1, strict=True)] | None = None
    since: Annotated[int, Field(ge=0, strict=True)] | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: Annotated[str, Field(max_length=2000)] | None = None
    created: Time
    started: Time | None = None
    ended: Time | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        expected = STEP_STATES.get(self.step)
        if expected is not None and self.state != expected:
            raise ValueError(f"job {self.id} at step {self.step} is {expected}, not {self.state}")
        if self.step == "ended" and self.state in ("pending", "running"):
            raise ValueError(f"job {self.id} ended: its state is final, not {self.state}")
        if self.step in ("queued", "launching", "running") and self.batch_job is None:
            raise ValueError(f"job {self.id} at step {self.step} has a batch job")
        if self.step == "running" and self.pid is None:
            raise ValueError(f"job {self.id} runs: it has a process")
        return self


class DrainRow(Frozen):
    """A cluster an admin drained: since when, by whom and why (``coorm-bridge drain``)."""

    cluster: Name
    since: Time
    by: UserName
    reason: Annotated[str, Field(max_length=500)] | None = None
