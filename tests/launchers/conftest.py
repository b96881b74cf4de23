"""A bridge daemon on the mock platform and ``coorm-launch`` processes, for the loop's tests.

Each daemon and launcher is a process of its own, started here and stopped by its PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import daemons

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
SCRIPT = Path(sys.executable).with_name("coorm-launch")


class Daemon(daemons.Daemon):
    """The launchers' daemon: the mock with two clusters, its front end running jobs. The tests
    hold hosts as the launcher's own user (the test runs both), so no cap on held hosts."""

    def __init__(self, folder: Path, **adapter: Any) -> None:
        limits = {**daemons.LIMITS, "held_hosts": 10**6}
        config = daemons.config({**daemons.MOCK, "run_jobs": True, **adapter}, limits=limits)
        super().__init__(folder, config, PLATFORM)


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
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    """The launchers' daemon, started (tests/conftest.py stops it and the jobs it left)."""
    return make_daemon(cls=Daemon).start()


@pytest.fixture
def launch(daemon: Daemon) -> Iterator[Callable[..., Launcher]]:
    launched: list[Launcher] = []

    def start(app: Path, *args: str) -> Launcher:
        launched.append(Launcher(daemon, app, *args))
        return launched[-1]

    yield start
    for launcher in launched:
        launcher.stop()
