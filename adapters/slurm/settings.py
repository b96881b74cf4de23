"""``[adapter]`` with ``kind = "slurm"``: which controllers, reached how, seen as which clusters.

A coorm cluster is one Slurm controller (its own ``SLURM_CONF``), one cluster of a multi-cluster
setup with slurmdbd (``-M name``), or one partition of a controller; all of them can be mixed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from coorm_bridge.adapters.batch.settings import BatchCluster, BatchSettings, SshSettings
from coorm_bridge.core.model import Frozen, Name, UserName


class SlurmCluster(BatchCluster):
    """``[[adapter.cluster]]``: one cluster as launchers see it, and where it is in Slurm."""

    slurm_conf: Path | None = None
    """This controller's slurm.conf (exported as SLURM_CONF for its commands)."""
    cluster: Name | None = None
    """With slurmdbd: the Slurm cluster name, addressed with ``-M``."""
    partition: Name | None = None
    """Only this partition's nodes and jobs (default: the whole controller)."""


class RestSettings(Frozen):
    """``[adapter.rest]``: slurmrestd, on a Unix socket (``unix:///path``) or TCP with a JWT."""

    url: str = Field(pattern=r"^(unix://|https?://)")
    user: UserName | None = None
    """Sent as X-SLURM-USER-NAME with the token (JWT over TCP)."""
    token_file: Path | None = None
    """A file holding the JWT (``scontrol token``); needed over TCP."""


class SlurmSettings(BatchSettings):
    """``[adapter]`` for Slurm: ``[[adapter.cluster]]`` tables, ``[[adapter.link]]`` tables."""

    kind: Literal["slurm"] = "slurm"
    backend: Literal["cli", "rest", "pyslurm"] = "cli"
    """How to read: the commands (squeue, sinfo, scontrol), slurmrestd, or pyslurm. Writes the
    REST API of Slurm 22.05 cannot do (reservations) always go through the commands."""
    clusters: tuple[SlurmCluster, ...] = Field(min_length=1, alias="cluster")
    ssh: SshSettings | None = None
    rest: RestSettings | None = None
    timeout: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0
    """Seconds a command may take before the controller counts as not answering."""

    @field_validator("clusters")
    @classmethod
    def _distinct_nodes(cls, clusters: tuple[SlurmCluster, ...]) -> tuple[SlurmCluster, ...]:
        """Two clusters over the same nodes would show every host twice: launchers would be
        promised both, and the bridge would hold each twice."""
        seen: dict[tuple[str | None, str | None], list[SlurmCluster]] = {}
        for cluster in clusters:
            same = seen.setdefault(_controller(cluster), [])
            where = _describe(cluster)
            for other in same:
                names = f"clusters {other.name!r} and {cluster.name!r}"
                if other.partition == cluster.partition:
                    shared = cluster.partition
                    what = f"partition {shared!r} of the" if shared is not None else "the whole"
                    why = f"{names} are both {what} {where}: the same nodes twice; keep one"
                elif other.partition is None or cluster.partition is None:
                    whole, part = (other, cluster) if other.partition is None else (cluster, other)
                    why = (
                        f"{names} overlap: {whole.name!r} is the whole {where}, partition "
                        f"{part.partition!r} of {part.name!r} included; give {whole.name!r} a "
                        "partition too, or keep one"
                    )
                else:
                    continue
                raise ValueError(why)
            same.append(cluster)
        return clusters

    def local_problems(self) -> list[str]:
        """Each cluster's slurm_conf must be readable here, unless the commands run over SSH
        (the file is then on the front-end): Slurm's commands would otherwise wait and retry
        for a minute before they fail (Slurm 22.05: "s_p_parse_file: cannot stat file")."""
        if self.ssh is not None:
            return []
        problems = []
        for index, cluster in enumerate(self.clusters):
            path = cluster.slurm_conf
            if path is None:
                continue
            try:
                path.open("rb").close()
            except OSError as error:
                problems.append(
                    f"cluster.{index}.slurm_conf: cannot read {str(path)!r}: {error.strerror}"
                )
        return problems

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.backend == "rest" and self.rest is None:
            raise ValueError("backend = 'rest' needs an [adapter.rest] table")
        if self.backend == "rest" and any(c.cluster for c in self.clusters):
            raise ValueError(
                "backend = 'rest' talks to one slurmrestd: clusters addressed with 'cluster' "
                "(-M) need backend = 'cli'"
            )
        return self


def _controller(cluster: SlurmCluster) -> tuple[str | None, str | None]:
    """Which controller's nodes a cluster is among: its slurm.conf (None: the default one) and
    its ``-M`` cluster. (Over SSH every cluster runs its commands on the same front-end.)"""
    conf = None if cluster.slurm_conf is None else os.path.normpath(cluster.slurm_conf)
    return conf, cluster.cluster


def _describe(cluster: SlurmCluster) -> str:
    """The controller a cluster is in, as its settings name it."""
    conf = "the default slurm.conf" if cluster.slurm_conf is None else str(cluster.slurm_conf)
    if cluster.cluster is None:
        return f"controller of {conf}"
    return f"Slurm cluster {cluster.cluster!r} (-M, through {conf})"
