"""Starting on a real OAR 2.5.9 with the shipped configuration (``poll_interval = 10``,
``reservation_lead = 15``), and who a refusal belongs to.

OAR makes a container begin only at a scheduler pass after its start, and starts inner jobs at
the pass after their submission: a launcher told to start before its containers began would
submit jobs that wait for them (31 s after the start event, measured). The bridge tells the
start once OAR has launched every container; the components then run at the pass their
submission triggers.

OAR lets no job be submitted as root: a session of root's is that session's failure (an error
event), never the bridge's lack of rights.
"""

from __future__ import annotations

import io
import shutil
import signal
import time
from collections.abc import Iterator

import pytest
import requests

from coorm_bridge.core.messages import Event, StartEvent
from coorm_bridge.core.model import ClusterInfo, Filter, Request
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.deploy.oar import OarDeployer
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.rundir import prepare
from tests import daemons
from tests.oar.lab import OarInstance
from tests.oar.test_oar_launch import AsUser, outputs

pytestmark = [pytest.mark.oar, pytest.mark.daemon]

TOKEN = "oar-start-test-token-0123456789abcdef"
#: Generous failsafes only: each wait ends on an event well before.
FAILSAFE = 180
#: Each component's task writes when it started.
STAMP = 'date +%s.%N > "$COORM_RUN_DIR/$COORM_COMPONENT.start"'
APP = f"""
duration = 600
[selector]
name = "rigid"
params = {{ nodes = {{ alpha = 2, beta = 1 }} }}
[deployment]
mpi = "none"
[[component]]
name = "solver"
command = ["sh", "-c", '{STAMP}']
clusters = ["alpha"]
processes_per_host = 1
[[component]]
name = "coupler"
command = ["sh", "-c", '{STAMP}']
clusters = ["beta"]
processes_per_host = 1
"""


def config(oar: OarInstance, port: int) -> str:
    """etc/coorm-bridge-oar.toml's values, on the test OAR's two clusters."""
    adapter = {
        "kind": "oar",
        "backend": "cli",
        "reservation_lead": 15,
        "cluster": daemons.oar_clusters(oar),
    }
    return daemons.config(
        adapter,
        port=port,
        tokens={TOKEN: oar.users[0]},
        policy={"interval": 1.0, "fair_start": 30},
        placement={"horizon": 300, "attempts": 5, "poll_interval": 10},
    )


@pytest.fixture
def daemon(oar: OarInstance, make_daemon, folder) -> Iterator[daemons.Daemon]:
    """Started; killed, its log shown (tests/conftest.py) and OAR reset afterwards."""
    oar.reset()
    folder.chmod(0o755)
    port = daemons.free_port()
    made = make_daemon(config(oar, port), port=port)
    made.start()
    yield made
    made.stop(signal.SIGKILL)
    oar.reset()


def follow(client: BridgeClient, sid: str, kinds: tuple[str, ...]) -> tuple[Event, float, list]:
    """The first event of one of ``kinds``, when it arrived, and every event before it."""
    deadline, after, seen = time.monotonic() + FAILSAFE, 0, []
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            seen.append(event)
            if event.type in kinds:
                return event, time.time(), seen
    raise AssertionError(f"no {kinds} event for {sid}; events: {seen}")


def test_the_start_is_told_once_oar_runs_every_container_and_the_jobs_follow(
    daemon, oar: OarInstance
) -> None:
    user = oar.users[0]
    root = oar.workdir(user) / f"start-{time.monotonic_ns()}"
    root.mkdir()
    shutil.chown(root, user, user)
    app = parse_app(APP, base_dir=root)
    with BridgeClient(daemon.tcp, token=TOKEN, timeout=10) as client:
        sid = client.subscribe(Filter(clusters=("alpha", "beta")), "coupled").session
        client.request(sid, Request(nodes={"alpha": 2, "beta": 1}, duration=app.duration))
        start, told, seen = follow(client, sid, ("start", "error", "killed"))
        assert isinstance(start, StartEvent), seen
        # At the start, OAR runs both containers: a job submitted now starts at once.
        states = {
            job["name"]: job["state"]
            for job in oar.active_jobs().values()
            if f"-{sid}-" in str(job["name"])
        }
        assert sorted(states.values()) == ["Running", "Running"], states
        deployers = {
            name: OarDeployer(name, info.submission, AsUser(user))
            for name, info in ((i.name, i) for i in client.clusters())
            if name in start.allocations
        }
        infos: dict[str, ClusterInfo] = {i.name: i for i in client.clusters()}
        directory = prepare(
            app, sid, start, infos, dict.fromkeys(deployers, "oar"),
            address=lambda cluster, host: deployers[cluster].address(host), root=root,
        )  # fmt: skip
        for path in (directory.path, *directory.path.iterdir()):
            shutil.chown(path, user, user)
        run = Run(directory, deployers, PlainDisplay(io.StringIO(), io.StringIO()))
        run.submit(start)
        while not run.poll():
            assert time.time() < start.end, run.statuses
            time.sleep(0.2)
        assert run.exit_status() == 0, (run.statuses, outputs(run))
        client.done(sid)
    began = {c: float((directory.path / f"{c}.start").read_text()) for c in ("solver", "coupler")}
    print(
        f"start event {told - start.time:.2f} s after its time; components began "
        + ", ".join(f"{c} {t - told:+.2f} s" for c, t in began.items())
        + " from it"
    )


def test_a_session_of_root_fails_alone_and_leaves_the_bridges_rights_alone(
    daemon, oar: OarInstance
) -> None:
    """OAR refuses root's jobs by an admission rule; submitted as the session's owner, that
    is root's session's end (an error event saying why), not the bridge's lack of rights:
    health stays ok and another user's session, asked at the same time, is placed."""
    with daemon.client() as mine, BridgeClient(daemon.tcp, token=TOKEN, timeout=10) as theirs:
        sid = mine.subscribe(Filter(clusters=("alpha",)), "as-root").session  # root: peer creds
        mine.request(sid, Request(nodes={"alpha": 1}, duration=600))
        other = theirs.subscribe(Filter(clusters=("alpha",)), "as-user").session
        theirs.request(other, Request(nodes={"alpha": 1}, duration=600))
        error, _, seen = follow(mine, sid, ("error", "start"))
        assert error.type == "error", seen
        assert "root" in error.reason
        health = mine.health()
        assert health.status == "ok", health
        assert not health.problems
        rights = requests.get(f"{daemon.tcp}/metrics", timeout=10).text
        assert 'coorm_cluster_rights{cluster="alpha"} 1.0' in rights
        started, _, seen = follow(theirs, other, ("start", "error", "killed"))
        assert started.type == "start", seen
        theirs.done(other)
        health = mine.health()
        assert health.status == "ok", health
