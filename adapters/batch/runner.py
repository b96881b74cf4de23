"""Running a batch system's commands: here (subprocess) or on a front-end over SSH (paramiko).

Both take an argument vector, never a shell string. Over SSH the remote side has a shell, so the
vector is quoted with :func:`shlex.join`; the host key must already be known (no trust on first
use), and one connection is opened once and reused by every command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from coorm_bridge.adapters.batch.settings import SshSettings
from coorm_bridge.core.batch import AdapterError, Unavailable


@dataclass(frozen=True, slots=True)
class Completed:
    """What a command did: its exit status and its output, decoded."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(ABC):
    """Runs one command; raises Unavailable when it cannot get an answer in time."""

    @abstractmethod
    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed: ...

    def close(self) -> None:  # noqa: B027 - most runners hold nothing
        """Release the connection, if any."""


class LocalRunner(Runner):
    """The batch system's client commands on this host."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env or {})
        """Added to every command's environment (say SLURM_CONF for one controller)."""

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        full = {**os.environ, **self.env, **(env or {})}
        try:
            done = subprocess.run(  # noqa: S603 - an argument vector, no shell
                list(argv), env=full, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as error:
            said = said_so_far(error.stderr)
            raise Unavailable(f"{argv[0]} did not answer within {timeout:g} s{said}") from error
        except FileNotFoundError as error:
            raise AdapterError(f"{argv[0]} is not installed here") from error
        return Completed(done.returncode, done.stdout, done.stderr)


#: How much of what a command printed before it timed out goes into the error, at most.
SAID_MAX = 600


def said_so_far(stderr: bytes | str | None) -> str:
    """``; it said: ...`` with the last distinct lines a command printed on stderr before it
    was stopped ("" when none): a command that waits and retries, as Slurm's do for a missing
    slurm.conf, usually said why. (TimeoutExpired holds bytes even in text mode.)"""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr or ""
    lines = list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))
    said = " / ".join(lines)
    if not said:
        return ""
    if len(said) > SAID_MAX:
        said = "…" + said[-(SAID_MAX - 1) :]
    return f"; it said: {said}"


@dataclass(frozen=True)
class SshTarget:
    """Where the commands run remotely, and how to log in."""

    host: str
    port: int = 22
    user: str | None = None
    key_file: Path | None = None
    known_hosts: Path | None = None
    """Host keys to trust besides the user's ~/.ssh/known_hosts; unknown hosts are refused."""
    connect_timeout: float = 10


class SshRunner(Runner):
    """The batch system's client commands on a front-end, over one reused SSH connection."""

    def __init__(self, target: SshTarget, env: Mapping[str, str] | None = None) -> None:
        self.target = target
        self.env = dict(env or {})
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _connected(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is not None and transport is not None and transport.is_active():
                return client
            client = paramiko.SSHClient()
            client.load_system_host_keys()
            if self.target.known_hosts is not None:
                client.load_host_keys(str(self.target.known_hosts))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            t = self.target
            try:
                client.connect(
                    t.host,
                    port=t.port,
                    username=t.user,
                    key_filename=None if t.key_file is None else str(t.key_file),
                    timeout=t.connect_timeout,
                    banner_timeout=t.connect_timeout,
                    auth_timeout=t.connect_timeout,
                    allow_agent=False,
                    look_for_keys=t.key_file is None,
                )
            except paramiko.BadHostKeyException as error:
                raise AdapterError(f"{t.host}: the host key changed: {error}") from error
            except paramiko.SSHException as error:
                # RejectPolicy lands here for an unknown host: a configuration problem.
                raise AdapterError(f"ssh {t.host}:{t.port}: {error}") from error
            except OSError as error:
                raise Unavailable(f"ssh {t.host}:{t.port}: {error}") from error
            self._client = client
            return client

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        variables = [f"{k}={v}" for k, v in {**self.env, **(env or {})}.items()]
        command = shlex.join(["env", *variables, *argv]) if variables else shlex.join(argv)
        client = self._connected()
        channel: paramiko.Channel | None = None
        try:
            _, stdout, stderr = client.exec_command(command, timeout=timeout)
            channel = stdout.channel
            out = stdout.read().decode("utf-8", "replace")
            err = stderr.read().decode("utf-8", "replace")
            status = stdout.channel.recv_exit_status()
            transport = client.get_transport()
            # -1 is also "killed by a signal"; only a dead connection means no answer at all.
            if status == -1 and (transport is None or not transport.is_active()):
                raise EOFError("the connection closed before the command's exit status")
        except (TimeoutError, EOFError, paramiko.SSHException, OSError) as error:
            said = _stderr_received(channel) if isinstance(error, TimeoutError) else ""
            self.close()  # a broken connection is reopened by the next command
            raise Unavailable(f"ssh {self.target.host}: {argv[0]}: {error}{said}") from error
        return Completed(status, out, err)

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _stderr_received(channel: paramiko.Channel | None) -> str:
    """:func:`said_so_far` of what a timed-out remote command had sent on stderr."""
    try:
        if channel is not None and channel.recv_stderr_ready():
            return said_so_far(channel.recv_stderr(64 * 1024))
    except (OSError, paramiko.SSHException):
        pass  # the connection is going: the timeout is news enough
    return ""


def make_runner(ssh: SshSettings | None) -> Runner:
    """Commands here, or on the front-end of ``[adapter.ssh]``."""
    if ssh is None:
        return LocalRunner()
    return SshRunner(
        SshTarget(
            host=ssh.host,
            port=ssh.port,
            user=ssh.user,
            key_file=ssh.key_file,
            known_hosts=ssh.known_hosts,
            connect_timeout=ssh.connect_timeout,
        )
    )
