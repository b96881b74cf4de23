"""OAR's answers (``oarnodes -J``, ``oarstat -J --gantt``, the REST API's ``/resources/details``
and ``/jobs/details``) as the adapter interface's nodes, jobs and reservations of one cluster.

OAR schedules resources (often cores) and knows hosts only as a property; the bridge promises
whole hosts. So a host is up only when all its resources are, a job occupies every host it has
a resource on, and a reservation holds the hosts of its resources. Jobs are attributed to
clusters by their hosts: a job without hosts (waiting without a prediction: Debian's OAR plans
only 30 waiting jobs per user and pass, and stops at ``SCHEDULER_TIMEOUT``) is left out, so its
hosts look free until OAR plans it; OAR's reservations (the bridge's placeholders) keep their
hosts whatever waits, so only the views are optimistic, never the promises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coorm_bridge.adapters.batch.backend import Hardware, Read
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import Job, JobState, Node, NodeState, Reservation
from coorm_bridge.core.model import NAME_PATTERN

#: OAR's job states, as the adapter interface's (Hold: it will not run until released).
STATES: dict[str, JobState] = {
    "Waiting": JobState.PENDING,
    "Hold": JobState.PENDING,
    "toLaunch": JobState.RUNNING,
    "toError": JobState.FAILED,
    "toAckReservation": JobState.PENDING,
    "Launching": JobState.RUNNING,
    "Running": JobState.RUNNING,
    "Suspended": JobState.RUNNING,
    "Resuming": JobState.RUNNING,
    "Finishing": JobState.RUNNING,
    "Terminated": JobState.COMPLETED,
    "Error": JobState.FAILED,
}
#: States whose job holds or will hold resources.
LIVE = frozenset(s for s, state in STATES.items() if not state.finished and s != "Hold")
_ASKED = re.compile(r"coorm-placeholder start=([0-9]{1,12})")
_WALLTIME = re.compile(r"\bW=([0-9]+):([0-9]+):([0-9]+)")


@dataclass(frozen=True)
class Resource:
    """One OAR resource (a core, usually) with the properties the adapter uses."""

    id: int
    host: str
    address: str
    state: str
    drain: bool
    cluster: str | None
    available_upto: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class OarJob:
    """One OAR job as both the commands and the REST API describe it."""

    id: str
    name: str | None
    owner: str
    state: str
    types: tuple[str, ...]
    reservation: str  # "None", "toSchedule" or "Scheduled"
    start: int | None  # running: when it began; waiting: OAR's prediction, if any
    walltime: int
    addresses: tuple[str, ...] = ()
    queue: str = "default"
    exit_code: int | None = None
    command: str = ""

    @property
    def asked_start(self) -> int | None:
        """A placeholder's start as asked (:func:`.commands.placeholder_command`)."""
        match = _ASKED.fullmatch(self.command.strip())
        return int(match.group(1)) if match else None

    @property
    def container(self) -> str | None:
        """The container job id of an inner job."""
        for kind in self.types:
            if kind.startswith("inner="):
                return kind.removeprefix("inner=")
        return None

    @property
    def is_reservation(self) -> bool:
        """Holds its hosts for others' jobs: an advance reservation, or a container (the
        bridge's placeholders are both; the Gantt has no reservation flag)."""
        return self.reservation == "Scheduled" or "container" in self.types


def resource(
    raw: Mapping[str, Any], binding: OarBinding, resource_id: int | None = None
) -> Resource:
    """One entry of ``oarnodes -J`` or ``/resources/details``."""
    rid = int(raw.get("resource_id", raw.get("id", resource_id if resource_id is not None else 0)))
    address = str(raw.get("network_address") or "")
    named = raw.get(binding.host_property)  # checked at start (.hardware): 0 is a name too
    host = address if named is None or str(named) == "" else str(named)
    cluster = raw.get(binding.property)
    memory = raw.get("memnode") or 0
    return Resource(
        id=rid,
        host=host,
        address=address or host,
        state=str(raw.get("state", "")),
        drain=str(raw.get("drain", "NO")).upper() == "YES",
        cluster=None if cluster is None else str(cluster),
        available_upto=int(raw.get("available_upto") or 0),
        memory_mib=int(memory) if str(memory).isdigit() else 0,
    )


def rows_of_nodes(data: Any) -> list[Mapping[str, Any]]:
    """``oarnodes -J``: an object keyed by resource id (or, in some versions, a list), as rows
    of properties, each with its ``resource_id``."""
    if isinstance(data, Mapping):
        return [{"resource_id": int(k), **v} for k, v in data.items() if isinstance(v, Mapping)]
    if isinstance(data, list):
        return [v for v in data if isinstance(v, Mapping)]
    raise ValueError(f"oarnodes -J printed {type(data).__name__}, not resources")


