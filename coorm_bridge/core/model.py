"""The CooRM data model (paper §III-B): clusters, their links, filters and requests.

Every type here is a pydantic v2 model so that the HTTP API, the store and the configuration all
validate with the same rules. The messages built from them (views, changes, start events) are in
:mod:`coorm_bridge.core.messages`, the application states in :mod:`coorm_bridge.core.states`.

Times and durations are whole Unix seconds: batch systems, SWF traces and the paper all work in
seconds, and integers keep profile breakpoints exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)

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
