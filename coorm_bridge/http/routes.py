"""The routes of HTTP API v1 (docs/design.md §5), mounted by :func:`.app.create_app`.

Handlers find the bridge (sessions), the job desk (jobs), the pass runner, the stats, the
notifier and the metrics registry on ``request.app.state``. Calls into the service run in worker
threads (they take the bridge's lock and touch SQLite); long polls wait on asyncio events woken
by the service's listeners, so a thousand idle launchers cost no thread each, and by the
server's stop, which must not wait for them (:meth:`~coorm_bridge.http.app.Notifier.stop`).
"""

from __future__ import annotations

import hmac
import pwd
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coorm_bridge.core.messages import CAP
from coorm_bridge.core.model import (
    MAX_SEQ,
    MAX_TIME,
    USER_NAME_PATTERN,
    ClusterInfo,
    Interconnect,
    UserName,
)
from coorm_bridge.core.model import Request as NodesRequest
from coorm_bridge.core.states import AppState
from coorm_bridge.http.errors import Forbidden, Unauthenticated
from coorm_bridge.http.server import peer_of
from coorm_bridge.http.waiting import EVENT_STREAM, event_stream, long_poll
from coorm_bridge.protocol import (
    MAX_WAIT,
    AdminSession,
    CancelBody,
    DrainBody,
    DrainInfo,
    ErrorBody,
    EventPage,
    Health,
    HorizonBody,
    JobAnswer,
    JobInfo,
    JobRequest,
    RequestAnswer,
    SessionInfo,
    StateAnswer,
    SubscribeBody,
    Subscribed,
)
from coorm_bridge.service.admin import Admin
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.errors import Invalid
from coorm_bridge.service.jobs import JobDesk
from coorm_bridge.service.passes import PassRunner

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 409, 413, 422)
}

if TYPE_CHECKING:
    pass

router = APIRouter(responses=ERRORS)
metrics_router = APIRouter()


def user_of_uid(uid: int) -> str:
    """The uid's name in the user database (``uid1234`` when it has none); :class:`Forbidden`
    when that name could not be given to a batch system (see ``UserName``)."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"
    if not USER_NAME_PATTERN.fullmatch(name):
        raise Forbidden(
            f"the user name of uid {uid}, {name!r}, cannot be given to the batch systems: "
            "ask the site to use a bearer token mapped to a usable name"
        )
    return name


#: Seconds a uid's name is kept: the user database is read at most this often per uid, in the
#: server's loop (a dependency run in a worker thread costs two thread hops per request).
NAMES_KEPT = 60.0
_names: dict[int, tuple[float, str]] = {}


def name_of_uid(uid: int) -> str:
    """:func:`user_of_uid`, kept ``NAMES_KEPT`` seconds (a refusal is not kept)."""
    now = time.monotonic()
    kept = _names.get(uid)
    if kept is not None and now - kept[0] < NAMES_KEPT:
        return kept[1]
    name = user_of_uid(uid)
    if len(_names) >= 4096:  # bounded: uids come from the peers that connect
        _names.clear()
    _names[uid] = (now, name)
    return name


async def caller(request: Request) -> str:
    """Who calls: the Unix socket peer's user, else the user of a configured bearer token.
    Run in the server's loop: it reads memory, and the user database once a minute."""
    peer = peer_of(request.scope)
    if peer is not None:
        return name_of_uid(peer.uid)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token:
        tokens: Mapping[str, str] = request.app.state.tokens()  # those in force now
        for known, user in tokens.items():
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                return user
        raise Unauthenticated("unknown bearer token")
    raise Unauthenticated("over TCP, send 'Authorization: Bearer <token>'")


async def the_bridge(request: Request) -> Bridge:
    bridge: Bridge = request.app.state.bridge
    return bridge


async def the_jobs(request: Request) -> JobDesk:
    jobs: JobDesk = request.app.state.jobs
    return jobs


async def the_admin(request: Request) -> Admin:
    admin: Admin = request.app.state.admin
    return admin


User = Annotated[str, Depends(caller)]
TheBridge = Annotated[Bridge, Depends(the_bridge)]
TheJobs = Annotated[JobDesk, Depends(the_jobs)]
TheAdmin = Annotated[Admin, Depends(the_admin)]


async def blocking(call: Callable[[], Any]) -> Any:
    return await to_thread.run_sync(call)


