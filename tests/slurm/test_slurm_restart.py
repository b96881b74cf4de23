"""``kill -9`` of a real ``coorm-bridge serve`` beside the test Slurm while it holds placeholders
for a started session and for a waiting one: Slurm keeps the reservations, and the restarted
daemon (same state folder) finds every one where it left it, re-creates and deletes nothing,
and carries on (the waiting session starts on its placeholders' hosts when the first is done).

Slurm is read with its own command (``scontrol -o show reservation`` under ``TZ=UTC``), never
through the bridge. The daemons started here are stopped by PID whatever happens.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests_unixsocket

from coorm_bridge.core.messages import Event, StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.core.states import AppState
from coorm_bridge.launchers.client import BridgeClient, base_url
from tests import daemons

pytestmark = [pytest.mark.slurm, pytest.mark.daemon]

CLUSTERS = ("alpha", "beta")
#: Each session asks for 5 of a partition's 8 nodes on both: the second cannot start beside the
#: first, only when the first one's allocation (or, after ``done``, its ghost) ends.
HOSTS = 5
FIRST_DURATION = 1800
SECOND_DURATION = 600
FAIR_START = 3
#: A restarted daemon must answer within this many seconds (it polls and reconciles first).
START_TIMEOUT = 60


@dataclass(frozen=True)
class Held:
    """One reservation as Slurm reports it."""

    name: str
    partition: str
    start: str  # as scontrol prints it under TZ=UTC: compared as text, never re-interpreted
    end: str
    nodes: frozenset[str]
    line: str  # the whole record, to compare flags, users and all the rest too


class Daemon(daemons.Daemon):
    """``coorm-bridge serve`` on the test Slurm over a folder of its own; restartable on the
    same state folder."""

    def __init__(self, folder: Path, slurm) -> None:
        clusters = [{"name": c, "partition": c, "slurm_conf": str(slurm.conf)} for c in CLUSTERS]
        config = daemons.config(
            {"kind": "slurm", "cluster": clusters},
            policy={"interval": 0.5, "fair_start": FAIR_START},
            placement={"poll_interval": 1, "horizon": 3600},
        )
        super().__init__(folder, config)

    def start(self, timeout: float = START_TIMEOUT) -> Daemon:
        super().start(timeout)
        with self.client() as client:
            health = client.health()
        assert health.status == "ok", health
        return self

    def stop(self, sig: int = signal.SIGKILL) -> int | None:
        """Signal this daemon's process (by its PID) and reap it."""
        return super().stop(sig)

    def metrics(self) -> dict[str, float]:
        with requests_unixsocket.Session() as http:
            answer = http.get(f"{base_url(self.url)}/metrics", timeout=10)
        answer.raise_for_status()
        pairs = (
            line.rsplit(" ", 1) for line in answer.text.splitlines() if not line.startswith("#")
        )
        return {key: float(value) for key, value in pairs}


@pytest.fixture
def daemon(slurm_partitions, make_daemon) -> Iterator[Daemon]:
    """Not started; killed, its log shown (tests/conftest.py) and Slurm reset afterwards."""
    made = make_daemon(slurm_partitions, cls=Daemon)
    yield made
    made.stop(signal.SIGKILL)
    slurm_partitions.reset()


def utc(timestamp: int) -> str:
    """Unix seconds as scontrol prints them under TZ=UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp))


def reservations(slurm) -> dict[str, Held]:
    """Every reservation in the test Slurm, as ``scontrol`` shows it (times in UTC)."""
    env = {**slurm.environ(), "TZ": "UTC"}

    def run(*args: str) -> str:
        proc = subprocess.run(
            list(args), env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    held = {}
    for line in run("scontrol", "-o", "show", "reservation").splitlines():
        if not line.startswith("ReservationName="):
            continue  # "No reservations in the system"
        fields = dict(token.split("=", 1) for token in line.split() if "=" in token)
        nodes = frozenset(run("scontrol", "show", "hostnames", fields["Nodes"]).split())
        assert len(nodes) == int(fields["NodeCnt"]), line
        held[fields["ReservationName"]] = Held(
            name=fields["ReservationName"],
            partition=fields["PartitionName"],
            start=fields["StartTime"],
            end=fields["EndTime"],
            nodes=nodes,
            line=line,
        )
    return held


def of_session(held: dict[str, Held], session: str) -> dict[str, Held]:
    """The session's placeholders per cluster: ``<prefix><instance>-<session>-<cluster>``."""
    return {
        cluster: r
        for r in held.values()
        for cluster in CLUSTERS
        if r.name.startswith("coorm-") and r.name.endswith(f"-{session}-{cluster}")
    }


