"""The real daemon of ``coorm-sim validate``: ``coorm-bridge serve`` on the embedded mock, set
up as the simulator's run is.

The platform is the simulator's (:func:`~coorm_bridge.sim.resources.paper_platform`: ``n``
clusters of ``HOSTS`` hosts, their speeds and links, no background load), on a wall clock
``speedup`` times as fast as the host's. The policy's fair-start is the simulator's (platform
seconds, as every time the policy handles); what the daemon counts in real seconds is divided by
the speed-up so that it means the same in platform time: the re-policy interval, and the
clusters' polling (:data:`POLL_S` platform seconds, the freshness of the free hosts the policy
sees; the simulator's are always fresh). Every launcher is one user over TCP with one token,
allowed the whole platform (the simulator has no per-user limits).

The daemon is a separate process, started from this interpreter's installation and stopped by
its PID; its CPU time is read from ``/proc``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import requests

from coorm_bridge.batchsim import PlatformSpec
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.private import PrivateDaemonError, serve_command, wait_ready
from coorm_bridge.sim.validate_launchers import PlatformClock

#: Platform seconds between two polls of a cluster.
POLL_S = 2.0
#: The user every launcher connects as.
USER = "validate"
#: Health calls made to read the platform's clock at its tick.
CLOCK_READS = 400


class DaemonFailed(RuntimeError):
    """The daemon did not start, or stopped during the run; the message ends with its log."""


def platform_toml(platform: PlatformSpec) -> str:
    """The platform file for ``platform`` (clusters and links: the simulator's uses no more)."""
    lines: list[str] = []
    for cluster in platform.clusters:
        lines.append("[[cluster]]")
        dumped = cluster.model_dump(mode="json", exclude_defaults=True, exclude={"rules"})
        lines += [f"{key} = {json.dumps(value)}" for key, value in dumped.items()]
    for link in platform.links:
        lines.append("[[link]]")
        dumped = link.model_dump(mode="json", exclude_defaults=True)
        lines += [f"{key} = {json.dumps(value)}" for key, value in dumped.items()]
    return "\n".join(lines) + "\n"


def daemon_toml(port: int, token: str, *, speedup: float, interval: float, fair_start: int) -> str:
    """The daemon's configuration (see the module docstring)."""
    return f"""\
[bridge]
socket = "bridge.sock"
state_dir = "state"
tcp = {{ host = "127.0.0.1", port = {port} }}
tokens = {{ "{token}" = "{USER}" }}
connections = {{ idle_timeout = 3600 }}
[policy]
interval = {interval / speedup!r}
fair_start = {fair_start}
[placement]
poll_interval = {POLL_S / speedup!r}
[limits]
held_share = 1.0
duration = 1000000000
[adapter]
kind = "mock"
platform = "platform.toml"
speedup = {float(speedup)!r}
"""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (every thread), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime and stime: fields 14 and 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RealDaemon:
    """``coorm-bridge serve`` over a temporary folder, as a context manager."""

    def __init__(
        self, platform: PlatformSpec, *, speedup: float, interval: float, fair_start: int
    ) -> None:
        self.speedup = speedup
        self.folder = Path(tempfile.mkdtemp(prefix="coorm-validate-"))
        self.port = free_port()
        self.token = secrets.token_urlsafe(24)
        (self.folder / "platform.toml").write_text(platform_toml(platform))
        config = self.folder / "coorm-bridge.toml"
        config.write_text(
            daemon_toml(
                self.port, self.token, speedup=speedup, interval=interval, fair_start=fair_start
            )
        )
        config.chmod(0o600)
        self.log = self.folder / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RealDaemon:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - this interpreter's own daemon
                serve_command(self.folder / "coorm-bridge.toml"),
                cwd=self.folder,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_ready(f"unix://{self.folder / 'bridge.sock'}", self.process, self.log)
        except PrivateDaemonError as error:
            self.stop()
            raise DaemonFailed(str(error)) from None
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def check(self) -> None:
        """DaemonFailed if the daemon has stopped."""
        if self.process is not None and self.process.poll() is not None:
            raise DaemonFailed(f"the daemon exited ({self.process.returncode}): {self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def errors(self) -> list[str]:
        """The lines of its log at WARNING or above (a clean run has none)."""
        text = self.log.read_text(errors="replace")
        return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]

    def clock(self) -> PlatformClock:
        """The platform's clock as launchers should read it: ``/v1/health``'s time, read until
        it ticks, at the moment it ticked (the middle of the two calls around the tick, a few
        milliseconds wide: a fraction of a platform second at the speed-ups used)."""
        with BridgeClient(self.url, token=self.token, timeout=10) as client:
            before = time.time()
            last = client.health().time
            for _ in range(CLOCK_READS):
                sent = time.time()
                now = client.health().time
                if now != last:  # it ticked after the last call was sent, before this one ended
                    middle = (before + time.time()) / 2
                    return PlatformClock(speedup=self.speedup, platform=now, wall=middle)
                before, last = sent, now
        raise DaemonFailed(f"the platform's clock did not move in {CLOCK_READS} calls")

    def metrics(self) -> dict[str, float]:
        """The counters of its ``/metrics`` (``coorm_policy_passes``...), by name."""
        answer = requests.get(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.token}"}, timeout=10
        )
        answer.raise_for_status()
        found: dict[str, float] = {}
        for line in answer.text.splitlines():
            if line.startswith("coorm_") and "{" not in line:
                name, _, value = line.partition(" ")
                found[name.removesuffix("_total")] = float(value)
        return found

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it does not stop within 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
