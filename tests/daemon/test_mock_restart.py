"""The simulated platform behind a real daemon outlives it, as a real batch system would: after a
``kill -9`` and a restart on the same state folder its time has gone on (never back), its
reservations hold the same hosts over the same times, and the bridge finds its placeholders
where it left them (nothing to re-create). Bad numbers in its settings stop the daemon with one
line naming the file and the key.

Each test starts its own daemons and stops only those processes, by PID, whatever happens.
"""

from __future__ import annotations

import functools
import signal
import time
from pathlib import Path

import pytest
import requests

from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from tests import daemons
from tests.daemons import free_port, wait_for

pytestmark = pytest.mark.daemon

TOKEN = "restart-token-0123456789"
SPEEDUP = 60
PLATFORM = (
    daemons.PLATFORM
    + """[[load]]
kind = "synthetic"
cluster = "c1"
seed = 7
count = 200
mean_interarrival = 300
mean_runtime = 1200
max_hosts = 2
"""
)


class Daemon(daemons.Daemon):
    """``coorm-bridge serve`` over a folder of its own; restartable on the same state."""

    def __init__(self, folder: Path, speedup: object = SPEEDUP) -> None:
        port = free_port()
        adapter = {**daemons.MOCK, "speedup": daemons.Raw(speedup)}
        policy = {"interval": 0.2}
        config = daemons.config(adapter, port=port, tokens={TOKEN: "alice"}, policy=policy)
        super().__init__(folder, config, PLATFORM, port)

    def metrics(self) -> dict[str, float]:
        text = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=10).text
        pairs = (line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
        return {key: float(value) for key, value in pairs}


@pytest.fixture
def make_daemon(make_daemon):
    """Daemons of this module's kind (tests/conftest.py stops them)."""
    return functools.partial(make_daemon, cls=Daemon)


def test_after_kill_9_the_platform_resumes_with_its_reservations_and_time(make_daemon):
    daemon = make_daemon().start()
    with daemon.client() as client:
        sid = client.subscribe(Filter(clusters=("c1", "c2"))).session
        client.request(sid, Request(nodes={"c1": 2, "c2": 1}, duration=6 * 3600))
        start = wait_for(client, sid, "start")
        events = client.events(sid)
        before = client.health().time
    wall_before = time.time()
    held = daemon.mock_reservations()
    ours = {key: value for key, value in held.items() if key[1].startswith("coorm-")}
    told = {(c, a.reservation) for c, a in start.allocations.items()}
    assert set(ours) == told
    assert all(name.endswith(f"-{sid}-{cluster}") for cluster, name in told)
    for (cluster, _), (_, end, hosts) in ours.items():
        assert sorted(hosts) == sorted(start.allocations[cluster].hosts)  # as the mock says
        assert end >= start.time + 6 * 3600

    assert daemon.kill(signal.SIGKILL) == -signal.SIGKILL
    daemon.start()
    with daemon.client() as client:
        after = client.health().time
        wall_after = time.time()
        # Never back, and on by the time it was down (at 60x; half of it, to allow for the
        # monotonic and wall clocks drifting apart a little).
        assert after >= before + int((wall_after - wall_before) * SPEEDUP * 0.5)
        assert client.session(sid).state is AppState.STARTED
        assert client.events(sid) == events  # nothing new to tell its launcher
    assert {k: v for k, v in daemon.mock_reservations().items() if k in ours} == ours
    figures = daemon.metrics()
    # The start-up reconciliation ran before the daemon answered: nothing was lost.
    assert figures.get('coorm_reconciled_total{action="recreated"}', 0) == 0
    assert figures.get('coorm_reconciled_total{action="orphans"}', 0) == 0
    assert figures['coorm_placeholders{status="held"}'] == 2
    assert "calls replayed" in daemon.log.read_text()
    assert daemon.kill(signal.SIGTERM) == 0


def test_a_changed_platform_file_is_refused_until_the_state_is_moved_away(make_daemon):
    daemon = make_daemon()
    daemon.start()
    with daemon.client() as client:
        client.subscribe()
    assert daemon.kill(signal.SIGTERM) == 0
    platform = daemon.folder / "platform.toml"
    platform.write_text(platform.read_text().replace("hosts = 4", "hosts = 6"))
    refused = daemon.run()
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "saved by another simulated platform" in lines[0]
    saved = daemon.folder / "state" / "mock-platform.sqlite"
    assert str(saved) in lines[0]
    saved.rename(saved.with_suffix(".old"))
    daemon.start()  # afresh, as the message says
    with daemon.client() as client:
        assert {c.name: c.hosts for c in client.clusters()} == {"c1": 8, "c2": 6}
    assert daemon.kill(signal.SIGTERM) == 0


@pytest.mark.parametrize(
    ("speedup", "status", "where"),
    [
        ("1e300", 2, "{config}: adapter.mock.speedup: must be at most 10000"),
        ("inf", 2, "{config}: adapter.mock.speedup: "),
    ],
)
def test_a_speedup_out_of_range_is_one_line_naming_file_and_key(folder, speedup, status, where):
    daemon = Daemon(folder, speedup=speedup)
    result = daemon.run()
    assert result.returncode == status
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("coorm-bridge: ")
    assert where.format(config=daemon.config) in lines[0]


def test_a_platform_time_out_of_range_is_one_line_naming_file_and_key(folder):
    daemon = Daemon(folder)
    platform = folder / "platform.toml"
    platform.write_text("start = 99999999999999\n" + PLATFORM)
    result = daemon.run()
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{platform}: start: must be at most 253402300799 (the end of year 9999" in lines[0]
    assert not (folder / "state" / "mock-platform.sqlite").exists()
