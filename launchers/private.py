"""A private daemon for one run: ``coorm-bridge serve`` on the embedded mock platform, in a
temporary folder, stopped (by its PID) and removed afterwards.

What ``coorm-bridge demo --start-daemon`` and ``coorm-launch --start-daemon`` stand on, so that
a first run needs no daemon set up beforehand. The daemon is a separate process started from
this interpreter's installation; nothing of the service is imported here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coorm_bridge.launchers.client import BridgeClient, BridgeError

#: The mock platform, short fair-start so that ghosts are visible in a short run.
CONFIG = """\
[bridge]
socket = "bridge.sock"
state_dir = "state"
[policy]
interval = 0.5
fair_start = 5
[placement]
poll_interval = 2
[adapter]
kind = "mock"
"""


class PrivateDaemonError(Exception):
    """The private daemon did not start; the message carries its log."""


@contextmanager
def private_daemon(run_jobs: bool = False) -> Iterator[str]:
    """A daemon of our own on the mock platform; yields its URL. ``run_jobs``: its front end
    runs jobs even as root (it is the caller's own daemon, for the caller's own jobs)."""
    folder = Path(tempfile.mkdtemp(prefix="coorm-private-", dir="/tmp"))
    (folder / "coorm-bridge.toml").write_text(CONFIG + ("run_jobs = true\n" if run_jobs else ""))
    log = (folder / "daemon.log").open("w")
    # cwd: the temporary folder, so that a source tree never shadows the installed package.
    command = serve_command(folder / "coorm-bridge.toml")
    daemon = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
    url = f"unix://{folder / 'bridge.sock'}"
    try:
        wait_ready(url, daemon, folder / "daemon.log")
        print(f"started a private daemon (pid {daemon.pid}) on the mock platform", flush=True)
        yield url
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        if os.environ.get("COORM_DEMO_KEEP"):
            print(f"daemon files kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def serve_command(config: Path | None) -> list[str]:
    """``coorm-bridge serve --config CONFIG`` from this interpreter's installation (run it from
    outside a source tree, which would shadow the installed package); with no ``config``, the
    defaults (unless ``$COORM_BRIDGE_CONFIG`` names a file)."""
    main = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"
    where = [] if config is None else ["--config", str(config)]
    return [sys.executable, "-c", main, "serve", *where]


def wait_ready(url: str, daemon: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until the daemon at ``url`` answers ``/v1/health``; PrivateDaemonError with its log if
    it exits first or stays silent ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with BridgeClient(url, timeout=2) as client:
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                raise PrivateDaemonError(
                    f"the daemon exited ({daemon.returncode}):\n{log.read_text()}"
                )
            try:
                client.health()
                return
            except BridgeError:
                time.sleep(0.1)
    raise PrivateDaemonError(f"the daemon did not answer within {timeout:g} s:\n{log.read_text()}")
