"""``coorm-bridge serve --check`` as an admin runs it before a restart, on the mock platform: a
good file prints the clusters, the bridge's rights, the limits, admins and addresses in force and
exits 0; a mistake in the file is named by file and key, exit 2, as ``serve`` names it; and beside
a running daemon on the same file it changes nothing: the daemon keeps its state folder's lock,
its files and its sessions. (The same against a real Slurm: tests/slurm/test_slurm_check.py.)
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter
from tests import daemons

pytestmark = pytest.mark.daemon

SCRIPT = Path(sys.executable).with_name("coorm-bridge")


def check(config: Path) -> subprocess.CompletedProcess[str]:
    """``coorm-bridge serve --check --config CONFIG`` from the file's folder."""
    result = subprocess.run(
        [str(SCRIPT), "serve", "--check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=config.parent,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def write(folder: Path, text: str) -> Path:
    (folder / "platform.toml").write_text(daemons.PLATFORM)
    path = folder / "coorm-bridge.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_a_good_file_prints_the_clusters_and_settings_in_force_and_exits_0(folder: Path) -> None:
    text = daemons.config(
        port=daemons.free_port(),
        tokens={"alice-token-0123456789": "alice"},
        admins=["root"],
        limits={},
    )
    tables = (
        "[limits]\nhosts = 4\nheld_hosts = 6\n[limits.user.bob]\nhosts = 6\n"
        "[limits.group.hpc]\nheld_share = 0.75\n"
    )
    path = write(folder, text + tables)
    result = check(path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "cluster c1: reachable, 8 hosts (8 up)" in out
    assert "cluster c2: reachable, 4 hosts (4 up)" in out
    assert out.count("rights: ok") == 2
    assert f"listening: unix:{folder / 'bridge.sock'} (every local user)" in out
    assert "(plain TCP), 1 token(s) for alice" in out
    assert "alice-token" not in out  # a token is a key: never printed
    assert "admins: root" in out
    # The limits in force, table by table: a held_share beside held_hosts is not (the
    # default 0.5 here), and each group's and user's table is a line of its own.
    assert "  limits: hosts = 4, duration = 604800, held_hosts = 6\n" in out
    assert "  limits.group.hpc: held_share = 0.75\n" in out
    assert "  limits.user.bob: hosts = 6\n" in out
    assert "group =" not in out
    assert out.endswith("check: all is well\n")
    # Nothing was made: no state folder, no socket.
    assert sorted(p.name for p in folder.iterdir()) == ["coorm-bridge.toml", "platform.toml"]


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[limits]\nhostz = 4\n", "limits.hostz"),
        ("[limits]\nhosts = 0\n", "limits.hosts"),
        ('[bridge]\nadmins = ["bad user"]\n', "bridge.admins.0"),
    ],
)
def test_a_mistake_in_the_file_is_named_by_file_and_key_exit_2(
    folder: Path, table: str, key: str
) -> None:
    path = write(folder, table + '[adapter]\nkind = "mock"\nplatform = "platform.toml"\n')
    result = check(path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"coorm-bridge: {path}: {key}: "), result.stderr
    assert result.stdout == ""


def test_a_platform_file_that_is_not_there_is_named_exit_2(folder: Path) -> None:
    path = write(folder, '[adapter]\nkind = "mock"\nplatform = "nowhere.toml"\n')
    result = check(path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        "coorm-bridge: the batch system cannot be used: "
        f"{folder / 'nowhere.toml'}: cannot read the platform file: No such file or directory\n"
    )


def test_beside_a_running_daemon_it_changes_nothing(make_daemon) -> None:
    daemon = make_daemon(daemons.config(), daemons.PLATFORM).start()
    assert daemon.config is not None
    assert daemon.process is not None
    with daemon.client() as client:
        first = client.subscribe(Filter()).session
        client.request(first, nodes={"c1": 2}, duration=60)
        state = daemon.folder / "state"
        before = sorted(p.relative_to(state) for p in state.rglob("*"))

        result = check(daemon.config)

        assert result.returncode == 0, result.stdout + result.stderr
        assert "cluster c1: reachable, 8 hosts" in result.stdout
        assert sorted(p.relative_to(state) for p in state.rglob("*")) == before
        # The daemon still holds its state folder's lock (the check never took it).
        lock = state / "bridge.lock"
        assert lock.read_text().strip() == str(daemon.process.pid)
        fd = os.open(lock, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        # Its sessions go on: the first one is still there, a new one is served.
        assert client.session(first).state in {"waiting", "started"}
        second = client.subscribe(Filter()).session
        answer = client.request(second, nodes={"c2": 1}, duration=60)
        assert answer.estimated_start is not None
    assert daemon.process.poll() is None
