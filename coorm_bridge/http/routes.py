"""The routes of HTTP API v1 (docs/design.md §5), mounted by :func:`.app.create_app`.

Handlers find the bridge (sessions), the job desk (jobs), the pass runner, the stats, the
notifier and the metrics registry on ``request.app.state``. Calls into the service run in worker
threads (they take the bridge's lock and touch SQLite); long polls wait on asyncio events woken
by the service's listeners, so a thousand idle launchers cost no thread each, and by the
server's stop, which must not wait for them (:meth:`~coorm_bridge.http.app.Notifier.stop`).
"""

from __future__ import annotations

import asyncio
import hmac
import pwd
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Depends, Query, Request
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
from coorm_bridge.protocol import (
    MAX_WAIT,
    AdminSession,
    CancelBody,
    DrainBody,
    DrainInfo,
    ErrorBody,
    EventPage,
    Health,
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
from coorm_bridge.service.bridge import Bridge, Listening
from coorm_bridge.service.jobs import JobDesk
from coorm_bridge.service.passes import PassRunner

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 409, 413, 422)
}

if TYPE_CHECKING:
    from coorm_bridge.http.app import Notifier

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


def caller(request: Request) -> str:
    """Who calls: the Unix socket peer's user, else the user of a configured bearer token."""
    peer = peer_of(request.scope)
    if peer is not None:
        return user_of_uid(peer.uid)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token:
        tokens: Mapping[str, str] = request.app.state.tokens()  # those in force now
        for known, user in tokens.items():
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                return user
        raise Unauthenticated("unknown bearer token")
    raise Unauthenticated("over TCP, send 'Authorization: Bearer <token>'")


def the_bridge(request: Request) -> Bridge:
    bridge: Bridge = request.app.state.bridge
    return bridge


def the_jobs(request: Request) -> JobDesk:
    jobs: JobDesk = request.app.state.jobs
    return jobs


def the_admin(request: Request) -> Admin:
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


@router.get("/sessions/{session_id}/events", response_model=EventPage)
async def events(  # noqa: PLR0917 - FastAPI passes what the signature declares
    request: Request,
    response: Response,
    bridge: TheBridge,
    session_id: str,
    user: User,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0.0,
    horizon: Annotated[int | None, Query(ge=0, le=MAX_TIME)] = None,
    watch: bool = False,
) -> Response:
    """Events numbered above ``after``; waits up to ``wait`` seconds for the first one, or
    until the server stops. ``horizon``: from this time on, no change of the view held after
    event ``after`` can alter the selector's choice; such changes are not sent until one that
    can comes (an older bridge ignores it and sends them all). ``watch``: the reader follows
    the session (a web page), it is not its launcher: its polls keep no session alive."""
    told = None if watch else horizon
    return await long_poll(
        request,
        response,
        session_id,
        wait,
        lambda: bridge.listen(user, session_id, after, horizon=told, watcher=watch),
    )


class Reads:
    """The reads of woken long polls, gathered: those woken in one turn of the loop (a pass
    that changed a thousand views wakes a thousand) are read by one call in a worker thread,
    not a thousand, each of which would cost a hop there and back."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []

    async def read(self, call: Callable[[], Any]) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        if not self.pending:  # after the other polls woken in this turn asked too
            loop.call_soon(lambda: loop.create_task(self._run()))
        self.pending.append((call, done))
        return await done

    async def _run(self) -> None:
        calls, self.pending = self.pending, []
        outcomes = await blocking(lambda: [_outcome(call) for call, _ in calls])
        for (_, done), (value, error) in zip(calls, outcomes, strict=True):
            if done.cancelled():
                continue
            if error is None:
                done.set_result(value)
            else:
                done.set_exception(error)


def _outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as error:  # handed to its own poll, which answers with it
        return None, error


async def long_poll(
    request: Request,
    response: Response,
    session_id: str,
    wait: float,
    listen: Callable[[], Listening],
) -> Response:
    """The events ``listen`` finds (those of ``session_id`` after some number), waiting up to
    ``wait`` seconds for the first one, or until the server stops: the long poll of both API
    versions. The answer is an :class:`EventPage` made of the events' JSON as stored.

    The store is read when the poll comes and each time the session's events change (the
    notifier wakes it), never on a timer: while it waits, the notifier's one timer tells the
    bridge every ``HEARD_EVERY`` seconds that its launcher is alive (in memory). A stop
    answers at once with nothing new: the launcher polls again and finds the bridge gone."""
    notifier = request.app.state.notifier
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    waiter = notifier.register(session_id)
    try:
        reads: Reads = request.app.state.reads
        listening: Listening = await reads.read(listen)
        found = listening.first
        if not found and not notifier.stopping and loop.time() < deadline:
            notifier.keep_alive(waiter, listening.alive)
            found = await _until_told(waiter, notifier, deadline, reads, listening)
        headers = {"connection": "close"} if notifier.stopping else None
        # The stored JSON of each event, validated when it was written: no parsing again.
        body = '{"events":[' + ",".join(found) + "]}"
        return Response(body, media_type="application/json", headers=headers)
    finally:
        notifier.unregister(session_id, waiter)


async def _until_told(
    waiter: asyncio.Event,
    notifier: Notifier,
    deadline: float,
    reads: Reads,
    listening: Listening,
) -> list[str]:
    """Wait for the session's events until ``deadline`` or the stop (then nothing): woken by
    the notifier, or by one timer at the deadline (no task, no timeout per wake-up)."""
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        waiter.set()

    timer = asyncio.get_running_loop().call_at(deadline, expire)
    try:
        while True:
            await waiter.wait()
            if expired or notifier.stopping:
                return []
            waiter.clear()  # before the read: a change committed during it wakes again
            found: list[str] = await reads.read(listening.read)
            if found:
                return found
    finally:
        timer.cancel()


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
