"""The ``[adapter]`` settings every batch system shares: its clusters and the links between
them, and the front-end its commands may run on.

A batch system's settings extend :class:`BatchSettings` (how to reach it) and its clusters
extend :class:`BatchCluster` (how each is addressed in it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, model_validator

from coorm_bridge.adapters.registry import AdapterSettings
from coorm_bridge.core.model import Frozen, Link, MiB, Name, Speed, UserName


class BatchCluster(Frozen):
    """``[[adapter.cluster]]``: one cluster as launchers see it."""

    name: Name
    speed: Speed = 1.0
    """Relative host speed, for selectors (batch systems do not know it)."""
    scratch_per_host_mib: MiB = 0


class SshSettings(Frozen):
    """``[adapter.ssh]``: run the commands on a front-end instead of here."""

    host: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")
    port: Annotated[int, Field(ge=1, le=65535, strict=True)] = 22
    user: UserName | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None
    """Host keys to trust besides ~/.ssh/known_hosts; an unknown host key is refused."""
    connect_timeout: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0


class BatchSettings(AdapterSettings):
    """``[[adapter.cluster]]`` tables, ``[[adapter.link]]`` tables."""

    model_config = AdapterSettings.model_config | {"populate_by_name": True}

    clusters: tuple[BatchCluster, ...] = Field(min_length=1, alias="cluster")
    links: tuple[Link, ...] = Field(default=(), alias="link")

    @model_validator(mode="after")
    def _distinct_names(self) -> Self:
        names = [c.name for c in self.clusters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"cluster names repeat: {', '.join(twice)}")
        return self
