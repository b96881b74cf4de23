"""Where one coorm cluster is in Slurm: what every Slurm back-end needs to address it."""

from __future__ import annotations

from dataclasses import dataclass, field

from coorm_bridge.adapters.batch.backend import Binding
from coorm_bridge.adapters.slurm.settings import SlurmCluster
from coorm_bridge.core.model import Submission


@dataclass(frozen=True)
class SlurmBinding(Binding):
    """Its controller's environment (SLURM_CONF), its Slurm cluster name for ``-M``, the
    partition it is limited to, and the front end its commands run on (None: this host)."""

    cluster: str | None = None
    partition: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    front_end: str | None = None

    def submission(self) -> Submission:
        """What a launcher needs to ``sbatch`` into the bridge's reservations here: the same
        partition, ``-M`` cluster and slurm.conf as the bridge's own commands, on the same host."""
        return Submission(
            kind="slurm",
            partition=self.partition,
            cluster=self.cluster,
            front_end=self.front_end,
            slurm_conf=self.env.get("SLURM_CONF"),
        )


def binding_of(cluster: SlurmCluster, front_end: str | None = None) -> SlurmBinding:
    env = {} if cluster.slurm_conf is None else {"SLURM_CONF": str(cluster.slurm_conf)}
    return SlurmBinding(
        cluster.name,
        cluster=cluster.cluster,
        partition=cluster.partition,
        env=env,
        front_end=front_end,
    )
