"""``coorm-bridge serve`` for tests that need a real daemon: a folder of its own (configuration,
socket, state, log), started from this interpreter's installation, waited for, and stopped by its
PID only; and :func:`config`, which writes a daemon's TOML from the few values a test changes.

tests/conftest.py holds the fixtures over these (``folder``, ``make_daemon``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from coorm_bridge.adapters.mock import containment
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.private import PrivateDaemonError, serve_command, wait_ready


def end_jobs(folders: Iterable[Path]) -> None:
    """Kill whatever the mock's jobs in ``folders`` (each ``jobs/<job>/``) left, supervisors
    included, and remove their cgroups: they outlive a daemon on purpose."""
    for folder in folders:
        for name in ("supervisor.pid", "job.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int((folder / name).read_text()), signal.SIGKILL)
        cgroup = containment.recorded(folder)
        if cgroup is not None:
            containment.remove(cgroup)
        containment.kill_all(containment.key(folder), None)


#: The mock platform of most daemon tests: two clusters of 8 and 4 hosts.
PLATFORM = '[[cluster]]\nname = "c1"\nhosts = 8\n[[cluster]]\nname = "c2"\nhosts = 4\n'
#: The [adapter] table of a daemon on the mock platform of its folder's platform.toml.
MOCK = {"kind": "mock", "platform": "platform.toml"}
#: The [policy] and [placement] tables a daemon test runs with unless it says otherwise: passes
#: every 0.2 s (a preemption's notice 4 s), each cluster polled every 0.5 s.
POLICY = {"interval": 0.2, "fair_start": 2, "preempt_grace": 4}
PLACEMENT = {"poll_interval": 0.5}
#: The [limits] of a daemon test unless it says otherwise: one user may hold the whole platform
#: (by default half of it: tests/daemon/test_daemon_limits.py), for the tests of placement ask
#: for whole clusters.
LIMITS = {"held_share": 1.0}

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class Raw(str):
    """A value written into the TOML as it is (``inf``, ``1e300``: what a test wants refused)."""


def toml(document: Mapping[str, Any]) -> str:
    """``document`` as TOML: tables of strings, numbers, booleans, lists of them and inline
    tables (mappings inside a list), and arrays of tables (lists of mappings)."""
    lines: list[str] = []
    _table(lines, (), document)
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _table(lines: list[str], path: tuple[str, ...], table: Mapping[str, Any]) -> None:
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping) or _is_tables(v)}
    for key, value in table.items():
        if key not in nested and value is not None:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested.items():
        name = ".".join(_key(k) for k in (*path, key))
        if isinstance(value, Mapping):
            if not value and not path:
                continue  # an empty top-level table is its defaults: left out
            lines.append(f"[{name}]")
            _table(lines, (*path, key), value)
        else:
            for item in value:
                lines.append(f"[[{name}]]")
                _table(lines, (*path, key), item)


def config(
    adapter: Mapping[str, Any] = MOCK,
    *,
    port: int | None = None,
    tcp: Mapping[str, Any] | None = None,
    tokens: Mapping[str, str] | None = None,
    policy: Mapping[str, Any] | None = None,
    placement: Mapping[str, Any] | None = None,
    limits: Mapping[str, Any] | None = None,
    **bridge: Any,
) -> str:
    """A daemon's coorm-bridge.toml: its socket ``bridge.sock`` and state ``state`` in its
    folder; TCP on 127.0.0.1:``port`` (and ``tcp``'s keys: TLS) with ``tokens`` (token ->
    user) when a port is given;
    ``policy`` and ``placement`` (default :data:`POLICY` and :data:`PLACEMENT`; a key set to
    None is left out); ``limits`` the [limits] table (default :data:`LIMITS`; ``{}`` leaves it
    out, for a test that writes its own); ``adapter`` the
    [adapter] table (its clusters, systems and links as lists of mappings); ``bridge`` more
    keys of [bridge]."""
    table: dict[str, Any] = {"socket": "bridge.sock", "state_dir": "state", **bridge}
    if port is not None:
        table["tcp"] = {"host": "127.0.0.1", "port": port, **(tcp or {})}
    if tokens:
        table["tokens"] = dict(tokens)
    return toml(
        {
            "bridge": table,
            "policy": POLICY if policy is None else policy,
            "placement": PLACEMENT if placement is None else placement,
            "limits": LIMITS if limits is None else limits,
            "adapter": adapter,
        }
    )


#: [policy] and [placement] of a daemon on a real batch system: a pass every 0.5 s at most (and a
#: fair start of 3 s, a preemption's notice 5 s), each cluster polled every second.
BATCH_POLICY = {"interval": 0.5, "fair_start": 3, "preempt_grace": 5}
BATCH_PLACEMENT = {"poll_interval": 1}


def slurm_clusters(slurm: Any, partitions: bool = True) -> list[dict[str, str]]:
    """[[adapter.cluster]] tables for every cluster of a test Slurm (tests/slurm/conftest.py):
    by partition of its one controller, or (``partitions`` False) by its own slurm.conf."""
    if partitions:
        return [{"name": p, "partition": p, "slurm_conf": str(slurm.conf)} for p in slurm.clusters]
    return [{"name": c, "slurm_conf": str(slurm.confs[c])} for c in slurm.clusters]


def oar_clusters(oar: Any) -> list[dict[str, str]]:
    """[[adapter.cluster]] tables for every cluster of the test OAR (tests/oar/conftest.py)."""
    return [{"name": c} for c in oar.clusters]


def slurm_config(slurm: Any, partitions: bool = True, **options: Any) -> str:
    """:func:`config` of a daemon on every cluster of a test Slurm (see :func:`slurm_clusters`),
    with :data:`BATCH_POLICY` and :data:`BATCH_PLACEMENT` unless ``options`` say otherwise."""
    adapter = {"kind": "slurm", "cluster": slurm_clusters(slurm, partitions)}
    options = {"policy": BATCH_POLICY, "placement": BATCH_PLACEMENT, **options}
    return config(adapter, **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One daemon over ``folder``: ``config`` becomes its coorm-bridge.toml (mode 0600),
    ``platform`` its platform.toml; its socket is ``bridge.sock``, its TCP port ``port``.

    With ``config`` None it runs with no configuration, as a user's first ``coorm-bridge serve``
    does: its socket is then the default one of ``env``'s ``$XDG_RUNTIME_DIR``. ``prefix``
    comes before the command (``setpriv ...``: the daemon as another user)."""

    def __init__(
        self,
        folder: Path,
        config: str | None,
        platform: str | None = None,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.folder = folder
        self.port = port
        self.env = None if env is None else dict(env)
        """The daemon's whole environment (None: this process's)."""
        self.prefix = list(prefix)
        if platform is not None:
            (folder / "platform.toml").write_text(platform)
        self.config: Path | None = None
        self.socket = folder / "bridge.sock"
        if config is None:
            assert self.env is not None, "a daemon with no configuration needs its environment"
            self.socket = Path(self.env["XDG_RUNTIME_DIR"]) / "coorm-bridge" / "bridge.sock"
        else:
            self.config = folder / "coorm-bridge.toml"
            self.config.write_text(config)
            self.config.chmod(0o600)
        self.log = folder / "daemon.log"
        self.process: subprocess.Popen[bytes] | None = None

    def mock_reservations(self) -> dict[tuple[str, str], tuple[int, int, list[str]]]:
        """What the simulated batch system holds, read from its saved state by its own tool
        (``python -m coorm_bridge.adapters.mock``), not through the bridge: (cluster, name) ->
        (start, end, hosts)."""
        shown = subprocess.run(
            [
                sys.executable,
                "-m",
                "coorm_bridge.adapters.mock",
                "state",
                "--platform",
                "platform.toml",
            ],
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        clusters = json.loads(shown.stdout)["clusters"]
        return {
            (cluster, r["name"]): (r["start"], r["end"], r["host_names"])
            for cluster, shot in clusters.items()
            for r in shot["reservations"]
        }

    @property
    def unix(self) -> str:
        return f"unix://{self.socket}"

    url = unix

    @property
    def tcp(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self) -> subprocess.CompletedProcess[str]:
        """Start it and wait for it to exit (for configurations that must be refused)."""
        return subprocess.run(
            [*self.prefix, *serve_command(self.config)],
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def start(self, timeout: float = 60) -> Self:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, *serve_command(self.config)],
                cwd=self.folder,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_ready(self.unix, self.process, self.log, timeout)
        except PrivateDaemonError as error:
            raise AssertionError(f"the daemon did not start: {error}") from None
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal it (if it still runs) and reap it; its exit status."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return None if self.process is None else self.process.returncode

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        return self.stop(sig)

    def long_polls(self) -> float:
        """``coorm_long_polls`` of its ``/metrics`` (read over the socket): the long polls it is
        serving now."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(str(self.folder / "bridge.sock"))
            conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")  # 1.0: it closes after the answer
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        [line] = [x for x in answer.decode().splitlines() if x.startswith("coorm_long_polls ")]
        return float(line.split()[1])

    def assert_stopped_cleanly(self) -> None:
        """It stopped as it should: nothing cut short or failing in its log, its socket gone."""
        log = self.log.read_text()
        assert "Traceback" not in log, log
        assert "timeout graceful shutdown exceeded" not in log, log
        assert " ERROR " not in log, log
        assert not (self.folder / "bridge.sock").exists()

    def client(self, token: str | None = None) -> BridgeClient:
        """Over the socket, or over TCP with ``token``."""
        if token is None:
            return BridgeClient(self.unix, timeout=10)
        return BridgeClient(self.tcp, token=token, timeout=10)


def wait_for(
    client: BridgeClient,
    sid: str,
    kind: str,
    after: int = 0,
    failsafe: float = 60,
    request: str | None = None,
) -> Any:
    """The session's first event of type ``kind`` after ``after`` (about ``request``, when
    given: an evolving application's), read as a launcher reads them (long polls);
    ``failsafe`` only stops a test whose event never comes."""
    deadline = time.monotonic() + failsafe
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            if event.type == kind and (request is None or event.request == request):
                return event
    about = "" if request is None else f" about {request}"
    raise AssertionError(f"no {kind} event{about} for {sid}")
