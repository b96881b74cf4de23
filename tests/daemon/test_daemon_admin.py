"""The admin commands as an admin runs them: ``coorm-bridge sessions``, ``cancel``, ``drain`` and
``resume`` from the installation's bin, against a real daemon over TCP, each user known by a
bearer token (``ops`` is in ``bridge.admins``, alice and bob are not).

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789abc"
OPS = "ops-token-0123456789abcd"
#: The command as a user runs it: the installation's own script.
COORM_BRIDGE = str(Path(sys.executable).parent / "coorm-bridge")


class Daemon(daemons.Daemon):
    """Two clusters (c1: 8 hosts, c2: 4), TCP with tokens for alice, bob and ops (an admin)."""

    def __init__(self, folder: Path) -> None:
        port = free_port()
        tokens = {ALICE: "alice", BOB: "bob", OPS: "ops"}
        config = daemons.config(port=port, tokens=tokens, admins=["ops"])
        super().__init__(folder, config, daemons.PLATFORM, port)

    def run_cli(self, token: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``coorm-bridge ARGS`` over TCP as the token's user."""
        return subprocess.run(
            [COORM_BRIDGE, *args, "--url", self.tcp, "--token", token],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=self.folder,
        )

    def ours(self) -> set[tuple[str, str]]:
        """The bridge's reservations the simulated batch system holds: (cluster, name)."""
        return {key for key in self.mock_reservations() if key[1].startswith("coorm-")}


@pytest.fixture
def make_daemon(make_daemon):
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


def started(client: BridgeClient, nodes: dict[str, int]) -> str:
    sid = client.subscribe(Filter()).session
    client.request(sid, Request(nodes=nodes, duration=3600))
    wait_for(client, sid, "start")
    return sid


def test_an_admin_lists_every_users_sessions_and_a_user_cannot_cancel_anothers(make_daemon):
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice, daemon.client(BOB) as bob:
        mine = started(alice, {"c1": 2})
        theirs = bob.subscribe(Filter(), name="bob's run").session
        listed = daemon.run_cli(OPS, "sessions")
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
        assert rows[mine][1:4] == ["alice", "-", "started"]
        assert rows[theirs][1:2] == ["bob"]
        assert "coorm-" in rows[mine][6]  # its placeholder, with its cluster and status
        assert "@c1" in listed.stdout
        only_bob = daemon.run_cli(OPS, "sessions", "--user", "bob", "--state", "submitted")
        assert [line.split()[0] for line in only_bob.stdout.splitlines()[1:]] == [theirs]

        peek = daemon.run_cli(ALICE, "sessions", "--user", "bob")
        assert peek.returncode == 1
        assert "only admins see other users' sessions" in peek.stderr
        before = alice.events(mine)
        refused = daemon.run_cli(BOB, "cancel", mine, "--reason", "I want c1")
        assert refused.returncode == 1
        assert f"no session {mine} of yours" in refused.stderr
        assert alice.session(mine).state is AppState.STARTED
        assert alice.events(mine) == before
        drain = daemon.run_cli(BOB, "drain", "c1")
        assert drain.returncode == 1
        assert "only admins drain clusters" in drain.stderr
        assert alice.health().drained == ()


def test_cancel_tells_the_launcher_why_and_releases_its_placeholders(make_daemon):
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice, daemon.client(OPS) as ops:
        sid = started(alice, {"c1": 2, "c2": 1})
        assert {c for c, _ in daemon.ours()} == {"c1", "c2"}
        done = daemon.run_cli(OPS, "cancel", sid, "--reason", "rack 3 power work")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"session {sid}: finished"
        killed = wait_for(alice, sid, "killed")
        assert killed.reason == "cancelled by ops: rack 3 power work"
        assert alice.events(sid, after=killed.seq)[0].type == "ended"
        deadline = time.monotonic() + 60
        while ops.all_sessions(user="alice")[0].placeholders and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ops.all_sessions(user="alice")[0].placeholders == ()
    assert daemon.ours() == set()
    log = daemon.log.read_text()
    assert log.count(f"admin ops cancelled session {sid} of alice") == 1


def test_a_drain_keeps_new_sessions_waiting_survives_kill_9_and_resume_starts_them(make_daemon):
    daemon = make_daemon().start()
    with daemon.client(ALICE) as alice, daemon.client(BOB) as bob:
        holder = started(alice, {"c1": 2})
        drained = daemon.run_cli(OPS, "drain", "c1", "--reason", "firmware update")
        assert drained.returncode == 0, drained.stderr
        assert "cluster c1: drained since" in drained.stdout
        assert "by ops: firmware update" in drained.stdout
        waiting = bob.subscribe(Filter()).session
        answer = bob.request(waiting, Request(nodes={"c1": 1}, duration=600))
        assert answer.state is AppState.WAITING
        assert answer.estimated_start is None  # never, while c1 is drained
        status = daemon.run_cli(BOB, "status")
        assert "drained (no new placeholders until resumed): c1" in status.stdout

    daemon.kill()
    daemon.start()
    with daemon.client(ALICE) as alice, daemon.client(BOB) as bob:
        assert bob.health().drained == ("c1",)
        # A pass and an enactment ran since the restart: a session on c2 starts.
        started(alice, {"c2": 1})
        assert bob.session(waiting).state is AppState.WAITING
        assert bob.session(waiting).estimated_start is None
        assert alice.session(holder).state is AppState.STARTED
        assert any(cluster == "c1" for cluster, _ in daemon.ours())
        resumed = daemon.run_cli(OPS, "resume", "c1")
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "cluster c1: resumed"
        start = wait_for(bob, waiting, "start")
        assert set(start.allocations) == {"c1"}
        assert bob.health().drained == ()
    log = daemon.log.read_text()
    assert log.count("admin ops drained cluster c1: firmware update") == 1
    assert log.count("admin ops resumed cluster c1") == 1
