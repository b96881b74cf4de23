"""A bridge daemon on the mock platform and ``coorm-launch`` processes, for the loop's tests.

Each daemon and launcher is a process of its own, started here and stopped by its PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coorm_bridge.launchers.client import BridgeClient, BridgeError

PLATFORM = """
[[cluster]]
name = "c1"
hosts = 8
cores_per_host = 2
[[cluster]]
name = "c2"
hosts = 4
cores_per_host = 2
"""
CONFIG = """
[bridge]
socket = "bridge.sock"
state_dir = "state"
[policy]
interval = 0.2
fair_start = 2
[placement]
poll_interval = 0.5
[adapter]
kind = "mock"
platform = "platform.toml"
run_jobs = true
"""
SCRIPT = Path(sys.executable).with_name("coorm-launch")


class Daemon:
    """``coorm-bridge serve`` over a folder of its own; restartable on the same state."""

    def __init__(self, folder: Path, extra: str = "") -> None:
        self.folder = folder
        (folder / "platform.toml").write_text(PLATFORM)
        self.config = folder / "coorm-bridge.toml"
        self.config.write_text(CONFIG + extra)
        self.log = folder / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.folder / 'bridge.sock'}"

    def start(self) -> Daemon:
        command = [
            str(Path(sys.executable).with_name("coorm-bridge")),
            "serve",
            "--config",
            str(self.config),
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        with BridgeClient(self.url, timeout=2) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.log.read_text()
                try:
                    client.health()
                    return self
                except BridgeError:
                    time.sleep(0.1)
        raise AssertionError(f"the daemon did not start:\n{self.log.read_text()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self) -> BridgeClient:
        return BridgeClient(self.url, timeout=10)


class Launcher:
    """One ``coorm-launch APP.toml`` process; its output goes to files (plain lines)."""

    def __init__(self, daemon: Daemon, app: Path, *args: str) -> None:
        self.folder = app.parent
        self.out = self.folder / f"{app.stem}.out"
        self.err = self.folder / f"{app.stem}.err"
        env = {**os.environ, "COORM_BRIDGE_URL": daemon.url}
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                [str(SCRIPT), str(app), *args], cwd=self.folder, stdout=out, stderr=err, env=env
            )

    def output(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """Wait until the output holds ``text``; the output."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            said = self.output()
            if text in said:
                return said
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} in the launcher's output:\n{self.output()}")

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def folder() -> Iterator[Path]:
    # Short: a Unix socket path has at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="cbl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(folder: Path) -> Iterator[Daemon]:
    started = Daemon(folder).start()
    yield started
    started.stop()
    # The mock's jobs run under supervisors that outlive the daemon on purpose: stop any left.
    for pid_file in folder.glob("state/jobs/*/*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


@pytest.fixture
def launch(daemon: Daemon) -> Iterator[Callable[..., Launcher]]:
    launched: list[Launcher] = []

    def start(app: Path, *args: str) -> Launcher:
        launched.append(Launcher(daemon, app, *args))
        return launched[-1]

    yield start
    for launcher in launched:
        launcher.stop()
