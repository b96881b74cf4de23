"""``coorm-bridge serve``: the service with its HTTP server, until SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from coorm_bridge import __version__
from coorm_bridge.core.batch import AdapterError
from coorm_bridge.http.app import Notifier, create_app
from coorm_bridge.http.server import ServerError, serve
from coorm_bridge.http.signals import ReloadSignal, StopSignals
from coorm_bridge.http.tls import TlsFiles
from coorm_bridge.service.config import Config, ConfigError, TcpListen, load_config
from coorm_bridge.service.wiring import build
from coorm_bridge.store import StoreError


def serve_command(path: str | None, level: str) -> int:
    """Read the configuration, run the daemon; exit status 2 for a bad file (a setting the
    batch system shows to be wrong included), 1 for a daemon that cannot start (its reason on
    one line), 0 after a clean stop."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per job run every second drowns what matters.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        config = load_config(path)
    except ConfigError as error:
        print(f"coorm-bridge: {error}", file=sys.stderr)
        return 2

    def ready(addresses: list[str]) -> None:
        where = " and ".join(addresses)
        print(f"coorm-bridge {__version__} listening on {where}", flush=True)
        print(f"  configuration: {config.source}; state: {config.bridge.database}", flush=True)
        if config.bridge.socket is not None:
            print(f"  launchers: export COORM_BRIDGE_URL={addresses[0]}", flush=True)

    try:
        run(config, on_ready=ready)
    except ConfigError as error:  # a setting the batch system refuses: the file's mistake
        print(f"coorm-bridge: {error}", file=sys.stderr)
        return 2
    except (ServerError, StoreError) as error:
        print(f"coorm-bridge: {error}", file=sys.stderr)
        return 1
    except AdapterError as error:
        # The clusters are read once at start: without them there is nothing to serve. Under
        # systemd, Restart=on-failure tries again.
        print(f"coorm-bridge: cannot start: the batch system: {error}", file=sys.stderr)
        return 1
    return 0


#: The cyclic collector's thresholds in the daemon (Python's are 700, 10, 10). A waiting
#: launcher's objects (its stream or long poll) live as long as it waits, so with thousands
#: waiting they outlive the young collections, and the full ones, which walk every object the
#: daemon holds, came every few seconds: at 10,000 waiting launchers, 48 full passes of up to
#: 2.5 s each (72 s in all) in a 6-minute run, each stalling every request. Most garbage here
#: has no cycles and goes with its last reference; these make a young pass every 50,000
#: allocations, a middle one every 5 young ones (every 20 let it grow to a million objects: a
#: pass that met one took 1.4 s instead of 0.3 s, and a request's start waited for it), and a
#: full one at most every 400 middle ones.
GC_THRESHOLDS = (50_000, 5, 400)


def run(config: Config, on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Run the daemon until SIGTERM or SIGINT. The stop answers the long polls at once (the
    notifier), then the service closes; signals that come meanwhile are ignored. SIGHUP
    re-reads the file's limits, admins and tokens (:mod:`coorm_bridge.service.settings`)."""
    service = build(config)
    with (
        StopSignals() as signals,  # held from when it serves until the service is closed
        ReloadSignal(lambda: service.settings.reload(by="SIGHUP")),
    ):
        try:
            service.loop.start()
            # What start-up allocated lives as long as the daemon: keep it out of the cyclic
            # collector's full passes, which otherwise stall every request for 100 ms and more.
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            listen = config.bridge.tcp
            app = create_app(service)
            notifier: Notifier = app.state.notifier
            serve(
                app,
                unix_path=Path(config.bridge.socket_path),
                tcp=None if listen is None else (listen.host, listen.port),
                tls=_tls_files(listen),
                socket_mode=_socket_mode(config),
                on_ready=on_ready,
                on_stopping=notifier.stop,
                signals=signals,
                connections=config.bridge.connections,
            )
        finally:
            service.close()
            # The interpreter's exit ends with a full collection of what was not frozen: at
            # 10,000 sessions, 1.2 s of the stop. Nothing is left to collect that matters now.
            gc.freeze()


def _tls_files(listen: TcpListen | None) -> TlsFiles | None:
    if listen is None or listen.certificate is None or listen.key is None:
        return None
    return TlsFiles(certificate=listen.certificate, key=listen.key)


def _socket_mode(config: Config) -> int:
    """A configured (site) socket is for every local user, identity coming from the peer's uid;
    the default one, in a user's runtime directory, is for that user alone."""
    return 0o666 if config.bridge.socket is not None else 0o600
