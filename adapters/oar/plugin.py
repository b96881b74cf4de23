"""``[adapter]`` with ``kind = "oar"``: an OarAdapter with the back-end the settings name."""

from __future__ import annotations

import getpass

from coorm_bridge.adapters.batch.backend import Backend
from coorm_bridge.adapters.batch.runner import make_runner
from coorm_bridge.adapters.oar.adapter import OarAdapter
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.adapters.oar.cli_backend import OarCliBackend
from coorm_bridge.adapters.oar.rest_backend import OarRestBackend
from coorm_bridge.adapters.oar.settings import OarSettings
from coorm_bridge.adapters.registry import AdapterContext, AdapterPlugin


def make_backend(settings: OarSettings) -> Backend[OarBinding]:
    if settings.backend == "rest":
        assert settings.rest is not None  # the settings refuse rest without its table
        return OarRestBackend(
            settings.rest,
            submit_as=settings.submit_as,
            timeout=settings.timeout,
            horizon=settings.horizon_days * 86400,
        )
    identity = getpass.getuser()
    if settings.ssh is not None and settings.ssh.user is not None:
        identity = settings.ssh.user
    return OarCliBackend(
        make_runner(settings.ssh),
        identity=identity,
        submit_as=settings.submit_as,
        timeout=settings.timeout,
        horizon=settings.horizon_days * 86400,
    )


def make_oar_adapter(settings: OarSettings, context: AdapterContext | None = None) -> OarAdapter:
    """The adapter; OAR keeps all the state, so the daemon's context is not needed."""
    return OarAdapter(settings, make_backend(settings))


PLUGIN = AdapterPlugin(kind="oar", settings=OarSettings, create=make_oar_adapter)
