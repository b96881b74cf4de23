"""The application state machine of the CooRM slides, as one table every state change goes through.

States: Submitted → RequestSent → Waiting → Started → FinishSent → Ghost → Finished, plus
Cancelled for a withdrawal and Failed for a session that cannot go on (the batch system will
never hold hosts for its owner, or handling it raised: it is set aside so the others go on).

The store refuses to write a change the table does not allow, and the policy checks its outcomes
against it, so a bug shows as a refused write rather than a session in a state nobody planned
for. What an application carries in each state (a request once it sent one, a start time once
started, a done time once finished) is checked here too, for the same reason: a row that breaks
it would fail every later pass after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from coorm_bridge.core.model import Request


class AppState(StrEnum):
    """Application states of the CooRM slides, plus Cancelled and Failed."""

    SUBMITTED = "submitted"
    REQUEST_SENT = "request_sent"
    WAITING = "waiting"
    STARTED = "started"
    FINISH_SENT = "finish_sent"
    GHOST = "ghost"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"


S = AppState

#: States the policy still places (they get a view and, with a request, an estimated start).
PLACED: Final = (S.SUBMITTED, S.REQUEST_SENT, S.WAITING)
#: States whose hosts are held (by the application itself, or by its ghost).
HOLDING: Final = (S.STARTED, S.FINISH_SENT, S.GHOST)
#: States no policy pass sees any more; kept for audit until purged.
FINAL: Final = (S.FINISHED, S.CANCELLED, S.FAILED)
#: States the policy still sees: waiting, running, or holding a ghost.
ACTIVE: Final = (*PLACED, *HOLDING)

#: Allowed changes, and why each exists. Staying in a state (a new estimate, a new request while
#: RequestSent) is always allowed and not listed.
TRANSITIONS: Final[Mapping[AppState, frozenset[AppState]]] = MappingProxyType(
    {
        # request; withdraw; set aside; an evolving application's session ends (API v2: its
        # requests are rows of their own, each through this table)
        S.SUBMITTED: frozenset({S.REQUEST_SENT, S.CANCELLED, S.FAILED, S.FINISHED}),
        # a pass placed it; withdraw; set aside
        S.REQUEST_SENT: frozenset({S.WAITING, S.CANCELLED, S.FAILED}),
        # a new request; its start came and its placeholders hold; withdraw; set aside
        S.WAITING: frozenset({S.REQUEST_SENT, S.STARTED, S.CANCELLED, S.FAILED}),
        # done; killed (allocation over without done, a host went down); set aside
        S.STARTED: frozenset({S.FINISH_SENT, S.FINISHED, S.FAILED}),
        # a pass made it a ghost; the ghost's time was already over; set aside
        S.FINISH_SENT: frozenset({S.GHOST, S.FINISHED, S.FAILED}),
        # fair_start expired; set aside
        S.GHOST: frozenset({S.FINISHED, S.FAILED}),
        S.FINISHED: frozenset(),
        S.CANCELLED: frozenset(),
        S.FAILED: frozenset(),
    }
)


class IllegalTransition(ValueError):
    """A state change the table does not allow: a bug in the caller, refused before any write."""


def transition(old: AppState, new: AppState) -> AppState:
    """``new`` if an application may go from ``old`` to it; raises :class:`IllegalTransition`."""
    if new is not old and new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none (final)"
        raise IllegalTransition(f"no transition from {old} to {new} (allowed: {allowed})")
    return new


class Carrier(Protocol):
    """What an application carries from state to state (a stored session, a policy entry)."""

    @property
    def state(self) -> AppState: ...
    @property
    def request(self) -> Request | None: ...
    @property
    def clusters(self) -> Sequence[str]: ...
    @property
    def started_at(self) -> int | None: ...
    @property
    def done_at(self) -> int | None: ...


def check(app: Carrier) -> None:
    """Raise ValueError naming every reason why ``app`` cannot be in its state."""
    found = problems(app.state, app.request, app.clusters, app.started_at, app.done_at)
    if found:
        raise ValueError("; ".join(found))


def problems(
    state: AppState,
    request: Request | None,
    clusters: Sequence[str],
    started_at: int | None,
    done_at: int | None,
) -> list[str]:
    """Why an application with these values cannot be in ``state`` (empty: it can)."""
    found: list[str] = []
    if request is not None:
        outside = sorted(set(request.clusters) - set(clusters))
        if outside:
            found.append(f"request names clusters outside the view: {', '.join(outside)}")
    if state in (S.REQUEST_SENT, S.WAITING, *HOLDING) and not request:
        found.append(f"an application in state {state} has a request")
    if state is S.SUBMITTED and request is not None:
        found.append("a submitted application has sent no request yet (REQUEST_SENT)")
    if done_at is not None and state in (*PLACED, S.STARTED):
        found.append(f"an application in state {state} has not sent done")
    if state in HOLDING and started_at is None:
        found.append(f"an application in state {state} has a start time")
    if state in (S.FINISH_SENT, S.GHOST) and (
        done_at is None or started_at is None or done_at < started_at
    ):
        found.append("a finished application has a done time, not before its start")
    return found
