"""The CooRM data model (paper §III-B): clusters, their links, filters and requests.

Every type here is a pydantic v2 model so that the HTTP API, the store and the configuration all
validate with the same rules. The messages built from them (views, changes, start events) are in
:mod:`coorm_bridge.core.messages`, the application states in :mod:`coorm_bridge.core.states`.

Times and durations are whole Unix seconds: batch systems, SWF traces and the paper all work in
seconds, and integers keep profile breakpoints exact.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

#: Cluster and host names end up in batch-system commands: letters, digits, '-', '_', '.' only.
MAX_NAME = 63
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _check_name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use 1 to 63 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]

#: Environment variable names a POSIX shell can export (``export NAME=...``): job scripts export
#: the variables they are given, and a launcher's application file names them.
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: User names as the system's user database gives them (passwd, LDAP, SSSD, winbind): POSIX
#: portable names with any case, plus '@' and '.' (``alice@example.org``) and a final '$' (Samba
#: machine accounts), up to 255 characters (LOGIN_NAME_MAX). They reach batch-system commands
#: (``users=a,b``), so never a space, '=', ',', ':', '/', quotes or shell syntax; never a leading
#: '-' (Slurm reads ``users=-x`` as "all but x") nor digits alone (Slurm and OAR read them as uids).
USER_NAME_PATTERN = re.compile(r"(?=.{1,255}\Z)(?![0-9]+\$?\Z)[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?")


def _check_user_name(value: str) -> str:
    if not USER_NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a usable user name: use up to 255 letters, digits, '_', '.', '@' "
            "or '-' (and a final '$'), starting with a letter, digit or '_', not digits alone"
        )
    return value


UserName = Annotated[str, AfterValidator(_check_user_name)]

#: What a label may hold besides letters, marks, numbers, punctuation, symbols and spaces: the
#: joiners that emoji sequences and Indic scripts need. Everything else is refused: control
#: characters (NUL, escape sequences), bidirectional overrides (U+202A-U+202E, U+2066-U+2069)
#: and other invisible format characters, line separators, surrogates, unassigned code points.
_JOINERS = frozenset("\u200c\u200d")
_PRINTABLE = ("L", "M", "N", "P", "S")


def _check_label(value: str) -> str:
    for position, char in enumerate(value, 1):
        kind = unicodedata.category(char)
        if not (kind[0] in _PRINTABLE or kind == "Zs" or char in _JOINERS):
            raise ValueError(
                f"character {position} (U+{ord(char):04X}, {kind}) is not printable: "
                "a label is printable text"
            )
    return value


#: Free text a user gives to name something (a session): printable, at most 256 characters.
Label = Annotated[str, Field(max_length=256), AfterValidator(_check_label)]


def _check_said(value: str) -> str:
    if not value.strip():
        raise ValueError("say something: the text is only spaces")
    return value


#: Why an admin or a user acts (a session cancelled, a cluster drained): printable, 1 to 500
#: characters, not only spaces; it goes to launchers and to the log as it is.
Reason = Annotated[
    str,
    Field(min_length=1, max_length=500),
    AfterValidator(_check_label),
    AfterValidator(_check_said),
]


def describe(error: ValidationError) -> str:
    """A validation error as one line of ``key.sub: why`` items, for files users edit by hand."""
    return "; ".join(
        f"{'.'.join(str(part) for part in issue['loc']) or '(top)'}: {issue['msg']}"
        for issue in error.errors()
    )


# Every number that enters (the HTTP API, the configuration, the batch systems' answers, the
# store) is bounded here, so that the API, the store and the policy share one set of limits and
# no sum the bridge computes can overflow: times stay below MAX_TIME + MAX_DURATION, far below
# the 2**62 the profiles use for "forever" (and 2**62 + MAX_DURATION still fits in an int64).

#: The last second of year 9999 (UTC): what ISO 8601 dates, Slurm and ``date`` all print.
MAX_TIME = 253_402_300_799
#: Ten years of 365.25 days: longer than any walltime a batch system gives.
MAX_DURATION = 315_576_000
#: Hosts (or cores) in one cluster, request or reservation: ten times the largest machines.
MAX_COUNT = 1_000_000
#: Memory and scratch per host, in MiB: 2**40 MiB is 1 EiB.
MAX_MIB = 2**40
#: Event numbers: exact as a JSON number in every language (doubles), and in SQLite.
MAX_SEQ = 2**53 - 1

#: Whole Unix seconds; pydantic's strict int refuses NaN, inf and fractional seconds.
Time = Annotated[int, Field(ge=0, le=MAX_TIME, strict=True)]
Duration = Annotated[int, Field(gt=0, le=MAX_DURATION, strict=True)]
HostCount = Annotated[int, Field(ge=0, le=MAX_COUNT, strict=True)]
PositiveCount = Annotated[int, Field(gt=0, le=MAX_COUNT, strict=True)]
MiB = Annotated[int, Field(ge=0, le=MAX_MIB, strict=True)]
#: A host's speed relative to a reference host (selectors weigh hosts with it).
Speed = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
#: A link's latency, in seconds: an hour is already no link at all.
MAX_LATENCY = 3600.0
#: A link's bandwidth, in bit/s: 1 Pbit/s.
MAX_BANDWIDTH = 1e15


class Frozen(BaseModel):
    """Base for value types: immutable, hashable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


#: Submission fields added after launchers were released: left out of the JSON when unset, so
#: that an older launcher (whose model refuses unknown fields) still reads a newer bridge's
#: clusters.
_OMITTED_WHEN_UNSET = ("cluster_property", "host_property")