def resources_of_nodes(data: Any, binding: OarBinding) -> list[Resource]:
    """``oarnodes -J`` as resources."""
    return [resource(row, binding) for row in rows_of_nodes(data)]


def in_cluster(resources: Iterable[Resource], binding: OarBinding) -> list[Resource]:
    return [r for r in resources if r.cluster == binding.value]


def host_state(resources: Sequence[Resource], now: int) -> NodeState:
    """Up only when every resource of the host is Alive. OAR schedules nothing on an Absent
    resource (unless its energy saving wakes it: then the bridge's views are pessimistic about
    it, never its promises), nor on a Suspected or Dead one."""
    if any(r.drain for r in resources):
        return NodeState.DRAINED
    if all(r.state == "Alive" for r in resources):
        return NodeState.UP
    return NodeState.DOWN


def nodes(resources: Sequence[Resource], now: int) -> list[Node]:
    """The cluster's hosts, sorted, each with its state."""
    by_host: dict[str, list[Resource]] = {}
    for r in resources:
        by_host.setdefault(r.host, []).append(r)
    return [Node(name=host, state=host_state(rs, now)) for host, rs in sorted(by_host.items())]


def hardware(resources: Sequence[Resource]) -> Hardware:
    """Hosts, the smallest host's resources (cores, as OAR usually counts) and memory."""
    by_host: dict[str, list[Resource]] = {}
    for r in resources:
        by_host.setdefault(r.host, []).append(r)
    if not by_host:
        raise ValueError("no resource has this cluster's property value")
    cores = min(len(rs) for rs in by_host.values())
    memory = min(max(r.memory_mib for r in rs) for rs in by_host.values())
    return Hardware(hosts=len(by_host), cores_per_host=cores, ram_per_host_mib=memory)


def walltime_of(raw: Mapping[str, Any]) -> int:
    """A job's walltime: its field, or the ``W=H:M:S`` of its message."""
    for key in ("walltime", "moldable_walltime"):
        value = raw.get(key)
        if isinstance(value, int) and value > 0:
            return value
    match = _WALLTIME.search(str(raw.get("message") or ""))
    if match:
        h, m, s = (int(g) for g in match.groups())
        return h * 3600 + m * 60 + s
    start, stop = raw.get("start_time"), raw.get("stop_time")
    if isinstance(start, int) and isinstance(stop, int) and stop > start > 0:
        return stop - start
    raise ValueError(f"OAR job {raw.get('id', raw.get('Job_Id'))}: no walltime")