def assert_no_shared_host(held: dict[str, Held]) -> None:
    """No host is in two of the bridge's reservations at once (scontrol's times compare as
    text: same format, same zone)."""
    ours = sorted((r for r in held.values() if r.name.startswith("coorm-")), key=lambda r: r.name)
    for i, one in enumerate(ours):
        for other in ours[i + 1 :]:
            if one.start < other.end and other.start < one.end:
                shared = one.nodes & other.nodes
                assert not shared, f"{one.name} and {other.name} both hold {sorted(shared)}"


def wait_for(client: BridgeClient, sid: str, kind: str, after: int = 0, timeout=60) -> Event:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            assert event.type not in ("killed", "error", "withdrawn"), event
            if event.type == kind:
                return event
    raise AssertionError(f"no {kind} event for {sid} within {timeout} s")


def settled(slurm, daemon: Daemon, want: set[str], timeout: float = 60) -> dict[str, Held]:
    """Slurm's reservations once the bridge holds exactly ``want`` (names ending in
    ``-<session>-<cluster>``), none half-made, and nothing changed for three polls."""
    deadline = time.monotonic() + timeout
    last, same = None, 0
    while time.monotonic() < deadline:
        held = reservations(slurm)
        ours = {r.name.split("-", 2)[2] for r in held.values() if r.name.startswith("coorm-")}
        metrics = daemon.metrics()
        quiet = metrics.get('coorm_placeholders{status="requested"}', 0) == 0
        same = same + 1 if ours == want and quiet and held == last else 0
        if same >= 3:
            return held
        last = held
        time.sleep(1)
    raise AssertionError(f"the bridge's reservations did not settle on {sorted(want)}: {last}")


