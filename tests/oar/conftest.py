"""The fixture that starts a real, throw-away OAR 2.5.9 with tests/oar/oar-local.sh.

``oar``: session-scoped; PostgreSQL, Almighty, the node sshd and the REST API (Apache) of one
instance, with clusters alpha and beta (8 nodes of 2 cores each, named alpha-1 .. beta-8) and
the test users of the script (``.users``: unlimited advance reservations; ``.limited_users``:
admission rule 12 applies). Teardown runs the script's ``down``, which stops only what that
instance started.

OAR reads the machine-wide /etc/oar/oar.conf, so one instance runs per machine: a session waits
(up to ``COORM_OAR_WAIT`` seconds, default 600) for another test session that holds
``SESSION_LOCK``. An instance started by hand (``oar-local.sh up``) makes ``up`` refuse (exit 5):
set ``COORM_OAR_ENV`` to its env.sh to run the tests against it instead (the session then
neither starts nor stops it, and ``reset()`` deletes its jobs).

Without the OAR binaries (or without root) the tests are skipped, unless ``COORM_REQUIRE_OAR=1``
(set by CI), in which case they fail.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.oar.lab import SBIN_PATH, OarInstance

SCRIPT = Path(__file__).resolve().with_name("oar-local.sh")
BINARIES = (
    "Almighty",
    "oar-database",
    "oarsub",
    "oarstat",
    "oardel",
    "oarnodes",
    "oarnodesetting",
    "oarproperty",
    "apache2",
    "sshd",
    "curl",
    "runuser",
    "useradd",
)
SESSION_LOCK = "/run/lock/coorm-oar-tests.lock"
# (PGPORT, OARAPI_PORT) tried in turn while `up` finds a port in use (exit 3)
PORTS = ((15432, 16668), (25432, 26668), (35432, 36668))
EXIT_PORTS_BUSY = 3
EXIT_OTHER_INSTANCE = 5
UP_TIMEOUT = 300
DOWN_TIMEOUT = 120


def _unavailable(reason: str) -> None:
    if os.environ.get("COORM_REQUIRE_OAR") == "1":
        pytest.fail(f"{reason} (and COORM_REQUIRE_OAR=1)", pytrace=False)
    pytest.skip(reason)


def _check_prerequisites() -> None:
    missing = [b for b in BINARIES if shutil.which(b, path=SBIN_PATH) is None]
    if missing:
        _unavailable(
            f"OAR is not installed (missing {', '.join(missing)}): "
            f"run 'bash tests/oar/oar-local.sh install' as root"
        )
    if os.geteuid() != 0:
        _unavailable("the local OAR of tests/oar/oar-local.sh must run as root")


def _script(
    command: str, knobs: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": SBIN_PATH, **knobs}
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _session_lock() -> IO[str]:
    """One test session per machine runs an OAR: wait for the one that holds the lock."""
    wait = float(os.environ.get("COORM_OAR_WAIT", "600"))
    lock = open(SESSION_LOCK, "a")  # noqa: SIM115 - held until teardown
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                lock.close()
                pytest.fail(f"another test session holds {SESSION_LOCK} for more than {wait} s")
            time.sleep(1)
        else:
            return lock


def _up(lock: IO[str]) -> OarInstance:
    failures: list[str] = []
    for pgport, api_port in PORTS:
        base = Path(tempfile.mkdtemp(prefix="coorm-oar-", dir="/tmp"))
        base.chmod(0o755)  # PostgreSQL, Apache (as oar) and the jobs read under it
        settings = {"BASE": str(base), "PGPORT": str(pgport), "OARAPI_PORT": str(api_port)}
        proc = _script("up", settings, UP_TIMEOUT)
        if proc.returncode == 0:
            return OarInstance.from_env(base / "env.sh", lock=lock)
        _script("down", {"BASE": str(base)}, DOWN_TIMEOUT)
        shutil.rmtree(base, ignore_errors=True)
        if proc.returncode == EXIT_PORTS_BUSY:
            failures.append(proc.stderr.strip())
            continue
        if proc.returncode == EXIT_OTHER_INSTANCE:
            lock.close()
            _unavailable(
                "an OAR instance not started by this test session runs on this machine: "
                "stop it (oar-local.sh down with its BASE) or set COORM_OAR_ENV to its env.sh\n"
                + proc.stderr.strip()
            )
        lock.close()
        pytest.fail(
            f"oar-local.sh up ({' '.join(f'{k}={v}' for k, v in settings.items())}) failed "
            f"with exit code {proc.returncode}:\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
    lock.close()
    pytest.fail("no free ports for a local OAR:\n" + "\n".join(failures), pytrace=False)


@contextlib.contextmanager
def _oar() -> Iterator[OarInstance]:
    reuse = os.environ.get("COORM_OAR_ENV")
    if reuse:
        yield OarInstance.from_env(Path(reuse), started_here=False)
        return
    _check_prerequisites()
    lock = _session_lock()
    started = time.monotonic()
    instance = _up(lock)
    print(f"\nlocal OAR up in {time.monotonic() - started:.1f} s under {instance.base}")
    try:
        yield instance
    finally:
        proc = _script("down", {"BASE": str(instance.base)}, DOWN_TIMEOUT)
        lock.close()
        if proc.returncode != 0:
            pytest.fail(
                f"oar-local.sh down failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}",
                pytrace=False,
            )
        if os.environ.get("COORM_OAR_KEEP") != "1":
            shutil.rmtree(instance.base, ignore_errors=True)


@pytest.fixture(scope="session")
def oar() -> Iterator[OarInstance]:
    """A real OAR 2.5.9 for the session (see the module's docstring)."""
    with _oar() as instance:
        yield instance
