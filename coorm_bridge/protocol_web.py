"""What the pages of ``coorm-bridge web`` and ``status --watch`` read (HTTP API v1, docs/design.md
§5): a cluster's occupancy over time, and the count of passes to wait on.

The occupancy is drawn by the browser, 10,000 bars on 1,000 hosts at a time: a bar names its
hosts by their row in ``hosts`` (a number, not a name), which keeps the answer small and the
drawing a loop over numbers.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from coorm_bridge.core.batch import NodeState
from coorm_bridge.core.model import Frozen, Name, Time, UserName
from coorm_bridge.core.states import AppState

#: Rows and bars one answer may carry: a site's largest cluster, with room.
MAX_ROWS = 100_000
MAX_BARS = 1_000_000

BarKind = Literal["running", "pending", "placeholder", "ghost", "reservation"]


class Host(Frozen):
    name: Name
    state: NodeState


class Bar(Frozen):
    """One thing that holds hosts over a time: a local job (running, or pending at its
    predicted start), one of the bridge's placeholders (a ghost once its application is done),
    or another reservation of the batch system."""

    kind: BarKind
    id: Annotated[str, Field(min_length=1, max_length=255)]
    """The job's id, or the reservation's name in the batch system."""
    start: Time
    end: Time
    hosts: Annotated[int, Field(ge=0)]
    rows: tuple[Annotated[int, Field(ge=0, lt=MAX_ROWS)], ...] = ()
    """The hosts it holds, as rows of :attr:`Occupancy.hosts` (empty: not chosen yet)."""
    user: UserName | None = None
    """A local job's owner, shown to that user and to admins only."""
    session: Name | None = None
    """A placeholder's session, shown to its owner and to admins only (else None)."""
    owner: UserName | None = None
    state: AppState | None = None
    """A placeholder's session state, shown with the session."""
    inside: str | None = None
    """A job run inside a reservation: the reservation's name."""


class Occupancy(Frozen):
    """``GET /v1/clusters/{cluster}/occupancy``: the cluster as its last snapshot and the
    bridge's store show it, for a Gantt chart."""

    cluster: Name
    time: Time
    """The bridge's clock now."""
    snapshot: Time | None
    """When the batch system was read (None: not yet since the bridge started)."""
    stale: bool
    horizon: Time
    """The placement horizon: applications starting before it hold placeholders."""
    hosts: tuple[Host, ...] = ()
    bars: tuple[Bar, ...] = ()
    unplanned: Annotated[int, Field(ge=0)] = 0
    """Pending jobs the batch system gives no predicted start (not drawn)."""
    passes: Annotated[int, Field(ge=0)]
    """The bridge's pass count when this was read: wait on ``GET /v1/passes?after=`` for the
    next change."""


class Passes(Frozen):
    """``GET /v1/passes``: how many passes the bridge ran since it started, and its clock."""

    passes: Annotated[int, Field(ge=0)]
    time: Time
