"""The mock adapter: the bridge's :class:`~coorm_bridge.adapters.base.Adapter` over the simulated
batch system of :mod:`coorm_bridge.batchsim`, its plug-in (``kind = "mock"``), and the front end
that runs launchers' jobs as processes on this host (the simulated batch system has no commands a
launcher could submit with). ``python -m coorm_bridge.adapters.mock STATE_DIR`` shows what a
daemon's saved platform holds.
"""
