"""The launcher protocol's bodies and answers (HTTP API v1, docs/design.md §5).

One module shared by the daemon (which validates what it receives and serialises what it sends
with these models, so its OpenAPI document describes exactly them) and the client in
``coorm_bridge.launchers.client`` (which parses answers with them): the two cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from coorm_bridge.core.messages import Event, View
from coorm_bridge.core.model import (
    MAX_SEQ,
    ClusterInfo,
    Duration,
    Filter,
    Frozen,
    Label,
    Name,
    Reason,
    Request,
    Time,
    UserName,
)
from coorm_bridge.core.states import AppState

API_PREFIX = "/v1"
#: Longest long-poll a launcher may ask for, in seconds (proxies cut idle connections).
MAX_WAIT = 60.0
#: Seconds an event stream (``GET .../events`` with ``Accept: text/event-stream``) stays
#: silent at most: with nothing to say, it sends a comment. A reader that heard nothing for
#: twice as long may take the bridge for gone and reconnect.
STREAM_PING = 30.0
#: Largest request body the daemon reads, in bytes (a view or request is a few kB).
MAX_BODY = 64 * 1024


class SubscribeBody(Frozen):
    """``POST /v1/sessions``: which clusters the application wants to see, and a label."""

    filter: Filter = Filter()
    name: Label | None = None


class Subscribed(Frozen):
    """201 answer to a subscription: the session id and the clusters its filter let through."""

    session: Name
    clusters: tuple[ClusterInfo, ...]


class RequestAnswer(Frozen):
    """Answer to ``PUT .../request``: the request's estimated start (None: it never fits, for
    instance because it is larger than the platform) as computed by the pass that placed it."""

    session: Name
    state: AppState
    estimated_start: Time | None


class StateAnswer(Frozen):
    """Answer to ``done`` and ``DELETE``: the session's state afterwards."""

    session: Name
    state: AppState


class SessionInfo(Frozen):
    """``GET /v1/sessions/{id}``: where the session stands, and its current view."""

    session: Name
    name: str | None
    owner: UserName
    state: AppState
    clusters: tuple[Name, ...]
    request: Request | None
    estimated_start: Time | None
    started_at: Time | None
    done_at: Time | None
    end: Time | None
    """End of the allocation once started (the ghost's end once done)."""
    view: View | None
    """The free hosts left to this session, per cluster (None once started or ended)."""
    stale: tuple[Name, ...] = ()
    """Clusters whose batch system does not answer: their part of the view may be out of date."""
    last_seq: Annotated[int, Field(ge=0, le=MAX_SEQ)]


class EventPage(Frozen):
    """``GET .../events``: the session's events numbered above ``after``, oldest first."""

    events: list[Event]


class HorizonBody(Frozen):
    """``PUT /v1/sessions/{id}/horizon``: a streaming launcher's word on its choice on the view
    after event ``after`` (what a long poll says with ``?horizon=``): no change of that view
    from ``horizon`` on can alter it (None: every change can)."""

    after: Annotated[int, Field(ge=0, le=MAX_SEQ)]
    horizon: Time | None


class ClusterHealth(Frozen):
    status: Literal["ok", "stale"]
    last_snapshot: Time | None
    """When the batch system last answered (None: never since the bridge started)."""
    failures: Annotated[int, Field(ge=0)]
    """Polls failed in a row."""
    error: str | None = None


#: "rights": a batch system will not let the bridge's account hold reservations.
ProblemKind = Literal["rights"]


class Problem(Frozen):
    """Something only an admin can fix. The bridge goes on meanwhile: sessions keep their place
    and placements are retried, so that they resume by themselves once it is fixed."""

    kind: ProblemKind
    clusters: tuple[Name, ...]
    message: str
    """What the batch system said, why, and what to do."""
    since: Time


