"""SshRunner against a real, private OpenSSH server (and, with Slurm, the adapter over it).

The ``sshd`` fixture starts ``/usr/sbin/sshd -D -e -f <config>`` as root on a free loopback port
with its own host key, a client key generated for the test in its authorized_keys, and a
known_hosts file naming that host key for ``[127.0.0.1]:PORT``. It is stopped by its PID (and
its per-connection children, found through /proc as descendants of that PID): never any other
sshd. Without sshd (or without root) the tests are skipped, unless ``COORM_REQUIRE_SLURM=1``.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import pytest

from coorm_bridge.adapters.base import AdapterError, JobSpec, JobState, ReservationSpec, Unavailable
from coorm_bridge.adapters.batch.runner import SshRunner, SshTarget
from coorm_bridge.adapters.batch.settings import SshSettings
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.settings import SlurmCluster, SlurmSettings

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; made by its service otherwise
START_TIMEOUT = 10.0


def _unavailable(reason: str) -> None:
    if os.environ.get("COORM_REQUIRE_SLURM") == "1":
        pytest.fail(f"{reason} (and COORM_REQUIRE_SLURM=1)", pytrace=False)
    pytest.skip(reason)


def _keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return path.with_suffix(".pub").read_text().strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        self.host_key = _keygen(self.directory / "host_key", "coorm-test-host")
        client = _keygen(self.client_key, "coorm-test-client")
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
                self.port = _free_port()
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
def running_sshd(directory: Path) -> Iterator[Sshd]:
    if not SSHD.is_file():
        _unavailable(f"OpenSSH's server is not installed ({SSHD}): install openssh-server")
    if os.geteuid() != 0:
        _unavailable("the test sshd must run as root")
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    sshd = Sshd(directory)
    sshd.prepare()
    sshd.start()
    try:
        yield sshd
    finally:
        sshd.stop()


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def runner(sshd: Sshd) -> Iterator[SshRunner]:
    ssh = SshRunner(sshd.target())
    yield ssh
    ssh.close()


# --- the runner -----------------------------------------------------------------------------

NASTY = [
    "plain", "two words", "  padded  ", "", "it's", 'say "hi"', "a;b", "x && y", "p | q",
    "> out", "*", "~", "$HOME", "${PATH}", "back\\slash", "tab\there", "line1\nline2\n",
    "#not a comment", "{a,b}", "!event", "é ü 中",
]  # fmt: skip


def test_an_argument_vector_arrives_verbatim_and_no_shell_runs_it(runner, tmp_path):
    marker = tmp_path / "pwned"
    traps = [f"$(touch {marker})", f"`touch {marker}`", f"; touch {marker}", f"&& touch {marker}"]
    words = [*NASTY, *traps]
    done = runner.run(["printf", "%s\\0", *words])
    assert done.ok, done.stderr
    assert done.stdout.split("\0")[:-1] == words
    assert not marker.exists()


def test_environment_values_are_passed_intact(runner, tmp_path):
    marker = tmp_path / "pwned"
    env = {
        "COORM_A": "two words",
        "COORM_B": f"it's $(touch {marker}); `touch {marker}` *",
        "COORM_C": "line1\nline2",
        "COORM_D": "",
    }
    for name, value in env.items():
        done = runner.run(["printenv", name], env=env)
        assert done.ok, done.stderr
        assert done.stdout == value + "\n"
    assert not marker.exists()


def test_the_runner_env_and_the_command_env_combine(sshd):
    ssh = SshRunner(sshd.target(), env={"COORM_X": "from runner", "COORM_Y": "runner"})
    try:
        done = ssh.run(["printenv", "COORM_X", "COORM_Y"], env={"COORM_Y": "from command"})
        assert done.stdout == "from runner\nfrom command\n"
    finally:
        ssh.close()


def test_exit_status_and_stderr_come_back(runner):
    done = runner.run(["sh", "-c", 'echo "to err" >&2; exit 3'])
    assert (done.returncode, done.stdout, done.stderr) == (3, "", "to err\n")


def test_an_unknown_host_key_is_refused_and_nothing_runs(sshd, tmp_path):
    marker = tmp_path / "ran"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    ssh = SshRunner(sshd.target(known_hosts=empty))
    with pytest.raises(AdapterError, match="not found in known_hosts") as refused:
        ssh.run(["touch", str(marker)])
    assert not isinstance(refused.value, Unavailable)
    assert not marker.exists()
    ssh.close()


def test_a_changed_host_key_is_refused_and_nothing_runs(sshd, tmp_path):
    marker = tmp_path / "ran"
    other = _keygen(tmp_path / "impostor", "impostor").split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    ssh = SshRunner(sshd.target(known_hosts=known))
    with pytest.raises(AdapterError, match="host key changed") as refused:
        ssh.run(["touch", str(marker)])
    assert not isinstance(refused.value, Unavailable)
    assert not marker.exists()
    ssh.close()


def test_one_connection_serves_every_command(sshd):
    before = sshd.accepted()
    ssh = SshRunner(sshd.target())
    try:
        assert ssh.run(["true"]).ok
        assert ssh._client is not None
        transport = ssh._client.get_transport()
        for i in range(20):
            assert ssh.run(["echo", str(i)]).stdout == f"{i}\n"
            assert ssh._client.get_transport() is transport
    finally:
        ssh.close()
    assert sshd.accepted() - before == 1


def test_after_sshd_restarts_the_runner_reconnects(tmp_path):
    with running_sshd(tmp_path) as server:
        ssh = SshRunner(server.target())
        try:
            assert ssh.run(["echo", "one"]).stdout == "one\n"
            assert ssh._client is not None
            first = ssh._client.get_transport()
            server.stop()
            with pytest.raises(Unavailable):
                ssh.run(["echo", "lost"])
            server.start()  # same port, same host key
            assert ssh.run(["echo", "two"]).stdout == "two\n"
            assert ssh._client.get_transport() is not first
            assert ssh.run(["echo", "three"]).stdout == "three\n"
        finally:
            ssh.close()
        assert server.accepted() == 2


def test_a_connection_lost_during_a_command_is_unavailable(tmp_path):
    with running_sshd(tmp_path) as server:
        ssh = SshRunner(server.target())
        killer = threading.Timer(1.0, server.stop)
        try:
            assert ssh.run(["true"]).ok
            killer.start()
            with pytest.raises(Unavailable):
                ssh.run(["sleep", "10"])
        finally:
            killer.join()
            ssh.close()


def test_a_command_over_its_timeout_is_unavailable_and_the_next_one_works(runner):
    started = time.monotonic()
    with pytest.raises(Unavailable):
        runner.run(["sleep", "10"], timeout=1)
    assert time.monotonic() - started < 5
    assert runner.run(["echo", "next"]).stdout == "next\n"


def test_a_timed_out_command_says_what_it_printed_on_stderr(runner):
    # What Slurm's commands do when slurm.conf is missing on the front-end: say so, and retry.
    with pytest.raises(Unavailable) as caught:
        runner.run(["sh", "-c", "echo 'error: no slurm.conf, retrying' >&2; sleep 10"], timeout=1)
    assert "it said: error: no slurm.conf, retrying" in str(caught.value)


def test_an_sshd_that_is_down_is_unavailable(tmp_path):
    with running_sshd(tmp_path) as server:
        target = server.target()
        server.stop()
        ssh = SshRunner(target)
        with pytest.raises(Unavailable, match=r"127\.0\.0\.1"):
            ssh.run(["true"])
        ssh.close()


# --- the Slurm adapter over SSH -------------------------------------------------------------

USER = getpass.getuser()


def _view(shot):
    return {
        name: (
            [(n.name, n.state) for n in cluster.nodes],
            sorted((j.id, j.state, j.host_names) for j in cluster.jobs),
            sorted((r.name, r.start, r.end, r.host_names, r.users) for r in cluster.reservations),
        )
        for name, cluster in shot.clusters.items()
    }


@pytest.mark.slurm
def test_the_slurm_adapter_over_ssh_sees_and_does_what_the_local_one_does(slurm_partitions, sshd):
    clusters = tuple(
        SlurmCluster(name=p, partition=p, slurm_conf=slurm_partitions.conf)
        for p in slurm_partitions.clusters
    )
    ssh = SshSettings(
        host="127.0.0.1", port=sshd.port, user="root", key_file=sshd.client_key,
        known_hosts=sshd.known_hosts,
    )  # fmt: skip
    local = make_slurm_adapter(SlurmSettings(clusters=clusters))
    remote = make_slurm_adapter(SlurmSettings(clusters=clusters, ssh=ssh))
    first, second = slurm_partitions.clusters[:2]
    logins = sshd.accepted()
    try:
        job = local.submit(
            first,
            JobSpec(name="sleeper", user=USER, argv=("sleep", "600"), hosts=2, walltime=600,
                    workdir="/tmp"),
        )  # fmt: skip
        now = local.now()
        theirs = ReservationSpec(
            name="coorm-ssh-local", start=now + 600, end=now + 1200, hosts=3, users=(USER,)
        )
        local.create_reservation(second, theirs)
        deadline = time.monotonic() + 60
        while local.job_state(first, job) is not JobState.RUNNING:
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.5)
        assert remote.job_state(first, job) is JobState.RUNNING

        assert {c.name: c.hosts for c in remote.clusters()} == {
            c.name: c.hosts for c in local.clusters()
        }
        # Launchers are told to submit where the bridge's commands run: on the front end.
        assert {c.submission.front_end for c in remote.clusters() if c.submission} == {"127.0.0.1"}
        assert {c.submission.front_end for c in local.clusters() if c.submission} == {None}
        seen_here, seen_there = _view(local.snapshot()), _view(remote.snapshot())
        assert seen_there == seen_here
        assert job in [j[0] for j in seen_there[first][1]]
        assert [r[0] for r in seen_there[second][2]] == ["coorm-ssh-local"]

        ours = ReservationSpec(
            name="coorm-ssh-remote", start=now + 1800, end=now + 2400, hosts=2, users=(USER,)
        )
        handle = remote.create_reservation(first, ours)
        assert (handle.start, handle.end, len(handle.host_names)) == (ours.start, ours.end, 2)
        made = {r.name: r for r in local.snapshot([first]).clusters[first].reservations}
        assert made["coorm-ssh-remote"].host_names == handle.host_names
        remote.delete_reservation(first, "coorm-ssh-remote")
        assert local.snapshot([first]).clusters[first].reservations == ()
    finally:
        remote.close()
        local.close()
        slurm_partitions.reset()
    assert sshd.accepted() - logins == 1  # every command over one connection
