"""A private, real OpenSSH server for tests of what runs over SSH (Slurm's and OAR's commands).

``running_sshd(folder)`` starts ``/usr/sbin/sshd -D -e -f <config>`` as root on a free loopback
port with its own host key, a client key generated for the test in its authorized_keys, and a
known_hosts file naming that host key for ``[127.0.0.1]:PORT``. It is stopped by its PID (and
its per-connection children, found through /proc as descendants of that PID): never any other
sshd.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import pytest

from coorm_bridge.adapters.batch.runner import SshTarget
from tests.daemons import free_port

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; made by its service otherwise
START_TIMEOUT = 10.0


def _unavailable(reason: str, required_by: str) -> None:
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{reason} (and {required_by}=1)", pytrace=False)
    pytest.skip(reason)


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return path.with_suffix(".pub").read_text().strip()


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (sshd forks one per connection), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        todo += children
    return found


@dataclass
class Sshd:
    """A private sshd in ``directory``: start() and stop() it (same port every time)."""

    directory: Path
    port: int = 0
    host_key: str = ""
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def client_key(self) -> Path:
        return self.directory / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def log(self) -> Path:
        return self.directory / "sshd.log"

    def prepare(self) -> None:
        self.host_key = keygen(self.directory / "host_key", "coorm-test-host")
        client = keygen(self.client_key, "coorm-test-client")
        (self.directory / "authorized_keys").write_text(client + "\n")

    def _configure(self) -> Path:
        key_type, key = self.host_key.split()[:2]
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {key_type} {key}\n")
        config = self.directory / "sshd_config"
        config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.directory / 'host_key'}\n"
            f"AuthorizedKeysFile {self.directory / 'authorized_keys'}\n"
            f"PidFile {self.directory / 'sshd.pid'}\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "X11Forwarding no\n"
            "AllowTcpForwarding no\n"
            "LogLevel INFO\n"
        )
        return config

    def start(self) -> None:
        """Start on ``port`` (a free one chosen the first time; a taken one is retried)."""
        for _attempt in range(5):
            if not self.port:
                self.port = free_port()
            config = self._configure()
            self._log = open(self.log, "ab")  # noqa: SIM115 - closed by stop()
            self.process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            )  # fmt: skip
            if self._wait_ready():
                return
            self.stop()
            if "Address already in use" not in self.log.read_text(errors="replace"):
                break
            self.port = 0
        pytest.fail(f"sshd did not start:\n{self.log.read_text(errors='replace')}", pytrace=False)

    def _wait_ready(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.process.poll() is None:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe,
            ):
                if probe.recv(64).startswith(b"SSH-2.0-"):
                    return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        """Stop this sshd (its PID) and the connections it forked; nothing else."""
        if self.process is not None:
            pid = self.process.pid
            for child in _descendants(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGTERM)
            if self.process.poll() is None:
                os.kill(pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def accepted(self) -> int:
        """Logins so far (sshd -e logs each on stderr)."""
        return self.log.read_text(errors="replace").count("Accepted publickey for")

    def target(self, **changes: object) -> SshTarget:
        base = SshTarget(
            host="127.0.0.1", port=self.port, user="root", key_file=self.client_key,
            known_hosts=self.known_hosts, connect_timeout=5,
        )  # fmt: skip
        return replace(base, **changes)


@contextlib.contextmanager
def running_sshd(directory: Path, required_by: str = "COORM_REQUIRE_SLURM") -> Iterator[Sshd]:
    """A private sshd; skipped without OpenSSH's server or root, unless the environment
    variable ``required_by`` is 1 (CI), when it fails instead."""
    if not SSHD.is_file():
        _unavailable(
            f"OpenSSH's server is not installed ({SSHD}): install openssh-server", required_by
        )
    if os.geteuid() != 0:
        _unavailable("the test sshd must run as root", required_by)
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    sshd = Sshd(directory)
    sshd.prepare()
    sshd.start()
    try:
        yield sshd
    except BaseException:
        # A failed test shows its output: this sshd's log says which side stalled.
        print(f"--- {sshd.log} ---\n{sshd.log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        sshd.stop()
