"""The routes the pages read besides API v1's own (a cluster's occupancy, the pass count to wait
on), and the pages themselves under ``/ui/`` (:mod:`coorm_bridge.web`).

The pages are static files: they hold no data and need no identity. What they show they read
from ``/v1/`` with the reader's bearer token (over TCP) or through ``coorm-bridge web`` (which
talks to the socket as the user who runs it), so a page shows exactly what that user's own
calls would.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from coorm_bridge.core.model import Name
from coorm_bridge.http.routes import ERRORS, TheBridge, User, blocking
from coorm_bridge.protocol import MAX_WAIT
from coorm_bridge.protocol_web import Occupancy, Passes
from coorm_bridge.service.stats import Stats

router = APIRouter(responses=ERRORS)


@router.get("/clusters/{cluster}/occupancy")
async def occupancy(bridge: TheBridge, cluster: Name, user: User) -> Occupancy:
    """The cluster's hosts, local jobs, reservations and the bridge's placeholders over time,
    from its last snapshot: what a Gantt chart draws."""
    found: Occupancy = await blocking(lambda: bridge.occupancy(user, cluster))
    return found


@router.get("/passes")
async def passes(
    request: Request,
    bridge: TheBridge,
    user: User,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0.0,
) -> Passes:
    """The pass count, once it is above ``after`` or ``wait`` seconds passed (or the server
    stops): a page waits here for the next pass, then reads again what it shows. The wait
    holds no thread."""
    stats: Stats = request.app.state.stats
    await request.app.state.notifier.until_pass(after, wait)
    return Passes(passes=stats.passes, time=bridge.now())
