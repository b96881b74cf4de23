"""The routes of HTTP API v2 (evolving applications, CooRMv2), mounted by
:func:`.app.create_app` under ``/v2`` beside v1's.

An evolving application's session sends many typed requests (:class:`TypedRequest`), ends them
one by one, and reads both of its views; its events come through the same long poll as v1's,
each about one request. The service behind it is ``bridge.evolving``; these handlers only
translate, as v1's do: same identity, same body limit, same error mapping (a v1 session given
here is the service's 409), calls into the service in worker threads, and a new request
answered once the pass that placed it ran (:func:`.routes.after_pass`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response

from coorm_bridge.core.typed import TypedRequest
from coorm_bridge.http import routes
from coorm_bridge.http.routes import ERRORS, User, after_pass, blocking
from coorm_bridge.protocol import (
    EventPage,
    JobAnswer,
    JobInfo,
    StateAnswer,
    SubscribeBody,
    Subscribed,
)
from coorm_bridge.protocol_v2 import DoneBody, EvolvingInfo, RequestInfo, RequestJobRequest
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.evolving import Evolving
from coorm_bridge.service.request_jobs import RequestJobs

TAG = "v2: evolving applications"

router = APIRouter(responses=ERRORS, tags=[TAG])


async def the_bridge(request: Request) -> Bridge:
    bridge: Bridge = request.app.state.bridge
    return bridge


async def the_evolving(request: Request) -> Evolving:
    """``bridge.evolving``, which the composition root sets (a bridge assembled without it
    answers v2 with a 404, as a daemon older than v2 would)."""
    evolving: Evolving | None = getattr(request.app.state.bridge, "evolving", None)
    if evolving is None:
        raise HTTPException(404, "this bridge serves no evolving applications (API v2)")
    return evolving


TheBridge = Annotated[Bridge, Depends(the_bridge)]
TheEvolving = Annotated[Evolving, Depends(the_evolving)]


@router.post("/sessions", status_code=201, summary="Subscribe an evolving application")
async def subscribe(evolving: TheEvolving, body: SubscribeBody, user: User) -> Subscribed:
    """One session for the application's whole life: its requests come later, one by one,
    each on one of the clusters its filter lets through."""
    result: Subscribed = await blocking(lambda: evolving.subscribe(user, body.filter, body.name))
    return result


@router.get("/sessions/{session_id}", summary="The application, its requests and both views")
async def session(evolving: TheEvolving, session_id: str, user: User) -> EvolvingInfo:
    """Its requests in the order sent, the non-preemptible view (where a pre-allocation or a
    non-preemptible request sent now would fit) and the preemptible one (its share of the
    hosts nobody holds)."""
    info: EvolvingInfo = await blocking(lambda: evolving.info(user, session_id))
    return info


@router.post("/sessions/{session_id}/requests", status_code=201, summary="Send typed requests")
async def send_request(  # noqa: PLR0917 - FastAPI passes what the signature declares
    request: Request,
    response: Response,
    evolving: TheEvolving,
    session_id: str,
    body: TypedRequest | list[TypedRequest],
    user: User,
) -> RequestInfo | list[RequestInfo]:
    """A non-preemptible, preemptible or pre-allocation request on one cluster, maybe
    ``next`` or ``coalloc`` to an earlier one; or an array of them, written together or not
    at all (requests that must start together, ``coalloc``, go in one call). Answered once
    the pass that placed them ran (within about ``policy.interval``), with each one's
    estimate or start: an object for an object, an array for an array."""
    passes: int = await blocking(lambda: evolving.request(user, session_id, body))
    await after_pass(request, response, passes)
    asked = [body] if isinstance(body, TypedRequest) else body

    def answers() -> list[RequestInfo]:
        return [evolving.request_info(user, session_id, one.id) for one in asked]

    infos: list[RequestInfo] = await blocking(answers)
    return infos[0] if isinstance(body, TypedRequest) else infos


@router.get("/sessions/{session_id}/requests/{request_id}", summary="Where a request stands")
async def request_info(
    evolving: TheEvolving, session_id: str, request_id: str, user: User
) -> RequestInfo:
    info: RequestInfo = await blocking(lambda: evolving.request_info(user, session_id, request_id))
    return info


@router.post(
    "/sessions/{session_id}/requests/{request_id}/done",
    summary="End a request, or give some of its hosts back",
)
async def done_request(
    evolving: TheEvolving,
    session_id: str,
    request_id: str,
    user: User,
    body: DoneBody | None = None,
) -> RequestInfo:
    """``{"hosts": n}`` gives ``n`` hosts back and keeps the others (an application shrinking,
    a preemptible request answering a preemption; ``host_names`` says which); no body, or
    ``hosts`` null, ends it."""
    body = body or DoneBody()
    info: RequestInfo = await blocking(
        lambda: evolving.done(user, session_id, request_id, body.hosts, body.host_names)
    )
    return info


@router.delete(
    "/sessions/{session_id}/requests/{request_id}", summary="Withdraw a request not started"
)
async def withdraw_request(
    evolving: TheEvolving, session_id: str, request_id: str, user: User
) -> RequestInfo:
    info: RequestInfo = await blocking(lambda: evolving.withdraw(user, session_id, request_id))
    return info


@router.post("/sessions/{session_id}/done", summary="The application ended")
async def done(evolving: TheEvolving, session_id: str, user: User) -> StateAnswer:
    """Every request still started ends (its hosts held ``fair_start`` seconds), every waiting
    one is dropped, and the session ends."""
    answer: StateAnswer = await blocking(lambda: evolving.end(user, session_id))
    return answer


@router.delete("/sessions/{session_id}", summary="The application ended (as POST .../done)")
async def end(evolving: TheEvolving, session_id: str, user: User) -> StateAnswer:
    answer: StateAnswer = await blocking(lambda: evolving.end(user, session_id))
    return answer


async def the_request_jobs(request: Request) -> RequestJobs:
    """The jobs of requests, which the composition root sets (none: a 404, as for v2)."""
    jobs: RequestJobs | None = getattr(request.app.state, "request_jobs", None)
    if jobs is None:
        raise HTTPException(404, "this bridge runs no jobs of evolving applications' requests")
    return jobs


TheRequestJobs = Annotated[RequestJobs, Depends(the_request_jobs)]


@router.post(
    "/sessions/{session_id}/requests/{request_id}/jobs",
    status_code=201,
    summary="A job on a started request's hosts (the mock platform)",
)
async def submit_request_job(
    jobs: TheRequestJobs,
    session_id: str,
    request_id: str,
    body: RequestJobRequest,
    user: User,
) -> JobAnswer:
    """Run by the bridge's front end, as v1's jobs, where the cluster's submission kind is
    ``mock``: on the request's hosts (or ``hosts``, some of them), in its reservation (its
    pre-allocation's for an update inside one; none for a preemptible request), within its end;
    stopped when the request ends. Accepted and written down: the answer never waits."""
    answer: JobAnswer = await blocking(lambda: jobs.submit(user, session_id, request_id, body))
    return answer


@router.get(
    "/sessions/{session_id}/requests/{request_id}/jobs", summary="A request's jobs, oldest first"
)
async def request_jobs(
    jobs: TheRequestJobs, session_id: str, request_id: str, user: User
) -> list[JobInfo]:
    found: list[JobInfo] = await blocking(lambda: jobs.jobs(user, session_id, request_id))
    return found


@router.delete(
    "/sessions/{session_id}/requests/{request_id}/jobs/{job_id}",
    status_code=202,
    summary="Cancel a request's job",
)
async def cancel_request_job(
    jobs: TheRequestJobs, session_id: str, request_id: str, job_id: str, user: User
) -> JobInfo:
    """Its process gets SIGTERM, then SIGKILL after a grace (by the worker: the answer is only
    that it is asked); asking again, or for an ended job, is harmless."""
    info: JobInfo = await blocking(lambda: jobs.cancel(user, session_id, request_id, job_id))
    return info


router.add_api_route(
    "/sessions/{session_id}/events",
    routes.events,
    methods=["GET"],
    response_model=EventPage,
    responses={200: {"content": {"text/event-stream": {}}}},
    summary="Long poll or stream of the session's events",
    description=(
        "As v1's: events numbered above ``after``, waiting up to ``wait`` seconds for the "
        "first, or a stream of them with ``Accept: text/event-stream``. Each ``start``, "
        "``ended`` and ``killed`` names its ``request``; ``change`` "
        "carries the ``preemptible`` view's changes and the waiting requests' ``estimates``; "
        "``preempt`` asks a preemptible request for ``hosts`` back by ``deadline``."
    ),
)
