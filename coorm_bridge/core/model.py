"""The CooRM data model (paper §III-B): what launchers and the bridge exchange.

Every type here is a pydantic v2 model so that the HTTP API, the store and the configuration all
validate with the same rules. Times and durations are whole Unix seconds: batch systems, SWF traces
and the paper all work in seconds, and integers keep profile breakpoints exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from itertools import pairwise
from types import MappingProxyType
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from coorm_bridge.core.profile import Profile

#: Cluster and host names end up in batch-system commands: letters, digits, '-', '_', '.' only.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _check_name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use 1 to 63 letters, digits, '-', '_' or '.', "
            "starting with a letter or digit"
        )
    return value


Name = Annotated[str, AfterValidator(_check_name)]


def describe(error: ValidationError) -> str:
    """A validation error as one line of ``key.sub: why`` items, for files users edit by hand."""
    return "; ".join(
        f"{'.'.join(str(part) for part in issue['loc']) or '(top)'}: {issue['msg']}"
        for issue in error.errors()
    )


#: Whole Unix seconds; pydantic's strict int refuses NaN, inf and fractional seconds.
Time = Annotated[int, Field(ge=0, strict=True)]
Duration = Annotated[int, Field(gt=0, strict=True)]
HostCount = Annotated[int, Field(ge=0, strict=True)]


class Frozen(BaseModel):
    """Base for value types: immutable, hashable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ClusterInfo(Frozen):
    """CINFO: the static properties of one cluster."""

    name: Name
    hosts: Annotated[int, Field(gt=0, strict=True)]
    cores_per_host: Annotated[int, Field(gt=0, strict=True)] = 1
    ram_per_host_mib: Annotated[int, Field(ge=0, strict=True)] = 0
    scratch_per_host_mib: Annotated[int, Field(ge=0, strict=True)] = 0
    speed: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0


class Link(Frozen):
    """Latency and bandwidth between two clusters (order does not matter)."""

    clusters: tuple[Name, Name]
    latency_s: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    bandwidth_bps: Annotated[float, Field(gt=0, allow_inf_nan=False)]


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
    min_ram_per_host_mib: HostCount = 0
    min_total_ram_mib: HostCount = 0
    min_scratch_per_host_mib: HostCount = 0

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


class CAP(Frozen):
    """A Cluster Availability Profile in its JSON form: ``n_i`` hosts on ``[t_i, t_{i+1})``."""

    cluster: Name
    steps: tuple[tuple[Time, HostCount], ...] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        for (t0, _), (t1, _) in pairwise(steps):
            if t1 <= t0:
                raise ValueError(f"step times must strictly increase, got {t0} then {t1}")
        return steps

    @classmethod
    def of(cls, cluster: str, profile: Profile, origin: int) -> Self:
        return cls(cluster=cluster, steps=tuple(profile.steps(origin)))

    def profile(self) -> Profile:
        return Profile.from_steps(self.steps)


class View(Frozen):
    """The view of one application: one CAP per cluster it subscribed to."""

    profiles: tuple[CAP, ...]

    @model_validator(mode="after")
    def _one_per_cluster(self) -> Self:
        names = [cap.cluster for cap in self.profiles]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"a view has one profile per cluster; {', '.join(twice)} repeat")
        return self

    @classmethod
    def of(cls, profiles: Mapping[str, Profile], origin: int) -> Self:
        return cls(profiles=tuple(CAP.of(name, p, origin) for name, p in profiles.items()))

    def as_profiles(self) -> dict[str, Profile]:
        return {cap.cluster: cap.profile() for cap in self.profiles}


class AppState(StrEnum):
    """Application states of the CooRM slides, plus Cancelled for a withdrawal."""

    SUBMITTED = "submitted"
    REQUEST_SENT = "request_sent"
    WAITING = "waiting"
    STARTED = "started"
    FINISH_SENT = "finish_sent"
    GHOST = "ghost"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class ChangeKind(StrEnum):
    INFO = "info"
    INTERCONNECT = "interconnect"
    AVAILABILITY = "availability"


class Change(Frozen):
    """CHANGE {CID, type, CAP}: the CAP is present only for availability changes."""

    cluster: Name
    kind: ChangeKind
    profile: CAP | None = None

    @model_validator(mode="after")
    def _profile_iff_availability(self) -> Self:
        if (self.kind is ChangeKind.AVAILABILITY) != (self.profile is not None):
            raise ValueError("an availability change carries its profile, other changes do not")
        return self


class Allocation(Frozen):
    """What one cluster gives a started application: its hosts and the holding reservation."""

    hosts: list[Name]
    reservation: Name | None = None


class EventBase(Frozen):
    seq: Annotated[int, Field(ge=1, strict=True)]
    time: Time


class ChangeEvent(EventBase):
    """changeNotify: the view changed; carries the new estimated start (None = never)."""

    type: Literal["change"] = "change"
    changes: list[Change]
    estimated_start: Time | None = None


class StartEvent(EventBase):
    """startNotify: the allocation holds from ``time`` until ``end`` on these hosts."""

    type: Literal["start"] = "start"
    end: Time
    allocations: dict[Name, Allocation]


class KilledEvent(EventBase):
    """The allocation was taken back (walltime exceeded, node failure, admin action)."""

    type: Literal["killed"] = "killed"
    reason: str


class EndedEvent(EventBase):
    """The session reached an end state (finished or cancelled); no event follows."""

    type: Literal["ended"] = "ended"
    state: AppState


Event = Annotated[ChangeEvent | StartEvent | KilledEvent | EndedEvent, Field(discriminator="type")]
