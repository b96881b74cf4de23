"""Assembling the daemon from its configuration: adapter, store, bridge, loop, HTTP service."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from pathlib import Path

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.registry import AdapterContext, create_adapter
from coorm_bridge.http.app import create_app
from coorm_bridge.http.server import serve
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.config import Config
from coorm_bridge.service.loop import Loop
from coorm_bridge.store import Store

log = logging.getLogger(__name__)


def make_adapter(config: Config) -> Adapter:
    """The adapter of the installed plug-in the ``[adapter]`` table's kind names, given the
    state folder (made private, as for the database) for whatever state it keeps."""
    state = config.bridge.state_path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    return create_adapter(config.adapter, AdapterContext(state_dir=state))


def open_store(config: Config) -> Store:
    """The database, in a state folder only its owner can read (sessions name users)."""
    path = config.bridge.database
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return Store(path)


def run(config: Config, on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Run the daemon until SIGTERM or SIGINT."""
    adapter = make_adapter(config)
    store = open_store(config)
    bridge = Bridge(config, adapter, store)
    loop = Loop(bridge)
    loop.start()
    # What start-up allocated lives as long as the daemon: keep it out of the cyclic
    # collector's full passes, which otherwise stall every request for 100 ms and more.
    gc.freeze()
    tcp = None if config.bridge.tcp is None else (config.bridge.tcp.host, config.bridge.tcp.port)
    try:
        serve(
            create_app(bridge),
            unix_path=Path(config.bridge.socket_path),
            tcp=tcp,
            socket_mode=_socket_mode(config),
            on_ready=on_ready,
        )
    finally:
        loop.stop()
        bridge.close()
        store.close()


def _socket_mode(config: Config) -> int:
    """A configured (site) socket is for every local user, identity coming from the peer's uid;
    the default one, in a user's runtime directory, is for that user alone."""
    return 0o666 if config.bridge.socket is not None else 0o600
