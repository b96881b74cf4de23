"""``kill -9`` of a real ``coorm-bridge serve`` beside the test OAR while it holds placeholders
(containers) for two started sessions: OAR keeps them, the restarted daemon finds every one
where it left it (OAR reports a begun reservation from when it launched it; the bridge's
promise is the start it asked) and re-creates none, deletes an orphan named like its own, and
when the sessions end no placeholder is left in OAR.

OAR is read with its own command (``oarstat -J``), never through the bridge. Sessions belong to
a test user (a token over TCP): OAR lets root submit nothing. The daemons are stopped by PID.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator

import pytest

from coorm_bridge.core.messages import Event
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.client import BridgeClient
from tests import daemons
from tests.oar.lab import OarInstance

pytestmark = [pytest.mark.oar, pytest.mark.daemon]

TOKEN = "oar-daemon-test-token-0123456789abcdef"
HOSTS = 4  # of 8 per cluster: both sessions start at once
FAILSAFE = 90  # seconds: only a failure waits this long
LIVE = ("Waiting", "toLaunch", "Launching", "Running", "toAckReservation", "Hold")


def config(oar: OarInstance, port: int) -> str:
    adapter = {"kind": "oar", "reservation_lead": 5, "cluster": daemons.oar_clusters(oar)}
    return daemons.config(
        adapter,
        port=port,
        tokens={TOKEN: oar.users[0]},
        policy=daemons.BATCH_POLICY,
        placement={"poll_interval": 1, "horizon": 3600},
    )


@pytest.fixture
def daemon(oar: OarInstance, make_daemon) -> Iterator[daemons.Daemon]:
    """Not started; killed, its log shown (tests/conftest.py) and OAR reset afterwards."""
    oar.reset()
    port = daemons.free_port()
    made = make_daemon(config(oar, port), port=port)
    yield made
    made.stop(signal.SIGKILL)
    oar.reset()


def containers(oar: OarInstance) -> dict[str, tuple[str, str]]:
    """The live containers named like the bridge's: name -> (OAR job id, state)."""
    return {
        job["name"]: (job_id, job["state"])
        for job_id, job in oar.active_jobs().items()
        if job["state"] in LIVE
        and "container" in job["types"]
        and str(job["name"]).startswith("coorm-")
    }


def wait_for(client: BridgeClient, sid: str, kind: str, timeout: float = 90) -> Event:
    deadline, after = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            assert event.type not in ("killed", "error", "withdrawn"), event
            if event.type == kind:
                return event
    raise AssertionError(f"no {kind} event for {sid} within {timeout} s")


def settled(
    oar: OarInstance, done: Callable[[dict[str, tuple[str, str]]], bool], what: str
) -> dict[str, tuple[str, str]]:
    """OAR's containers once ``done`` holds of them (polled; the failsafe only fails)."""
    deadline, now = time.monotonic() + FAILSAFE, containers(oar)
    while not done(now):
        if time.monotonic() > deadline:
            raise AssertionError(f"OAR's containers not {what} after {FAILSAFE} s: {now}")
        time.sleep(0.2)
        now = containers(oar)
    return now


def ids(held: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: job_id for name, (job_id, _) in held.items()}


def test_kill_9_leaves_no_placeholder_orphaned_in_oar(oar: OarInstance, daemon) -> None:  # type: ignore[no-untyped-def]
    daemon.start()
    clusters = tuple(oar.clusters)
    with BridgeClient(daemon.tcp, token=TOKEN, timeout=10) as client:
        # Both asked at once (they fit side by side), awaited together.
        first = client.subscribe(Filter(clusters=clusters), "first").session
        client.request(first, Request(nodes=dict.fromkeys(clusters, HOSTS), duration=1800))
        second = client.subscribe(Filter(clusters=clusters), "second").session
        client.request(second, Request(nodes=dict.fromkeys(clusters, HOSTS), duration=600))
        wait_for(client, first, "start")
        wait_for(client, second, "start")
    # the start is told once OAR runs every container: two per session, all running
    held = settled(oar, lambda now: len(now) == 4, "two per session")
    assert sorted(state for _, state in held.values()) == ["Running"] * 4, held
    owners = {oar.job(int(job_id))["owner"] for job_id, _ in held.values()}
    assert owners == {oar.users[0]}
    instance = next(iter(held)).split("-")[1]

    daemon.kill()
    orphan = f"coorm-{instance}-nosuchsession-alpha"
    oar.submit(
        "-r",
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + 7200)),
        "-t",
        "container",
        "-t",
        "noop",
        "-n",
        orphan,
        "-p",
        "cluster='alpha'",
        "-l",
        "/host=1,walltime=0:10:00",
        user=oar.users[0],
    )
    daemon.start()
    # the orphan's deletion is the restarted daemon's first pass over OAR done: by then every
    # container it restored is the one it left (a re-created one would have another id)
    after = settled(oar, lambda now: orphan not in now, "without the orphan")
    assert ids(after) == ids(held)
    log = daemon.log.read_text()
    assert "not restored" not in log
    with BridgeClient(daemon.tcp, token=TOKEN, timeout=10) as client:
        assert ids(containers(oar)) == ids(held)  # and none re-created since
        client.done(second)
        client.done(first)
    settled(oar, lambda now: not now, "all deleted")
