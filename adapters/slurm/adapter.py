"""SlurmAdapter: the generic :class:`~coorm_bridge.adapters.batch.adapter.BatchAdapter` with a
Slurm back-end (commands, slurmrestd or pyslurm) and one binding per configured cluster."""

from __future__ import annotations

from coorm_bridge.adapters.batch.adapter import BatchAdapter
from coorm_bridge.adapters.batch.backend import Backend
from coorm_bridge.adapters.slurm.binding import SlurmBinding, binding_of
from coorm_bridge.adapters.slurm.settings import SlurmSettings


class SlurmAdapter(BatchAdapter[SlurmBinding]):
    """One or more Slurm clusters (controllers, ``-M`` clusters or partitions) as coorm clusters."""

    system = "Slurm"

    def __init__(self, settings: SlurmSettings, backend: Backend[SlurmBinding]) -> None:
        front_end = None if settings.ssh is None else settings.ssh.host
        bindings = [binding_of(c, front_end) for c in settings.clusters]
        super().__init__(settings, backend, bindings)