def _positive(raw: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _exit_code(raw: Mapping[str, Any]) -> int | None:
    value = raw.get("exit_code")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gantt_record(raw: Mapping[str, Any]) -> OarJob:
    """One job of ``oarstat -J --gantt``: OAR's Gantt (``start_time`` is the prediction of a
    waiting job); its lists repeat once per joined row, and it has no reservation flag (the
    bridge's placeholders are told by their ``container`` type)."""
    job_id = str(raw.get("job_id", ""))
    if not job_id.isdigit():
        raise ValueError(f"an OAR job without an id: {str(raw)[:200]}")
    return OarJob(
        id=job_id,
        name=None if raw.get("job_name") is None else str(raw["job_name"]),
        owner=str(raw.get("user") or ""),
        state=str(raw.get("state", "")),
        types=tuple(dict.fromkeys(str(t) for t in raw.get("types") or ())),
        reservation="None",
        start=_positive(raw, "start_time"),
        walltime=walltime_of(raw),
        addresses=tuple(dict.fromkeys(str(a) for a in raw.get("network_address") or ())),
        queue=str(raw.get("queue_name") or "default"),
        command=str(raw.get("command") or ""),
    )


def record(raw: Mapping[str, Any]) -> OarJob:
    """One job of ``oarstat -J [-f]`` or of the REST API's ``/jobs/details``: a running job's
    start is ``start_time``, a waiting one's prediction ``scheduled_start`` (a reservation's,
    its ``start_time`` too)."""
    job_id = str(raw.get("id", raw.get("Job_Id", "")))
    if not job_id.isdigit():
        raise ValueError(f"an OAR job without an id: {str(raw)[:200]}")
    state = str(raw.get("state", ""))
    if state == "Waiting":
        start = _positive(raw, "scheduled_start", "scheduledStart", "start_time", "startTime")
    else:
        start = _positive(raw, "start_time", "startTime", "scheduled_start", "scheduledStart")
    addresses = [str(a) for a in raw.get("assigned_network_address") or ()]
    for node in raw.get("nodes") or ():
        if isinstance(node, Mapping) and node.get("network_address"):
            addresses.append(str(node["network_address"]))
    return OarJob(
        id=job_id,
        name=None if raw.get("name") is None else str(raw["name"]),
        owner=str(raw.get("owner") or raw.get("job_user") or ""),
        state=state,
        types=tuple(dict.fromkeys(str(t) for t in raw.get("types") or ())),
        reservation=str(raw.get("reservation") or "None"),
        start=start,
        walltime=walltime_of(raw),
        addresses=tuple(dict.fromkeys(addresses)),
        queue=str(raw.get("queue") or "default"),
        exit_code=_exit_code(raw),
        command=str(raw.get("command") or ""),
    )


def reservation_name(job: OarJob) -> str:
    """The bridge's name of a placeholder (its job name) or ``oar-ID`` for any other
    reservation (a job name is the owner's free text, and need not be a valid name)."""
    if "container" in job.types and job.name and NAME_PATTERN.fullmatch(job.name):
        return job.name
    return f"oar-{job.id}"


def hosts_of(job: OarJob, host_of: Mapping[str, str]) -> tuple[str, ...]:
    """The hosts of one cluster (``host_of``: its addresses to host names) a job is on."""
    return tuple(sorted({host_of[a] for a in job.addresses if a in host_of}))


def host_names(resources: Iterable[Resource]) -> dict[str, str]:
    """Network addresses (what jobs list) and host names, to host names."""
    found: dict[str, str] = {}
    for r in resources:
        found[r.address] = r.host
        found[r.host] = r.host
    return found


def held(job: OarJob, host_of: Mapping[str, str]) -> Reservation | None:
    """A live reservation or container as the hosts of one cluster it holds (None: none)."""
    hosts = hosts_of(job, host_of)
    if not (job.is_reservation and job.state in LIVE and hosts and job.start is not None):
        return None
    end = job.start + job.walltime  # a begun reservation's walltime is cut: the end stays
    asked = job.asked_start
    # Begun: OAR says when it launched it; it held the hosts from the start asked.
    start = asked if asked is not None and asked <= job.start < end else job.start
    return Reservation(
        name=reservation_name(job),
        start=start,
        end=end,
        hosts=len(hosts),
        host_names=hosts,
        users=(job.owner,) if job.owner else (),
        launched=job.state == "Running",
    )


def cluster_read(
    binding: OarBinding,
    resources: Sequence[Resource],
    jobs: Iterable[OarJob],
    now: int,
) -> Read:
    """One cluster's nodes, jobs and reservations out of the whole server's answers."""
    mine = in_cluster(resources, binding)
    host_of = host_names(mine)
    live = [j for j in jobs if j.state in LIVE and j.queue != "besteffort"]
    containers = {j.id: reservation_name(j) for j in live if j.is_reservation}
    out_jobs: list[Job] = []
    reservations: list[Reservation] = []
    for job in live:
        if job.is_reservation:
            made = held(job, host_of)
            if made is not None:
                reservations.append(made)
            continue
        hosts = hosts_of(job, host_of)
        if not hosts or job.start is None:
            continue  # elsewhere, or waiting without a prediction (see the module's docstring)
        container = job.container
        out_jobs.append(
            Job(
                id=job.id,
                user=job.owner,
                state=STATES[job.state],
                hosts=len(hosts),
                host_names=hosts,
                walltime=job.walltime,
                start=job.start,
                reservation=None
                if container is None
                else containers.get(container, f"oar-{container}"),
            )
        )
    return nodes(mine, now), out_jobs, reservations


def gantt(data: Any, binding: OarBinding) -> tuple[list[Resource], list[OarJob]]:
    """``oarstat -J --gantt``: every resource and every job placed in the window."""
    if not isinstance(data, Mapping):
        raise ValueError(f"oarstat --gantt printed {type(data).__name__}, not an object")
    raw_resources = data.get("resources") or []
    raw_jobs = data.get("jobs") or {}
    if not isinstance(raw_resources, list) or not isinstance(raw_jobs, Mapping):
        raise ValueError("oarstat --gantt: resources is not a list or jobs not an object")
    found = [resource(r, binding) for r in raw_resources if isinstance(r, Mapping)]
    return found, [gantt_record(j) for j in raw_jobs.values() if isinstance(j, Mapping)]
