"""Identity and output against a real ``coorm-bridge serve`` process: real uids whose names the
system's user database gives with '@' or '$', and ``coorm-bridge status`` printing what users
wrote without letting it reach the terminal raw.

Each test starts its own daemon and stops only that process, by PID; the users it creates are
deleted by name at the end.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from coorm_bridge.store import Store

pytestmark = pytest.mark.daemon

SERVE = "import sys; from coorm_bridge.cli.main import main; sys.exit(main())"
PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n'
CONFIG = """
[bridge]
socket = "bridge.sock"
state_dir = "state"
{bridge}
[policy]
interval = 0.2
[placement]
poll_interval = 0.5
[adapter]
kind = "mock"
platform = "platform.toml"
"""


class Daemon:
    """One ``coorm-bridge serve`` over a folder of its own; ``bridge`` adds lines to [bridge]."""

    def __init__(self, folder: Path, bridge: str = "") -> None:
        self.folder = folder
        (folder / "platform.toml").write_text(PLATFORM)
        self.config = folder / "coorm-bridge.toml"
        self.config.write_text(CONFIG.format(bridge=bridge))
        self.config.chmod(0o600)
        self.log = folder / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def unix(self) -> str:
        return f"unix://{self.folder / 'bridge.sock'}"

    def start(self) -> Daemon:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SERVE, "serve", "--config", str(self.config)],
                cwd=self.folder,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        with BridgeClient(self.unix, timeout=2) as client:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.log.read_text()
                try:
                    client.health()
                    return self
                except BridgeError:
                    time.sleep(0.1)
        raise AssertionError(f"the daemon did not start:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def folder() -> Iterator[Path]:
    # Short: a Unix socket path has at most 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="cbs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_daemon(folder: Path) -> Iterator[type[Daemon]]:
    made: list[Daemon] = []

    def make(bridge: str = "") -> Daemon:
        made.append(Daemon(folder, bridge))
        return made[-1]

    yield make  # type: ignore[misc]
    for daemon in made:
        daemon.stop()


# -- real users -----------------------------------------------------------------------------------

CAN_ADD_USERS = os.geteuid() == 0 and all(map(shutil.which, ("useradd", "userdel", "curl")))


@contextlib.contextmanager
def system_users(names: list[str]) -> Iterator[list[pwd.struct_passwd]]:
    """Users added to the system's database for the test, deleted afterwards by name."""
    added: list[str] = []
    try:
        for name in names:
            subprocess.run(
                ["useradd", "--badname", "-M", "-N", "-s", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
            )
            added.append(name)
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in added:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def as_user(
    user: pwd.struct_passwd, socket: Path, method: str, path: str, body: str = ""
) -> object:
    """One API call with curl run under ``user``'s uid: the daemon sees that uid as the peer."""
    command = ["curl", "-q", "-sS", "--fail-with-body", "--unix-socket", str(socket)]
    command += ["-X", method, "-H", "Content-Type: application/json"]
    if body:
        command += ["--data", body]
    result = subprocess.run(
        [*command, f"http://bridge/v1{path}"],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        env={"PATH": os.environ["PATH"], "HOME": "/"},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(result.stdout)


@pytest.mark.skipif(not CAN_ADD_USERS, reason="needs root, useradd, userdel and curl")
def test_real_users_named_with_at_and_dollar_own_their_sessions(make_daemon, folder):
    folder.chmod(0o755)  # other users must reach the (world-writable) socket
    daemon = make_daemon().start()
    socket = folder / "bridge.sock"
    names = [f"ct{os.getpid()}@example.org", f"CT{os.getpid()}$"]
    with system_users(names) as users:
        sessions = {}
        for user in users:
            answer = as_user(user, socket, "POST", "/sessions", '{"name": "run"}')
            sessions[user.pw_name] = answer["session"]  # type: ignore[index]
        for user in users:
            listed = as_user(user, socket, "GET", "/sessions")
            assert [(s["session"], s["owner"]) for s in listed] == [  # type: ignore[attr-defined]
                (sessions[user.pw_name], user.pw_name)
            ]
    with BridgeClient(daemon.unix) as client:  # root is no admin here: it sees neither
        assert client.sessions() == []


# -- what status prints ---------------------------------------------------------------------------


def test_status_prints_stored_names_escaped(make_daemon, folder):
    daemon = make_daemon().start()
    # A name stored by an earlier version, which took any text: written behind the daemon's back.
    with Store(folder / "state" / "bridge.sqlite") as store:
        row = store.create_session(
            getpass.getuser(), "\x1b[2J\x1b]0;pwned\x07\u202eevil", Filter(), ["c1"], 1
        )
    result = subprocess.run(
        [sys.executable, "-c", SERVE, "status"],
        env={**os.environ, "COORM_BRIDGE_URL": daemon.unix},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=folder,
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith(row.id))
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\u202eevil" in line
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.stdout