@router.post("/sessions", status_code=201)
async def subscribe(
    bridge: TheBridge,
    body: SubscribeBody,
    user: User,
    changes: Annotated[Literal["whole", "delta"], Query()] = "whole",
) -> Subscribed:
    """subscribe: returns the session id and the clusters its filter lets through. With
    ``changes=delta``, a profile that changes is sent from its first changed step on (a query
    parameter: an older bridge ignores it and sends whole profiles, which a launcher reads
    either way)."""
    deltas = changes == "delta"
    result: Subscribed = await blocking(
        lambda: bridge.subscribe(user, body.filter, body.name, deltas=deltas)
    )
    return result


@router.get("/clusters")
async def clusters(bridge: TheBridge, user: User) -> list[ClusterInfo]:
    return bridge.infos


@router.get("/interconnect")
async def interconnect(bridge: TheBridge, user: User) -> Interconnect:
    return bridge.interconnect


@router.get("/availability")
async def availability(bridge: TheBridge, user: User) -> list[CAP]:
    """Free hosts per cluster left after every session: what a new subscriber would see."""
    caps: list[CAP] = await blocking(bridge.availability)
    return caps


@router.get("/sessions")
async def sessions(bridge: TheBridge, user: User) -> list[SessionInfo]:
    """The caller's sessions (an admin's: everyone's), in priority order."""
    found: list[SessionInfo] = await blocking(lambda: bridge.sessions_of(user))
    return found


@router.get("/sessions/{session_id}")
async def session(bridge: TheBridge, session_id: str, user: User) -> SessionInfo:
    info: SessionInfo = await blocking(lambda: bridge.info(user, session_id))
    return info


async def after_pass(request: Request, response: Response, passes: int) -> None:
    """Returns once pass number ``passes + 1`` (the one that places what was just stored) ran,
    or after about two ``policy.interval`` at most: what a request's answer waits for."""
    # Passes call no batch system, so the next one comes within about policy.interval. The wait
    # holds no worker thread: a thousand launchers waiting here leave the threads to the others.
    notifier = request.app.state.notifier
    runner: PassRunner = request.app.state.passes
    if await notifier.until_pass(passes, 2 * request.app.state.interval + 10):
        # The loop's next pass may come after the stop (policy.interval is up to an hour):
        # this one runs it, so that the answer still carries the estimate.
        response.headers["connection"] = "close"
        await blocking(runner.plan)


@router.put("/sessions/{session_id}/request")
async def put_request(  # noqa: PLR0917 - FastAPI passes what the signature declares
    request: Request,
    response: Response,
    bridge: TheBridge,
    session_id: str,
    body: NodesRequest,
    user: User,
) -> RequestAnswer:
    """request: answered once the policy placed it (within about ``policy.interval``)."""
    passes = await blocking(lambda: bridge.put_request(user, session_id, body.nodes, body.duration))
    await after_pass(request, response, passes)
    answer: RequestAnswer = await blocking(lambda: bridge.answer(session_id))
    return answer


#: Seconds between two signs of life of the waiting long polls (given all at once by the
#: notifier): half the shortest session_timeout.
HEARD_EVERY = 5.0


