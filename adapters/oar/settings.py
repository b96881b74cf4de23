"""``[adapter]`` with ``kind = "oar"``: one OAR server, reached how, its clusters selected by
a resource property.

OAR knows resources (often cores) with properties; a coorm cluster is the resources whose
``property`` (``cluster`` by default) has one value, counted by ``host``. The bridge submits
placeholders as the application's owner (OAR forbids root and ``oar`` to submit): through the
REST API behind a trusted proxy (``X-Remote-Ident``), or with the commands run as the owner
(``runuser``, the bridge running as root on an OAR front-end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from coorm_bridge.adapters.batch.settings import BatchCluster, BatchSettings, SshSettings
from coorm_bridge.core.model import Frozen, Name, UserName


class OarCluster(BatchCluster):
    """``[[adapter.cluster]]``: one cluster as launchers see it, and which resources it is."""

    value: Name | None = None
    """The value of the cluster property of its resources (default: the cluster's name)."""

    @property
    def selector(self) -> str:
        return self.value or self.name


class OarRest(Frozen):
    """``[adapter.rest]``: OAR's REST API (``/oarapi``)."""

    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048)
    auth: Literal["ident", "basic"] = "ident"
    """``ident``: the API trusts an ``X-Remote-Ident`` header (behind a proxy that sets it,
    the way OAR's Debian Apache configuration does); the bridge acts for each owner. ``basic``:
    HTTP authentication as ``user`` (a dedicated account owns every placeholder)."""
    user: UserName | None = None
    password_file: Path | None = None
    verify: bool | Path = True
    """TLS: check the server's certificate (or against this CA bundle)."""
    timezone: Annotated[str, Field(pattern=r"^[A-Za-z0-9_+/-]{1,64}$")] = "UTC"
    """The API server's time zone: OAR reads reservation dates as local times."""
    page: Annotated[int, Field(ge=1, le=100_000, strict=True)] = 500
    """Items per page (OAR's default 500)."""

    @model_validator(mode="after")
    def _basic_has_user(self) -> Self:
        if self.auth == "basic" and (self.user is None or self.password_file is None):
            raise ValueError("auth = 'basic' needs user and password_file")
        return self


class OarSettings(BatchSettings):
    """``[adapter]`` for OAR: ``[[adapter.cluster]]`` tables, ``[adapter.rest]`` or commands."""

    kind: Literal["oar"] = "oar"
    backend: Literal["cli", "rest"] = "cli"
    clusters: tuple[OarCluster, ...] = Field(min_length=1, alias="cluster")
    property: Name = "cluster"
    """The resource property whose value tells the clusters apart."""
    host_property: Name = "host"
    """The resource property that names a host (the unit the bridge counts)."""
    submit_as: Literal["owner"] | UserName = "owner"
    """Who owns placeholders: each application's owner (default), or one account (the SSH
    user, say) whose containers every user's jobs go into."""
    ssh: SshSettings | None = None
    rest: OarRest | None = None
    timeout: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 60.0
    """Seconds a command or request may take before the server counts as not answering."""
    reservation_lead: Annotated[int, Field(ge=0, le=3600, strict=True)] = 15
    """Seconds ahead of now the bridge asks a placeholder to start: OAR validates a
    reservation at its next scheduler pass and moves one asked to start earlier to then. Raise
    it where ``SCHEDULER_MIN_TIME_BETWEEN_2_CALLS`` is left at its default (passes up to 11 s
    apart)."""
    security_time: Annotated[int, Field(ge=0, le=3600, strict=True)] = 60
    """OAR's ``SCHEDULER_JOB_SECURITY_TIME``: the seconds it keeps free after every job on
    its hosts. An announced update (API v2, ``next``) is held from that long (and a second)
    after the request it follows: OAR refuses a container on those hosts earlier."""
    horizon_days: Annotated[int, Field(ge=1, le=3650, strict=True)] = 30
    """How far ahead the Gantt is read (``oarstat --gantt``)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.backend == "rest" and self.rest is None:
            raise ValueError("backend = 'rest' needs an [adapter.rest] table")
        values = [c.selector for c in self.clusters]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(
                f"clusters select the same resources ({self.property} = {', '.join(twice)}): "
                "keep one"
            )
        return self

    def local_problems(self) -> list[str]:
        if self.rest is None or self.rest.password_file is None:
            return []
        try:
            self.rest.password_file.open("rb").close()
        except OSError as error:
            return [
                f"rest.password_file: cannot read {str(self.rest.password_file)!r}: "
                f"{error.strerror}"
            ]
        return []
