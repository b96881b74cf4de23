"""Where one coorm cluster is in Slurm: what every Slurm back-end needs to address it."""

from __future__ import annotations

from dataclasses import dataclass, field

from coorm_bridge.adapters.batch.backend import Binding
from coorm_bridge.adapters.slurm.settings import SlurmCluster


@dataclass(frozen=True)
class SlurmBinding(Binding):
    """Its controller's environment (SLURM_CONF), its Slurm cluster name for ``-M`` and the
    partition it is limited to."""

    cluster: str | None = None
    partition: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def binding_of(cluster: SlurmCluster) -> SlurmBinding:
    env = {} if cluster.slurm_conf is None else {"SLURM_CONF": str(cluster.slurm_conf)}
    return SlurmBinding(cluster.name, cluster=cluster.cluster, partition=cluster.partition, env=env)