@router.get(
    "/sessions/{session_id}/events",
    response_model=EventPage,
    responses={200: {"content": {EVENT_STREAM: {}}}},
)
async def events(  # noqa: PLR0917 - FastAPI passes what the signature declares
    request: Request,
    bridge: TheBridge,
    session_id: str,
    user: User,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0.0,
    horizon: Annotated[int | None, Query(ge=0, le=MAX_TIME)] = None,
    watch: bool = False,
    accept: Annotated[str, Header()] = "",
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Events numbered above ``after``; waits up to ``wait`` seconds for the first one, or
    until the server stops. ``horizon``: from this time on, no change of the view held after
    event ``after`` can alter the selector's choice; such changes are not sent until one that
    can comes (an older bridge ignores it and sends them all). ``watch``: the reader follows
    the session (a web page), it is not its launcher: its polls keep no session alive.

    With ``Accept: text/event-stream``, a stream of them instead (``wait`` is not used): each
    event as it comes, until the server stops; ``Last-Event-ID`` resumes after that event.
    Its launcher gives its horizons by ``PUT .../horizon``."""
    told = None if watch else horizon
    if EVENT_STREAM not in accept:
        return await long_poll(
            request,
            session_id,
            wait,
            lambda: bridge.listen(user, session_id, after, horizon=told, watcher=watch),
        )
    if last_event_id is not None:
        if (
            not (last_event_id.isascii() and last_event_id.isdigit())
            or int(last_event_id) > MAX_SEQ
        ):
            raise Invalid(f"Last-Event-ID must be an event number, got {last_event_id[:40]!r}")
        after = max(after, int(last_event_id))
    return await event_stream(
        request,
        session_id,
        lambda: bridge.listen(user, session_id, after, horizon=told, watcher=watch, stream=True),
    )


@router.put("/sessions/{session_id}/horizon", status_code=204)
async def put_horizon(bridge: TheBridge, session_id: str, body: HorizonBody, user: User) -> None:
    """A streaming launcher's horizon for the view after event ``body.after`` (see ``horizon``
    of the events' read): kept in memory, never waits."""
    await blocking(lambda: bridge.horizon(user, session_id, body.after, body.horizon))


@router.post("/sessions/{session_id}/done")
async def done(bridge: TheBridge, session_id: str, user: User) -> StateAnswer:
    """done: the application exited; its hosts stay held ``fair_start`` seconds."""
    row = await blocking(lambda: bridge.done(user, session_id))
    return StateAnswer(session=row.id, state=row.state)


@router.delete("/sessions/{session_id}")
async def withdraw(bridge: TheBridge, session_id: str, user: User) -> StateAnswer:
    """Withdraw a session that has not started."""
    row = await blocking(lambda: bridge.withdraw(user, session_id))
    return StateAnswer(session=row.id, state=row.state)


@router.post("/sessions/{session_id}/jobs", status_code=201)
async def submit_job(jobs: TheJobs, session_id: str, body: JobRequest, user: User) -> JobAnswer:
    """A job into the session's placeholder on a cluster, run by the bridge's front end (the
    mock platform): accepted and written down, run by the worker; the answer never waits."""
    answer: JobAnswer = await blocking(lambda: jobs.submit(user, session_id, body))
    return answer


@router.get("/sessions/{session_id}/jobs")
async def jobs(desk: TheJobs, session_id: str, user: User) -> list[JobInfo]:
    """The session's jobs through the front end, oldest first."""
    found: list[JobInfo] = await blocking(lambda: desk.jobs(user, session_id))
    return found


@router.delete("/sessions/{session_id}/jobs/{job_id}", status_code=202)
async def cancel_job(jobs: TheJobs, session_id: str, job_id: str, user: User) -> JobInfo:
    """Cancel a job: its process gets SIGTERM, then SIGKILL after a grace (done by the worker,
    so the answer is only that it is asked)."""
    info: JobInfo = await blocking(lambda: jobs.cancel(user, session_id, job_id))
    return info


@router.post("/sessions/{session_id}/cancel")
async def cancel(admin: TheAdmin, session_id: str, body: CancelBody, user: User) -> StateAnswer:
    """End a session by force (its owner, or an admin): its launcher gets the reason, its
    placeholders are released and its jobs cancelled soon after the answer."""
    row = await blocking(lambda: admin.cancel(user, session_id, body.reason))
    return StateAnswer(session=row.id, state=row.state)


@router.get("/admin/sessions")
async def admin_sessions(
    admin: TheAdmin,
    user: User,
    owner: Annotated[UserName | None, Query(alias="user")] = None,
    state: AppState | None = None,
) -> list[AdminSession]:
    """Every session with its placeholders (an admin's view; a user's own otherwise), in
    priority order, optionally of one user and in one state."""
    found: list[AdminSession] = await blocking(lambda: admin.sessions(user, owner, state))
    return found


@router.post("/admin/clusters/{cluster}/drain")
async def drain(
    admin: TheAdmin, cluster: str, user: User, body: DrainBody | None = None
) -> DrainInfo:
    """No new placeholder on the cluster until it is resumed (admins only)."""
    reason = None if body is None else body.reason
    info: DrainInfo = await blocking(lambda: admin.drain(user, cluster, reason))
    return info


@router.post("/admin/clusters/{cluster}/resume")
async def resume(admin: TheAdmin, cluster: str, user: User) -> DrainInfo:
    """Placeholders may be made on the cluster again (admins only)."""
    info: DrainInfo = await blocking(lambda: admin.resume(user, cluster))
    return info


@router.get("/health")
async def health(bridge: TheBridge) -> Health:
    """Liveness and each batch system's status; "degraded" while one does not answer."""
    answer: Health = await blocking(bridge.health)
    return answer


@metrics_router.get("/metrics", response_class=Response, include_in_schema=False)
async def metrics(request: Request) -> Response:
    registry = request.app.state.registry
    body = await blocking(lambda: generate_latest(registry))
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