def test_kill_9_keeps_every_placeholder_of_started_and_waiting_sessions(slurm_partitions, daemon):
    slurm = slurm_partitions
    began = time.monotonic()
    daemon.start()
    nodes = dict.fromkeys(CLUSTERS, HOSTS)
    with daemon.client() as client:
        # 1. A session started on both clusters at once.
        first = client.subscribe(Filter(clusters=CLUSTERS), name="first").session
        client.request(first, Request(nodes=nodes, duration=FIRST_DURATION))
        start = wait_for(client, first, "start")
        assert isinstance(start, StartEvent)
        assert set(start.allocations) == set(CLUSTERS)
        for cluster, allocation in start.allocations.items():
            assert len(allocation.hosts) == HOSTS
            assert allocation.reservation is not None
            assert allocation.reservation.endswith(f"-{first}-{cluster}")
        # 2. A session waiting behind it: its hosts free up only at the first one's end.
        second = client.subscribe(Filter(clusters=CLUSTERS), name="second").session
        answer = client.request(second, Request(nodes=nodes, duration=SECOND_DURATION))
        assert answer.estimated_start is not None
        assert answer.estimated_start >= start.end
        assert client.session(second).state is AppState.WAITING
        want = {f"{s}-{c}" for s in (first, second) for c in CLUSTERS}
        before = settled(slurm, daemon, want)
        infos = {sid: client.session(sid) for sid in (first, second)}
        assert infos[first].state is AppState.STARTED
        assert infos[first].end == start.end
        assert infos[second].state is AppState.WAITING
        events = {sid: client.events(sid) for sid in (first, second)}
    held_first, held_second = of_session(before, first), of_session(before, second)
    for cluster in CLUSTERS:
        assert held_first[cluster].name == start.allocations[cluster].reservation
        assert held_first[cluster].nodes == set(start.allocations[cluster].hosts)
        assert held_first[cluster].partition == cluster
        assert held_first[cluster].end == utc(start.end)
        assert held_second[cluster].partition == cluster
        assert held_second[cluster].start == utc(infos[second].estimated_start)
        assert held_second[cluster].end == utc(infos[second].estimated_start + SECOND_DURATION)
        assert len(held_second[cluster].nodes) == HOSTS
        assert held_second[cluster].start >= held_first[cluster].end
    assert_no_shared_host(before)
    print(f"\nbefore the kill ({time.monotonic() - began:.1f} s):")
    for r in sorted(before.values(), key=lambda r: r.name):
        print(f"  {r.name} {r.partition} {r.start} .. {r.end} {sorted(r.nodes)}")

    # 3. kill -9: Slurm keeps every reservation as it was.
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    assert reservations(slurm) == before
    killed = time.monotonic()

    # 4. Restart on the same state folder. `serve` listens only once Loop.start has polled
    # every cluster and reconciled: its first answer comes after one reconciliation.
    daemon.start()
    print(f"restarted and healthy in {time.monotonic() - killed:.1f} s")
    metrics = daemon.metrics()
    repairs = {k: v for k, v in metrics.items() if k.startswith("coorm_reconciled_total")}
    for action in ("recreated", "orphans", "lost"):
        assert repairs.get(f'coorm_reconciled_total{{action="{action}"}}', 0) == 0, repairs
    assert not any(repairs.values()), f"reconciliation repaired something: {repairs}"
    assert metrics['coorm_placeholders{status="held"}'] == 2 * len(CLUSTERS)
    assert metrics['coorm_placeholders{status="requested"}'] == 0
    # Let the restarted daemon poll, plan and enact a few times before looking again.
    after = settled(slurm, daemon, want)
    assert after == before, "a reservation changed across the restart"
    assert_no_shared_host(after)
    with daemon.client() as client:
        assert client.session(first) == infos[first]
        assert client.events(first) == events[first]
        info = client.session(second)
        assert info.state is AppState.WAITING
        assert info.request == infos[second].request
        assert info.estimated_start == infos[second].estimated_start
        # The waiting session may have been sent a fresh view, which replaces the change
        # events before it (coalesced): its events go on from where they were.
        now = client.events(second)
        assert now[-1].seq >= events[second][-1].seq
        assert [e.type for e in now if e.type != "change"] == [
            e.type for e in events[second] if e.type != "change"
        ]
        started = [s for s in client.sessions() if s.state is AppState.STARTED]
        assert [s.session for s in started] == [first]

        # 5. done: the waiting session starts on the hosts its placeholders held.
        client.done(first)
        start2 = wait_for(client, second, "start", after=events[second][-1].seq)
        assert isinstance(start2, StartEvent)
        at_start = reservations(slurm)
        held_now = of_session(at_start, second)
        for cluster in CLUSTERS:
            allocation = start2.allocations[cluster]
            assert allocation.reservation == held_second[cluster].name
            assert set(allocation.hosts) == held_now[cluster].nodes
            assert set(allocation.hosts) == held_second[cluster].nodes, (
                f"{cluster}: started on {sorted(allocation.hosts)}, its placeholder held "
                f"{sorted(held_second[cluster].nodes)} before the restart"
            )
        assert_no_shared_host(at_start)
        ended = wait_for(client, first, "ended", after=events[first][-1].seq)
        assert ended.state is AppState.FINISHED
        client.done(second)
        ended = wait_for(client, second, "ended", after=start2.seq)
        assert ended.state is AppState.FINISHED
    deadline = time.monotonic() + 30
    while any(name.startswith("coorm-") for name in reservations(slurm)):
        assert time.monotonic() < deadline, f"left in Slurm: {sorted(reservations(slurm))}"
        time.sleep(0.5)
    assert daemon.stop(signal.SIGTERM) == 0, daemon.log.read_text()
    print(f"whole test: {time.monotonic() - began:.1f} s")
