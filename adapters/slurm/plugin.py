"""``[adapter]`` with ``kind = "slurm"``: a SlurmAdapter with the back-end the settings name."""

from __future__ import annotations

from coorm_bridge.adapters.batch.backend import Backend
from coorm_bridge.adapters.batch.runner import make_runner
from coorm_bridge.adapters.registry import AdapterContext, AdapterPlugin
from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.cli_backend import SlurmCliBackend
from coorm_bridge.adapters.slurm.pyslurm_backend import PyslurmBackend
from coorm_bridge.adapters.slurm.rest_backend import RestBackend
from coorm_bridge.adapters.slurm.settings import SlurmSettings
from coorm_bridge.core.batch import AdapterError


def make_backend(settings: SlurmSettings) -> Backend[SlurmBinding]:
    cli = SlurmCliBackend(make_runner(settings.ssh), timeout=settings.timeout)
    if settings.backend == "cli":
        return cli
    if settings.backend == "rest":
        if settings.rest is None:  # the settings refuse this; a bare constructor may not
            raise AdapterError("backend = 'rest' needs an [adapter.rest] table")
        return RestBackend(settings.rest, cli=cli, timeout=settings.timeout)
    # Only where an installed pyslurm matches the running Slurm; it says why not otherwise.
    return PyslurmBackend(settings, cli)


def make_slurm_adapter(
    settings: SlurmSettings, context: AdapterContext | None = None
) -> SlurmAdapter:
    """The adapter; Slurm keeps all the state, so the daemon's context is not needed."""
    return SlurmAdapter(settings, make_backend(settings))


PLUGIN = AdapterPlugin(kind="slurm", settings=SlurmSettings, create=make_slurm_adapter)