class Submission(Frozen):
    """How a launcher submits its jobs into the bridge's reservations on one cluster.

    The bridge holds the reservations; a launcher runs the jobs. It needs to know which batch
    system takes them and where its commands run: ``kind`` "mock" means the bridge's own front
    end takes them (``POST /v1/sessions/{id}/jobs``); "slurm" and "oar" mean the batch system's
    own commands (``sbatch --reservation``, ``oarsub -t inner=ID``), on ``front_end`` over SSH
    or on the bridge's host.
    """

    kind: Literal["mock", "slurm", "oar"]
    partition: Name | None = None
    """Slurm: the partition to submit to (``-p``)."""
    cluster: Name | None = None
    """Slurm: the cluster of a slurmdbd multi-cluster setup (``-M``); OAR: the value of the
    cluster property of its resources."""
    front_end: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """The host where the batch commands run (over SSH); None: the bridge's host."""
    slurm_conf: Annotated[str, Field(min_length=1, max_length=4095)] | None = None
    """Slurm: the ``SLURM_CONF`` to run the commands with, on the front end."""
    cluster_property: Name | None = None
    """OAR: the resource property whose value (``cluster``) selects the cluster's resources
    (None: ``cluster``, OAR's own convention)."""
    host_property: Name | None = None
    """OAR: the resource property that names a host (None: ``host``, OAR's default)."""

    @field_validator("cluster_property", "host_property")
    @classmethod
    def _oar_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if value is not None and kind != "oar":
            raise ValueError(f"OAR only (kind is {kind!r})")
        return value

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        for name in _OMITTED_WHEN_UNSET:
            if dumped.get(name, 0) is None:
                del dumped[name]
        return dumped

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The fields, as without the serializer above (whose ``dict`` would hide them from
        the OpenAPI description)."""
        return handler(cast(CoreSchema, {k: v for k, v in schema.items() if k != "serialization"}))


class ClusterInfo(Frozen):
    """CINFO: the static properties of one cluster."""

    name: Name
    hosts: PositiveCount
    cores_per_host: PositiveCount = 1
    ram_per_host_mib: MiB = 0
    scratch_per_host_mib: MiB = 0
    speed: Speed = 1.0
    submission: Submission | None = None
    """How to submit jobs there (None: an adapter that does not say)."""


class Link(Frozen):
    """Latency and bandwidth between two clusters (order does not matter)."""

    clusters: tuple[Name, Name]
    latency_s: Annotated[float, Field(ge=0, le=MAX_LATENCY, allow_inf_nan=False)]
    bandwidth_bps: Annotated[float, Field(gt=0, le=MAX_BANDWIDTH, allow_inf_nan=False)]


class Interconnect(Frozen):
    """ICINFO: the links between clusters; a pair without a link is not connected."""

    links: tuple[Link, ...] = ()

    def link(self, a: str, b: str) -> Link | None:
        for link in self.links:
            if set(link.clusters) == {a, b}:
                return link
        return None


class Filter(Frozen):
    """FILTER (JSDL-like): which clusters an application wants to see at all."""

    clusters: tuple[Name, ...] | None = None
    min_hosts: HostCount = 0
    min_cores_per_host: HostCount = 0
    min_ram_per_host_mib: MiB = 0
    min_total_ram_mib: MiB = 0
    min_scratch_per_host_mib: MiB = 0

    def matches(self, info: ClusterInfo) -> bool:
        return (
            (self.clusters is None or info.name in self.clusters)
            and info.hosts >= self.min_hosts
            and info.cores_per_host >= self.min_cores_per_host
            and info.ram_per_host_mib >= self.min_ram_per_host_mib
            and info.hosts * info.ram_per_host_mib >= self.min_total_ram_mib
            and info.scratch_per_host_mib >= self.min_scratch_per_host_mib
        )

    def select(self, infos: Iterable[ClusterInfo]) -> list[ClusterInfo]:
        """The clusters this filter lets through, in the platform's order."""
        return [info for info in infos if self.matches(info)]


class Request(Frozen):
    """REQUEST: hosts per cluster for one duration, all starting at the same moment.

    A zero count is dropped (selectors naturally produce them); a request with no host left is
    refused as empty. Pass ``context={"clusters": [...]}`` to also refuse unknown clusters.
    """

    nodes: Mapping[Name, HostCount]
    """Read-only: the policy memoizes on requests, so one must never change under its hash."""
    duration: Duration

    @field_validator("nodes")
    @classmethod
    def _known_and_not_empty(
        cls, nodes: Mapping[str, int], info: ValidationInfo
    ) -> Mapping[str, int]:
        kept = {cluster: count for cluster, count in sorted(nodes.items()) if count > 0}
        if not kept:
            raise ValueError("the request asks for no host at all: give at least one cluster > 0")
        known = (info.context or {}).get("clusters")
        if known is not None:
            unknown = sorted(set(kept) - set(known))
            if unknown:
                raise ValueError(
                    f"unknown cluster(s) {', '.join(unknown)}: this session sees "
                    f"{', '.join(sorted(known)) or 'no cluster'}"
                )
        return MappingProxyType(kept)

    @field_serializer("nodes")
    def _plain_nodes(self, nodes: Mapping[str, int]) -> dict[str, int]:
        return dict(nodes)

    def __hash__(self) -> int:
        return hash((tuple(self.nodes.items()), self.duration))

    def __eq__(self, other: object) -> bool:
        # The policy compares every waiting request on every pass: skip pydantic's generic path.
        if not isinstance(other, Request):
            return NotImplemented
        return self is other or (self.duration == other.duration and self.nodes == other.nodes)

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(self.nodes)

    @property
    def hosts(self) -> int:
        """Hosts in all, every cluster together (what the per-user limits count)."""
        return sum(self.nodes.values())
