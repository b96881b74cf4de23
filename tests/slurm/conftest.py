"""Fixtures that start a real, throw-away Slurm 22.05 with tests/slurm/slurm-local.sh.

``slurm_partitions``: one slurmctld ("coorm") with one partition per name in ``.clusters``
(slurmrestd on a Unix socket and on TCP with JWT). ``slurm_clusters``: one slurmctld per name
in ``.clusters``, all registered with one slurmdbd (so ``-M <cluster>`` works), no REST.
``slurm_accounting``: one slurmctld "alpha" with slurmdbd and its limits enforced.

Both are session-scoped; each has its own BASE (a short directory under /tmp) and its own
block of ports, locked with ``/tmp/coorm-slurm-ports-<PORT_BASE>.lock`` so that concurrent
test runs on one host do not collide. Teardown runs the script's ``down``, which stops only the
processes started under that BASE. Every Slurm of a run (of every xdist worker) shares one
munged (:func:`shared_munge`): started by the first that needs it, stopped by the last.

Without the Slurm binaries (or without root) the tests are skipped, unless
``COORM_REQUIRE_SLURM=1`` (set by CI), in which case they fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

SCRIPT = Path(__file__).resolve().with_name("slurm-local.sh")
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
COMMON_BINARIES = (
    "slurmctld",
    "slurmd",
    "sinfo",
    "squeue",
    "sbatch",
    "scancel",
    "scontrol",
    "munged",
    "munge",
    "unmunge",
    "curl",
)
REST_BINARIES = ("slurmrestd", "setpriv")
DBD_BINARIES = ("slurmdbd", "sacctmgr", "mariadb", "mariadbd", "mariadb-install-db")

# Port blocks: one instance uses [PORT_BASE, PORT_BASE + 100 * (clusters + 1)), at most 1,000
# ports; the blocks stay clear of Slurm's default ports (6817-6820) and of 17000 and above.
PORT_BLOCKS = range(7800, 16000, 1000)
EXIT_PORTS_BUSY = 3
UP_TIMEOUT = 300
DOWN_TIMEOUT = 120
#: Held shared by each user of the munged that tests started; the last one out stops it.
MUNGE_USERS = "/tmp/coorm-munge-users.lock"
#: The BASE under which a test started munged (its PID file), while it runs.
MUNGE_STARTED = Path("/tmp/coorm-munge-started")


@dataclass
class SlurmInstance:
    """A running throw-away Slurm, as described by its env.sh."""

    mode: str  # "partitions" or "clusters"
    base: Path  # BASE: configurations, state, logs, PID files
    port_base: int
    env: dict[str, str]  # the variables of $BASE/env.sh
    clusters: list[str]  # partition names (MODE=partitions) or Slurm cluster names (clusters)
    conf: Path  # SLURM_CONF of the default (first) cluster
    confs: dict[str, Path]  # name in .clusters -> its slurm.conf (one file in partitions mode)
    nodes: dict[str, list[str]]  # name in .clusters -> node names, e.g. ["alpha01", ...]
    controllers: list[str]  # the Slurm cluster names ("coorm" in partitions mode)
    _lock: IO[str] | None = field(default=None, repr=False)

    def environ(self, cluster: str | None = None) -> dict[str, str]:
        """os.environ + env.sh, with SLURM_CONF set for ``cluster`` (default: the first)."""
        env = {**os.environ, **self.env, "PATH": SBIN_PATH}
        if cluster is not None:
            env["SLURM_CONF"] = str(self.confs[cluster])
        return env

    def run(
        self, *args: str, cluster: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command against this instance (text mode, output captured)."""
        proc = subprocess.run(
            list(args),
            env=self.environ(cluster),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.base,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"{shlex.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}",
                pytrace=False,
            )
        return proc

    def json(self, *args: str, cluster: str | None = None) -> dict:
        """Run a Slurm command that takes --json (squeue, sinfo, sacct) and parse its output."""
        return json.loads(self.run(*args, "--json", cluster=cluster).stdout)

    def rest_socket(self, controller: str | None = None) -> str:
        """slurmrestd's Unix socket (rest_auth/local) of ``controller`` (REST=1 only)."""
        return self.env[f"SLURMRESTD_SOCK_{controller or self.controllers[0]}"]

    def rest_url(self, controller: str | None = None) -> str:
        """slurmrestd's JWT endpoint, e.g. http://127.0.0.1:7820 (REST=1 only)."""
        return self.env[f"SLURMRESTD_URL_{controller or self.controllers[0]}"]

    def token(self, lifespan: int = 600, username: str = "root") -> str:
        """A JWT from ``scontrol token`` (for X-SLURM-USER-TOKEN)."""
        out = self.run("scontrol", "token", f"username={username}", f"lifespan={lifespan}")
        return out.stdout.strip().removeprefix("SLURM_JWT=")

    def controller_pid(self, controller: str | None = None) -> int:
        """The PID of ``controller``'s slurmctld (default: the first), from its PID file."""
        name = controller or self.controllers[0]
        return int((self.base / name / "run" / "slurmctld.pid").read_text().split()[0])

    def stop_controller(self, controller: str | None = None, timeout: float = 60) -> None:
        """Stop ``controller``'s slurmctld (SIGTERM to its PID) and wait until it is gone."""
        pid = self.controller_pid(controller)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists():
            pytest.fail(f"slurmctld {pid} still runs {timeout} s after SIGTERM", pytrace=False)

    def start_controller(self, controller: str | None = None) -> None:
        """Start ``controller``'s slurmctld again, as slurm-local.sh does (it daemonizes)."""
        name = controller or self.controllers[0]
        conf = str(self.base / "etc" / f"{name}.conf")
        env = {**self.environ(), "SLURM_CONF": conf, "COORM_SLURM_BASE": str(self.base)}
        subprocess.run(["slurmctld", "-i"], env=env, check=True, timeout=60, cwd=self.base)

    def reset(self, timeout: float = 60) -> None:
        """Cancel every job, delete every reservation, wait until every node is idle."""
        for controller in self.controllers:
            conf = str(self.base / "etc" / f"{controller}.conf")
            env = {**self.environ(), "SLURM_CONF": conf}
            jobs = subprocess.run(
                ["squeue", "-h", "-o", "%A"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout.split()
            if jobs:
                subprocess.run(["scancel", *jobs], env=env, check=False, timeout=30)
            shown = subprocess.run(
                ["scontrol", "-o", "show", "reservation"],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            ).stdout
            for line in shown.splitlines():
                if line.startswith("ReservationName="):
                    name = line.split()[0].split("=", 1)[1]
                    subprocess.run(
                        ["scontrol", "delete", f"reservationname={name}"],
                        env=env,
                        check=False,
                        timeout=30,
                        capture_output=True,
                    )
        want = {n for names in self.nodes.values() for n in names}
        deadline = time.monotonic() + timeout
        idle: set[str] = set()
        while time.monotonic() < deadline:
            idle = set()
            for controller in self.controllers:
                conf = str(self.base / "etc" / f"{controller}.conf")
                out = subprocess.run(
                    ["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"],
                    env={**self.environ(), "SLURM_CONF": conf},
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=30,
                ).stdout
                idle.update(out.split())
            if want <= idle:
                return
            time.sleep(0.2)
        pytest.fail(f"nodes not idle after {timeout} s: {sorted(want - idle)}", pytrace=False)


def _unavailable(reason: str) -> None:
    if os.environ.get("COORM_REQUIRE_SLURM") == "1":
        pytest.fail(f"{reason} (and COORM_REQUIRE_SLURM=1)", pytrace=False)
    pytest.skip(reason)


def _check_prerequisites(binaries: tuple[str, ...]) -> None:
    missing = [b for b in binaries if shutil.which(b, path=SBIN_PATH) is None]
    if missing:
        _unavailable(
            f"Slurm is not installed (missing {', '.join(missing)}): "
            f"run 'bash tests/slurm/slurm-local.sh install' as root"
        )
    if os.geteuid() != 0:
        _unavailable("the local Slurm of tests/slurm/slurm-local.sh must run as root")


def _read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _script(
    command: str, knobs: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": SBIN_PATH, **knobs}
    for inherited in ("SLURM_CONF", "COORM_SLURM_BASE"):
        env.pop(inherited, None)
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _lock_block(port_base: int) -> IO[str] | None:
    lock = open(f"/tmp/coorm-slurm-ports-{port_base}.lock", "a")  # noqa: SIM115 - held until teardown
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _up(mode: str, knobs: dict[str, str]) -> SlurmInstance:
    failures: list[str] = []
    for port_base in PORT_BLOCKS:
        lock = _lock_block(port_base)
        if lock is None:
            failures.append(f"{port_base}: locked by another test run")
            continue
        base = Path(tempfile.mkdtemp(prefix=f"cs{port_base}-", dir="/tmp"))
        base.chmod(0o755)  # slurmrestd (JWT) runs as nobody and reads the configuration
        settings = {"BASE": str(base), "PORT_BASE": str(port_base), "MODE": mode, **knobs}
        proc = _script("up", settings, UP_TIMEOUT)
        if proc.returncode == 0:
            return _instance(mode, base, port_base, lock)
        # Every Slurm of the session is down (its fixtures were torn down first).
        _script("down", {"BASE": str(base), "MUNGE_STOP": "always"}, DOWN_TIMEOUT)
        shutil.rmtree(base, ignore_errors=True)
        lock.close()
        if proc.returncode == EXIT_PORTS_BUSY:
            failures.append(f"{port_base}: {proc.stderr.strip()}")
            continue
        pytest.fail(
            f"slurm-local.sh up ({' '.join(f'{k}={v}' for k, v in settings.items())}) failed "
            f"with exit code {proc.returncode}:\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    pytest.fail("no free port block for a local Slurm:\n" + "\n".join(failures), pytrace=False)


def _instance(mode: str, base: Path, port_base: int, lock: IO[str]) -> SlurmInstance:
    env = _read_env(base / "env.sh")
    clusters = env["COORM_SLURM_CLUSTERS"].split()
    controllers = env["COORM_SLURM_CONTROLLERS"].split()
    confs = {c: Path(env[f"SLURM_CONF_{env[f'COORM_SLURM_CONTROLLER_{c}']}"]) for c in clusters}
    nodes = {}
    for c in clusters:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", env[f"COORM_SLURM_NODES_{c}"]],
            env={**os.environ, "PATH": SBIN_PATH, "SLURM_CONF": str(confs[c])},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        nodes[c] = out.stdout.split()
    return SlurmInstance(
        mode=mode,
        base=base,
        port_base=port_base,
        env=env,
        clusters=clusters,
        conf=Path(env["SLURM_CONF"]),
        confs=confs,
        nodes=nodes,
        controllers=controllers,
        _lock=lock,
    )


@contextlib.contextmanager
def shared_munge() -> Iterator[None]:
    """munged while the block runs, shared with every other block of this host's test runs (the
    workers of a parallel run each start their Slurms): started here if none answers, stopped
    (by its PID) when the last block that holds :data:`MUNGE_USERS` ends, if a test started
    it. A munged that was already there (a site's) is only used."""
    _check_prerequisites(COMMON_BINARIES)
    users = open(MUNGE_USERS, "a")  # noqa: SIM115 - held until the block ends
    try:
        fcntl.flock(users, fcntl.LOCK_SH)  # waits while the last user of one stops it
        base = Path(tempfile.mkdtemp(prefix="csm-", dir="/tmp"))
        proc = _script("munge", {"BASE": str(base)}, DOWN_TIMEOUT)
        if proc.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            pytest.fail(f"slurm-local.sh munge failed:\n{proc.stdout}{proc.stderr}", pytrace=False)
        if (base / "run" / "munged.pid").exists():
            MUNGE_STARTED.write_text(str(base))  # started here: the last user stops it
        else:
            shutil.rmtree(base, ignore_errors=True)
        yield
    finally:
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another block still uses it
        else:
            started = MUNGE_STARTED.read_text() if MUNGE_STARTED.exists() else ""
            if started:
                _script("down", {"BASE": started, "MUNGE_STOP": "always"}, DOWN_TIMEOUT)
                shutil.rmtree(started, ignore_errors=True)
                MUNGE_STARTED.unlink(missing_ok=True)
        users.close()


@contextlib.contextmanager
def _slurm(mode: str, knobs: dict[str, str], binaries: tuple[str, ...]) -> Iterator[SlurmInstance]:
    _check_prerequisites(binaries)
    with shared_munge():
        started = time.monotonic()
        instance = _up(mode, knobs)
        print(
            f"\nlocal Slurm {mode} up in {time.monotonic() - started:.1f} s under {instance.base}"
        )
        try:
            yield instance
        finally:
            proc = _script("down", {"BASE": str(instance.base)}, DOWN_TIMEOUT)
            if instance._lock is not None:
                instance._lock.close()
            if proc.returncode != 0:
                pytest.fail(
                    f"slurm-local.sh down failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}",
                    pytrace=False,
                )
            if os.environ.get("COORM_SLURM_KEEP") != "1":
                shutil.rmtree(instance.base, ignore_errors=True)


@pytest.fixture(scope="session")
def munge_daemon() -> Iterator[None]:
    """munged for all the session's Slurms, kept between them (:func:`shared_munge`)."""
    with shared_munge():
        yield


@pytest.fixture(scope="session")
def slurm_partitions(munge_daemon: None) -> Iterator[SlurmInstance]:
    """One slurmctld "coorm", partitions alpha, beta and gamma (8 nodes each), slurmrestd."""
    knobs = {"CLUSTERS": "alpha beta gamma", "NODES": "8", "DBD": "0", "REST": "1"}
    with _slurm("partitions", knobs, COMMON_BINARIES + REST_BINARIES) as instance:
        yield instance


@pytest.fixture
def slurm_own(munge_daemon: None) -> Iterator[SlurmInstance]:
    """A Slurm of the test's own, up in about a second: one slurmctld "coorm" with partition
    alpha (2 nodes), no REST, whose controller the test may stop or freeze (SIGSTOP: it is
    continued before the teardown)."""
    knobs = {"CLUSTERS": "alpha", "NODES": "2", "DBD": "0", "REST": "0"}
    with _slurm("partitions", knobs, COMMON_BINARIES) as instance:
        try:
            yield instance
        finally:
            with contextlib.suppress(OSError, ValueError):
                os.kill(instance.controller_pid(), signal.SIGCONT)


@pytest.fixture(scope="session")
def slurm_clusters(munge_daemon: None) -> Iterator[SlurmInstance]:
    """Two slurmctlds, alpha and beta (8 nodes each), one slurmdbd + mariadb, no REST."""
    knobs = {"CLUSTERS": "alpha beta", "NODES": "8", "DBD": "1", "REST": "0"}
    with _slurm("clusters", knobs, COMMON_BINARIES + DBD_BINARIES) as instance:
        yield instance


@pytest.fixture(scope="session")
def slurm_accounting(munge_daemon: None) -> Iterator[SlurmInstance]:
    """One slurmctld, alpha (4 nodes), with slurmdbd and its limits enforced
    (AccountingStorageEnforce=associations,limits,qos; EnforcePartLimits=ALL), no REST."""
    knobs = {
        "CLUSTERS": "alpha",
        "NODES": "4",
        "DBD": "1",
        "REST": "0",
        "ENFORCE": "associations,limits,qos",
    }
    with _slurm("clusters", knobs, COMMON_BINARIES + DBD_BINARIES) as instance:
        yield instance
