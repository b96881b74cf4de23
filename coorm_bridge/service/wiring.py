"""The service assembled from its configuration: adapter, store, bridge and loop.

The HTTP server goes on top of it in ``coorm-bridge serve`` (:mod:`coorm_bridge.cli.serve`);
tests and tools can build the same service without one.
"""

from __future__ import annotations

from dataclasses import dataclass

from coorm_bridge.adapters.base import Adapter
from coorm_bridge.adapters.registry import AdapterContext, create_adapter
from coorm_bridge.core.batch import Misconfigured
from coorm_bridge.service.bridge import Bridge
from coorm_bridge.service.config import Config, ConfigError
from coorm_bridge.service.loop import Loop
from coorm_bridge.store import Store
from coorm_bridge.store.lock import StateLock


def make_adapter(config: Config) -> Adapter:
    """The adapter of the installed plug-in the ``[adapter]`` table's kind names, given the
    state folder (made private, as for the database) for whatever state it keeps."""
    state = config.bridge.state_path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    context = AdapterContext(state_dir=state, private=config.bridge.private)
    return create_adapter(config.adapter, context)


def open_store(config: Config) -> Store:
    """The database, in a state folder only its owner can read (sessions name users)."""
    path = config.bridge.database
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return Store(path)


@dataclass
class Service:
    """The daemon's parts, in the order they are made and the reverse of the order they close."""

    lock: StateLock
    adapter: Adapter
    store: Store
    bridge: Bridge
    loop: Loop

    def close(self) -> None:
        try:
            self.loop.stop()
            self.bridge.close()
            self.store.close()
        finally:
            self.lock.release()


def build(config: Config) -> Service:
    """Lock the state folder, then make adapter, store, bridge and loop (not started); raises
    StoreError when another daemon holds the folder or the database cannot be used,
    ConfigError when the batch system shows a setting of the file to be wrong (a partition it
    does not have), AdapterError when it cannot say its clusters (one that does not answer)."""
    state = config.bridge.state_path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = StateLock(state)
    lock.acquire()
    adapter = store = None
    try:
        adapter = make_adapter(config)
        store = open_store(config)
        bridge = Bridge(config, adapter, store)
    except BaseException as error:
        if store is not None:
            store.close()
        if adapter is not None:
            adapter.close()
        lock.release()
        if isinstance(error, Misconfigured):
            raise misconfigured(config, error) from error
        raise
    return Service(lock, adapter, store, bridge, Loop(bridge))


def misconfigured(config: Config, error: Misconfigured) -> ConfigError:
    """A setting the batch system refuses, as a mistake in the file: one line naming the file
    and the key as written there (``adapter.cluster.0.partition``), then why."""
    return ConfigError(f"{config.source}: adapter.{error.key}: {error.reason}")