class Health(Frozen):
    """``GET /v1/health``: "degraded" while some batch system does not answer, or a problem
    only an admin can fix is open (logged once at ERROR when it appeared)."""

    status: Literal["ok", "degraded"]
    time: Time
    clusters: dict[Name, ClusterHealth]
    sessions: Annotated[int, Field(ge=0)]
    """Sessions not finished or cancelled."""
    problems: tuple[Problem, ...] = ()
    drained: tuple[Name, ...] = ()
    """Clusters an admin drained: no new placeholder is made there until resumed (a drain is
    the admin's wish, not a fault: it leaves ``status`` as it is). Added after launchers were
    released, whose model refuses unknown fields: left out of the JSON when empty, so an older
    launcher reads the health of a bridge with nothing drained."""

    @model_serializer(mode="wrap")
    def _without_empty_drained(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        if not dumped.get("drained", True):
            del dumped["drained"]
        return dumped

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The fields, as without the serializer above (which would hide them from OpenAPI)."""
        return handler(cast(CoreSchema, {k: v for k, v in schema.items() if k != "serialization"}))


# -- admin commands (coorm-bridge sessions, cancel, drain, resume) --------------------------------


class CancelBody(Frozen):
    """``POST /v1/sessions/{id}/cancel``: why the session is ended by force (its launcher is
    told, the log keeps it)."""

    reason: Reason


class DrainBody(Frozen):
    """``POST /v1/admin/clusters/{name}/drain``: why (optional, shown with the drain)."""

    reason: Reason | None = None


class PlaceholderInfo(Frozen):
    """One of a session's placeholders, as the bridge last recorded it."""

    cluster: Name
    name: Annotated[str, Field(min_length=1, max_length=255)]
    """The reservation's name in the batch system."""
    status: Literal["requested", "held", "ghost", "releasing"]
    start: Time
    end: Time
    hosts: Annotated[int, Field(ge=0)]
    host_names: tuple[Name, ...] = ()


class AdminSession(Frozen):
    """``GET /v1/admin/sessions``: one session as an admin looks at it."""

    session: Name
    name: str | None
    owner: UserName
    state: AppState
    clusters: tuple[Name, ...]
    request: Request | None
    estimated_start: Time | None
    created: Time
    started_at: Time | None
    done_at: Time | None
    end: Time | None
    """End of the allocation once started (the ghost's end once done)."""
    placeholders: tuple[PlaceholderInfo, ...] = ()


class DrainInfo(Frozen):
    """A cluster's drain after ``drain`` or ``resume``: who drained it, since when and why
    (all None once resumed)."""

    cluster: Name
    drained: bool
    since: Time | None = None
    by: UserName | None = None
    reason: str | None = None


#: Bounds of a job submitted through the bridge's front end (``POST .../jobs``): the whole body
#: stays within :data:`MAX_BODY` and the kernel's limits on a command line and a path.
MAX_ARGS = 1024
MAX_ARGV_BYTES = 16 * 1024
MAX_VARIABLES = 256
MAX_ENVIRONMENT_BYTES = 32 * 1024
MAX_PATH_BYTES = 4095
MAX_PATH_PART = 255
#: Variables the bridge sets in every job's environment; a job may not give them
#: (``COORM_JOB_TAG``: the mock front end's marker of a job's processes).
JOB_VARIABLES = ("COORM_JOB_ID", "COORM_JOB_HOSTS", "COORM_CLUSTER", "COORM_JOB_TAG")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


def _utf8(value: str) -> int:
    """Its size in bytes; NUL (which ends a C string) and lone surrogates are refused."""
    if "\0" in value:
        raise ValueError("NUL characters cannot reach a process")
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("not valid UTF-8 text (a lone surrogate)") from None


def _check_text(value: str) -> str:
    _utf8(value)
    return value


def _check_path(value: str) -> str:
    """An absolute path in normal form: no '.', '..' or empty part, no trailing '/'."""
    if _utf8(value) > MAX_PATH_BYTES:
        raise ValueError(f"a path has at most {MAX_PATH_BYTES} bytes")
    if not value.startswith("/"):
        raise ValueError("give an absolute path (starting with '/')")
    parts = value.split("/")[1:]
    if value != "/" and any(part in ("", ".", "..") for part in parts):
        raise ValueError("give the path in normal form: no '.', '..', '//' or final '/'")
    if any(len(part.encode()) > MAX_PATH_PART for part in parts):
        raise ValueError(f"a file name has at most {MAX_PATH_PART} bytes")
    return value


def _check_variable(name: str) -> str:
    if not _VARIABLE.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a variable name: letters, digits and '_', not starting with a digit"
        )
    if name in JOB_VARIABLES:
        raise ValueError(f"{name} is set by the bridge")
    return name


