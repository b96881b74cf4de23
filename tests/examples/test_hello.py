"""examples/hello as the README's "keep a daemon running" block runs it, verbatim: a user's own
``coorm-bridge serve`` with no configuration, then ``coorm-launch examples/hello/hello.toml``
with no URL (the launcher finds the user's own daemon by its default socket), on the default
mock platform. It must work for root (a container, a test machine) as for anyone: the daemon
serves its user alone, so it runs that user's jobs.

Each daemon runs in a folder of its own (its runtime and state folders there) and is stopped by
its PID; the job processes it leaves (supervisors outlive it on purpose) are killed by the PIDs
in its state folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import daemons

pytestmark = pytest.mark.daemon

APP = Path(__file__).resolve().parents[2] / "examples" / "hello" / "hello.toml"
BIN = Path(sys.executable).parent
#: Run as this account when the tests run as root: an ordinary user's first steps.
UNPRIVILEGED = 65534


@pytest.fixture(params=["this-user", "unprivileged"])
def account(request: pytest.FixtureRequest) -> list[str]:
    """The words that run a command as the account under test (none: as this process)."""
    if request.param == "this-user":
        return []
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the other case is this one")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run as an unprivileged user")
    words = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups"]
    # The daemon starts its jobs' supervisors with this interpreter: the account must be able to
    # (a virtual environment over an interpreter in root's home folder is not).
    tried = subprocess.run(
        [*words, "sh", "-c", 'cd / && exec "$0" -c ""', sys.executable],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if tried.returncode != 0:
        pytest.skip(f"an unprivileged user cannot run {sys.executable}: {tried.stderr.strip()}")
    return words


@pytest.fixture
def home(account: list[str]) -> Iterator[Path]:
    """A folder the account owns: its runtime and state folders, and where it works."""
    # Short: a Unix socket path has at most 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="cbh-", dir="/tmp"))
    for name in ("run", "state", "work"):
        (folder / name).mkdir(mode=0o700)
    if account:
        for path in (folder, *folder.iterdir()):
            os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    yield folder
    for pid_file in folder.glob("state/coorm-bridge/jobs/*/*.pid"):
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def test_the_readme_daemon_block_runs_hello_verbatim(account, home):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("COORM_BRIDGE_URL", "COORM_BRIDGE_CONFIG")
    }
    env.update(XDG_RUNTIME_DIR=str(home / "run"), XDG_STATE_HOME=str(home / "state"))
    daemon = daemons.Daemon(home, None, env=env, prefix=account)
    daemon.start()
    try:
        result = subprocess.run(
            [*account, str(BIN / "coorm-launch"), "--plain", str(APP)],
            env=env, cwd=home / "work", capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        daemon.stop()
    said = result.stdout + result.stderr
    assert result.returncode == 0, said + daemon.log.read_text()
    assert "HTTP 409" not in said
    (run,) = (home / "work" / "coorm-runs").iterdir()
    parts = json.loads((run / "run.json").read_text())["components"]
    granted = parts["greeter"]["parts"][0]["hosts"]
    greeting = (run / "alpha.out").read_text().splitlines()
    assert greeting[0] == "greeter on alpha:"
    assert [line.split()[0] for line in greeting[1:]] == granted
    listening = (run / "beta.out").read_text()
    assert listening.startswith("listener on beta\n")
    assert json.loads(listening.split("\n", 1)[1])["components"] == parts
