"""The daemon as users run it: ``coorm-bridge serve`` in its own process, reached through the
client over its Unix socket (identity from the peer's uid) and over TCP (bearer tokens).

Each test starts its own daemon and stops only that process, by PID.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient, BridgeError
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789abc"
PLATFORM = daemons.PLATFORM


class Daemon(daemons.Daemon):
    """The daemon of these tests: two clusters, tokens for alice and bob, TCP and the socket."""

    def __init__(self, folder: Path, outage: tuple[int, int] | None = None, fair_start=2):
        port = free_port()
        platform = PLATFORM
        if outage is not None:
            platform += f'[[outage]]\ncluster = "c2"\nstart = {outage[0]}\nend = {outage[1]}\n'
        config = daemons.config(
            port=port,
            tokens={ALICE_TOKEN: "alice", BOB_TOKEN: "bob"},
            policy={"interval": 0.2, "fair_start": fair_start},
        )
        super().__init__(folder, config, platform, port)


@pytest.fixture
def make_daemon(make_daemon):
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


@pytest.fixture
def daemon(make_daemon):
    return make_daemon().start()


def test_two_applications_start_together_on_both_clusters(daemon):
    with daemon.client() as client:
        sids = [client.subscribe(Filter(clusters=("c1", "c2"))).session for _ in range(2)]
        requests = [Request(nodes={"c1": 4, "c2": 2}, duration=60)] * 2
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(client.request, sids, requests))
        assert answers[0].estimated_start == answers[1].estimated_start is not None
        starts = [wait_for(client, sid, "start") for sid in sids]
    assert starts[0].time == starts[1].time
    hosts = {}
    for sid, start in zip(sids, starts, strict=True):
        assert set(start.allocations) == {"c1", "c2"}
        for cluster, allocation in start.allocations.items():
            assert re.fullmatch(rf"coorm-[a-z2-7]{{6}}-{sid}-{cluster}", allocation.reservation)
            hosts.setdefault(cluster, []).extend(allocation.hosts)
    assert sorted(hosts["c1"]) == [f"c1-{i}" for i in range(8)]  # all 8, none twice
    assert sorted(hosts["c2"]) == [f"c2-{i}" for i in range(4)]


def test_identity_over_the_socket_and_over_tcp(daemon):
    with daemon.client() as local:
        sid = local.subscribe().session
        assert local.session(sid).owner == getpass.getuser()
    with daemon.client(token=BOB_TOKEN) as bob:
        with pytest.raises(BridgeError) as refused:
            bob.session(sid)
        assert refused.value.status == 404
        with pytest.raises(BridgeError) as refused:
            bob.done(sid)
        assert refused.value.status == 404
        own = bob.subscribe().session
        assert bob.session(own).owner == "bob"
        assert [s.session for s in bob.sessions()] == [own]
    with daemon.client(token="not-a-known-token-at-all") as stranger:
        with pytest.raises(BridgeError) as refused:
            stranger.sessions()
        assert refused.value.status == 401


def test_kill_9_loses_nothing_acknowledged_and_launchers_resume(make_daemon):
    daemon = make_daemon().start()
    acknowledged: dict[str, Request] = {}
    stop = threading.Event()

    def launcher(k):
        with daemon.client() as client:
            while not stop.is_set():
                try:
                    sid = client.subscribe(Filter(clusters=("c1",))).session
                    acknowledged[sid] = None
                    request = Request(nodes={"c1": 1 + k % 8}, duration=3600)
                    client.request(sid, request)
                    acknowledged[sid] = request
                except BridgeError:
                    return

    with daemon.client() as client:
        running = client.subscribe().session
        client.request(running, Request(nodes={"c1": 1, "c2": 1}, duration=3600))
        start = wait_for(client, running, "start")
        events_before = client.events(running)
    threads = [threading.Thread(target=launcher, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60  # a failsafe: the launchers ask many times a second
    while len(acknowledged) <= 3 * len(threads):  # killed while they go on asking
        assert time.monotonic() < deadline, acknowledged
        time.sleep(0.02)
    assert daemon.kill(signal.SIGKILL) == -signal.SIGKILL
    stop.set()
    for thread in threads:
        thread.join(30)
    assert len(acknowledged) > 3
    daemon.start()
    with daemon.client() as client:
        for sid, request in acknowledged.items():
            info = client.session(sid)
            if request is not None:
                assert info.request == request
                assert info.state in (AppState.REQUEST_SENT, AppState.WAITING, AppState.STARTED)
        # The started application is still started, its events are all there, and its
        # placeholders are still held: the (simulated) batch systems kept them across the kill,
        # so the start-up reconciliation had nothing to re-create.
        assert client.session(running).state is AppState.STARTED
        assert client.events(running)[: len(events_before)] == events_before
        metrics = requests.get(f"{daemon.tcp}/metrics", timeout=10).text
        figures = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line[0] != "#")
        assert float(figures.get('coorm_reconciled_total{action="recreated"}', 0)) == 0
        # At least the running application's two; waiting ones may have some too.
        assert float(figures['coorm_placeholders{status="held"}']) >= 2
        assert float(figures['coorm_placeholders{status="requested"}']) == 0
        # A launcher that reconnects resumes after its last event, and done still works.
        client.done(running)
        ended = wait_for(client, running, "ended", after=events_before[-1].seq)
        assert ended.state is AppState.FINISHED
    assert re.fullmatch(rf"coorm-[a-z2-7]{{6}}-{running}-c1", start.allocations["c1"].reservation)
    daemon.kill(signal.SIGTERM)


def test_a_following_launcher_gets_every_event_once_across_a_kill_9(make_daemon):
    daemon = make_daemon().start()
    got = []
    with daemon.client() as client:
        sid = client.subscribe().session
        client.request(sid, Request(nodes={"c1": 2}, duration=3600))
        wait_for(client, sid, "start")

    def follow():
        with daemon.client() as follower:
            got.extend(follower.follow(sid, wait=2, retry=0.2, max_retry=1))

    thread = threading.Thread(target=follow)
    thread.start()
    deadline = time.monotonic() + 60  # a failsafe: it gets the start at once
    while "start" not in [e.type for e in got]:  # following: it waits for the next event
        assert time.monotonic() < deadline, got
        time.sleep(0.02)
    daemon.kill(signal.SIGKILL)
    time.sleep(1)  # the follower retries against a dead socket meanwhile
    daemon.start()
    with daemon.client() as client:
        client.done(sid)
        thread.join(60)
        assert not thread.is_alive()
        assert got == client.events(sid)
    assert [e.seq for e in got] == list(range(1, len(got) + 1))
    assert [e.type for e in got][-1] == "ended"
    assert "start" in [e.type for e in got]
    daemon.kill(signal.SIGTERM)


def test_a_silent_cluster_degrades_health_and_recovers(make_daemon):
    daemon = make_daemon(outage=(8, 14)).start()
    with daemon.client() as client:
        seen = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            health = client.health()
            if not seen or seen[-1] != health.status:
                seen.append(health.status)
                if health.status == "degraded":
                    assert health.clusters["c2"].status == "stale"
                    assert health.clusters["c1"].status == "ok"
            if seen[-2:] == ["degraded", "ok"]:
                break
            time.sleep(0.2)
    assert seen == ["ok", "degraded", "ok"]
    assert daemon.process.poll() is None


def test_status_prints_clusters_availability_and_sessions(daemon):
    with daemon.client() as client:
        sid = client.subscribe(name="climate").session
        client.request(sid, Request(nodes={"c1": 9}, duration=60))
    result = subprocess.run(
        [sys.executable, "-c", "from coorm_bridge.cli.main import main; main()", "status"],
        env={**os.environ, "COORM_BRIDGE_URL": daemon.unix},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=daemon.folder,
    )
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"coorm-bridge at {daemon.unix}: ok, time ")
    assert any(line.split()[:4] == ["c1", "8", "ok", "8"] for line in lines)
    row = next(line for line in lines if line.startswith(sid))
    assert "climate" in row
    assert "waiting" in row
    assert "never" in row


def test_serve_without_configuration_runs_the_mock_platform_for_the_user(folder):
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(folder / "run"),
        "XDG_STATE_HOME": str(folder / "state"),
    }
    env.pop("COORM_BRIDGE_CONFIG", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from coorm_bridge.cli.main import main; sys.exit(main())",
            "serve",
        ],
        env=env,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = process.stdout.readline()
        path = folder / "run" / "coorm-bridge" / "bridge.sock"
        assert f"listening on unix://{path}" in line
        assert (path.stat().st_mode & 0o777) == 0o600
        with BridgeClient(f"unix://{path}") as client:
            assert [c.name for c in client.clusters()] == ["alpha", "beta", "gamma"]
        assert (folder / "state" / "coorm-bridge" / "bridge.sqlite").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert not path.exists()


def test_a_bad_configuration_is_refused_with_file_and_key(folder):
    config = folder / "bad.toml"
    config.write_text("[policy]\nfair_start = -3\n")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from coorm_bridge.cli.main import main; sys.exit(main())",
            "serve",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=folder,
        check=False,
    )
    assert result.returncode == 2
    assert f"{config}: policy.fair_start" in result.stderr


def test_a_setting_the_batch_systems_refuse_at_start_is_refused_with_file_and_key(folder):
    # A link the file names between clusters; the simulated platform's are known only once it
    # is read. Before, exit 1 and "cannot start: the batch system: link.0 names 'c9', ...".
    (folder / "platform.toml").write_text(PLATFORM)
    config = folder / "site.toml"
    config.write_text(
        '[bridge]\nsocket = "bridge.sock"\nstate_dir = "state"\n[adapter]\nkind = "mixed"\n'
        '[[adapter.system]]\nkind = "mock"\nplatform = "platform.toml"\nrun_jobs = false\n'
        '[[adapter.link]]\nclusters = ["c1", "c9"]\nlatency_s = 0.001\nbandwidth_bps = 1e9\n'
    )
    script = Path(sys.executable).with_name("coorm-bridge")
    result = subprocess.run(
        [str(script), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=folder,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"coorm-bridge: {config}: adapter.link.0.clusters: no batch system of the site has "
        "'c9' (its clusters: c1, c2)\n"
    )
    assert not (folder / "bridge.sock").exists()


def test_a_second_daemon_on_the_same_state_is_refused_and_the_first_keeps_going(daemon):
    with daemon.client(ALICE_TOKEN) as client:
        sid = client.subscribe(Filter(clusters=("c1",))).session
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from coorm_bridge.cli.main import main; sys.exit(main())",
            "serve",
            "--config",
            str(daemon.config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=daemon.folder,
        check=False,
    )
    assert result.returncode == 1
    message = result.stderr.strip()
    assert f"another coorm-bridge (pid {daemon.process.pid}) already uses the state folder" in (
        message
    )
    assert "Traceback" not in result.stderr
    with daemon.client(ALICE_TOKEN) as client:  # the first one never noticed
        assert client.session(sid).state is AppState.SUBMITTED
    daemon.kill(signal.SIGKILL)  # kill -9 leaves no stale lock: a new daemon starts
    daemon.start()
    with daemon.client(ALICE_TOKEN) as client:
        assert client.session(sid).state is AppState.SUBMITTED


def test_a_launcher_in_a_long_poll_is_alive_even_past_the_session_timeout(make_daemon):
    """A long poll (up to 60 s) longer than ``session_timeout`` (at least 10 s) must not get
    its waiting session withdrawn: a waiting long poll reads again every few seconds."""
    daemon = make_daemon()
    daemon.config.write_text(
        daemon.config.read_text().replace(
            'state_dir = "state"\n', 'state_dir = "state"\nsession_timeout = 10\n'
        )
    )
    daemon.start()
    with daemon.client() as client:
        first = client.subscribe(Filter(clusters=("c2",))).session
        client.request(first, Request(nodes={"c2": 4}, duration=3600))
        wait_for(client, first, "start")
        second = client.subscribe(Filter(clusters=("c2",))).session
        client.request(second, Request(nodes={"c2": 4}, duration=60))  # waits behind first
        seen = len(client.events(second))
        began = time.monotonic()
        while time.monotonic() - began < 25:
            events = client.events(second, after=seen, wait=25)
            seen += len(events)
            assert not [e for e in events if e.type in ("withdrawn", "ended")], events
        assert client.session(second).state is AppState.WAITING
        client.done(first)