Argument = Annotated[str, AfterValidator(_check_text)]
AbsolutePath = Annotated[str, AfterValidator(_check_path)]
Variable = Annotated[str, AfterValidator(_check_variable)]
JobState = Literal["pending", "running", "completed", "failed", "cancelled"]


class JobRequest(Frozen):
    """``POST /v1/sessions/{id}/jobs``: a job for the session's placeholder on ``cluster``, run
    by the bridge's front end (the mock platform) on every host of the allocation there."""

    cluster: Name
    name: Name
    argv: tuple[Argument, ...] = Field(min_length=1, max_length=MAX_ARGS)
    """The command and its arguments, given to the process as they are (no shell)."""
    environment: dict[Variable, Argument] = Field(default_factory=dict, max_length=MAX_VARIABLES)
    """Given to the process, with PATH, HOME and LANG of the bridge's when not given here, and
    COORM_JOB_ID, COORM_JOB_HOSTS (comma-separated) and COORM_CLUSTER; a bridge running as root
    runs it as the session's owner, with HOME, USER, LOGNAME and SHELL of the owner's."""
    workdir: AbsolutePath
    """The process's working folder (on the bridge's host)."""
    walltime: Duration
    """Seconds: the job is killed at this limit, which may not pass the allocation's end."""
    stdout: AbsolutePath
    stderr: AbsolutePath
    """Files inside ``workdir`` for the process's output (created, or truncated); may be one."""

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if not self.argv[0]:
            raise ValueError("argv[0], the command, is empty")
        if sum(_utf8(arg) + 1 for arg in self.argv) > MAX_ARGV_BYTES:
            raise ValueError(f"argv has more than {MAX_ARGV_BYTES} bytes")
        size = sum(_utf8(k) + _utf8(v) + 2 for k, v in self.environment.items())
        if size > MAX_ENVIRONMENT_BYTES:
            raise ValueError(f"environment has more than {MAX_ENVIRONMENT_BYTES} bytes")
        for field in ("stdout", "stderr"):
            path = getattr(self, field)
            if not path.startswith(self.workdir.rstrip("/") + "/"):
                raise ValueError(f"{field} ({path}) is not inside workdir ({self.workdir})")
        return self


class JobAnswer(Frozen):
    """201 answer to a job: its id, and the hosts it runs on (the allocation's there)."""

    job: Name
    cluster: Name
    hosts: tuple[Name, ...]


class JobInfo(Frozen):
    """``GET /v1/sessions/{id}/jobs``: one job and where it stands."""

    job: Name
    cluster: Name
    name: Name
    state: JobState
    exit_code: int | None
    """Its exit status once it exited (None: running, killed by a signal, or unknown)."""
    hosts: tuple[Name, ...]
    signal: int | None = None
    """The signal that killed it, if one did."""
    reason: str | None = None
    """Why it ended as it did, when its exit status does not say (stopped, never started...)."""
    batch_job: str | None = None
    """Its id in the (simulated) batch system, once submitted."""
    submitted: Time
    started: Time | None = None
    ended: Time | None = None


class ErrorBody(Frozen):
    """Every error answer: a short code and a sentence naming the problem."""

    error: str
    detail: str


__all__ = [
    "API_PREFIX",
    "MAX_BODY",
    "MAX_WAIT",
    "STREAM_PING",
    "ClusterHealth",
    "ErrorBody",
    "EventPage",
    "Health",
    "HorizonBody",
    "JobAnswer",
    "JobInfo",
    "JobRequest",
    "Problem",
    "ProblemKind",
    "RequestAnswer",
    "SessionInfo",
    "StateAnswer",
    "SubscribeBody",
    "Subscribed",
]
