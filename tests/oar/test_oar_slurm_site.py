"""One bridge over OAR and Slurm at once (``kind = "mixed"``): the test OAR's cluster ``beta``
(named ``gamma`` for the bridge) and a real Slurm 22.05's partition ``alpha``. One application
over both gets one start, a Slurm reservation and an OAR container at that start, a start event
naming hosts of both, and both placeholders go when it is done.

The Slurm is this module's own (tests/slurm/slurm-local.sh, started and stopped by PID like the
Slurm tests' fixtures); the OAR is the session's.
"""

from __future__ import annotations

import calendar
import io
import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import Filter, Request
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.client import BridgeClient
from coorm_bridge.launchers.deploy.oar import OarDeployer
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.deploy.slurm import SlurmDeployer
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.rundir import prepare
from tests import daemons
from tests.oar.lab import OarInstance, open_mpi_session_dir
from tests.oar.test_oar_launch import AsUser
from tests.slurm import conftest as slurm_lab

pytestmark = [pytest.mark.oar, pytest.mark.slurm, pytest.mark.daemon]

TOKEN = "mixed-site-test-token-0123456789abcdef"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "coupled"


@pytest.fixture(scope="module")
def slurm() -> Iterator[slurm_lab.SlurmInstance]:
    """A Slurm of one partition, alpha, with munged (shared: see tests/slurm/conftest.py)."""
    knobs = {"CLUSTERS": "alpha", "NODES": "4", "DBD": "0", "REST": "0"}
    with slurm_lab._slurm("partitions", knobs, slurm_lab.COMMON_BINARIES) as instance:
        yield instance


def config(slurm: slurm_lab.SlurmInstance, oar: OarInstance, port: int) -> str:
    slurm_system = {
        "kind": "slurm",
        "cluster": [{"name": "alpha", "partition": "alpha", "slurm_conf": str(slurm.conf)}],
    }
    oar_system = {
        "kind": "oar",
        "reservation_lead": 10,
        "cluster": [{"name": "gamma", "value": "beta"}],
    }
    adapter = {
        "kind": "mixed",
        "system": [slurm_system, oar_system],
        "link": [{"clusters": ["alpha", "gamma"], "latency_s": 0.001, "bandwidth_bps": 1e9}],
    }
    return daemons.config(
        adapter,
        port=port,
        tokens={TOKEN: oar.users[0]},
        policy={"interval": 0.5, "fair_start": 2},
        placement=daemons.BATCH_PLACEMENT,
    )


@pytest.fixture
def site(slurm, oar: OarInstance, make_daemon, folder) -> Iterator[daemons.Daemon]:
    """Not started; killed, its log shown (tests/conftest.py), Slurm and OAR reset afterwards."""
    oar.reset()
    folder.chmod(0o755)
    port = daemons.free_port()
    made = make_daemon(config(slurm, oar, port), port=port)
    yield made
    made.stop(signal.SIGKILL)
    slurm.reset()
    oar.reset()


def slurm_reservation(slurm: slurm_lab.SlurmInstance, name: str) -> dict[str, str] | None:
    shown = slurm.run("scontrol", "-o", "show", "reservation", name, check=False)
    if shown.returncode != 0 or not shown.stdout.startswith("ReservationName="):
        return None
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


def oar_container(oar: OarInstance, name: str) -> dict | None:
    found = [j for j in oar.active_jobs().values() if j["name"] == name]
    return found[0] if found else None


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def follow_until(client: BridgeClient, sid: str, timeout: float = 120) -> StartEvent:
    deadline, after, seen = time.monotonic() + timeout, 0, []
    while time.monotonic() < deadline:
        for event in client.events(sid, after=after, wait=5):
            after = event.seq
            seen.append(event)
            assert event.type not in ("killed", "error", "withdrawn"), seen
            if isinstance(event, StartEvent):
                return event
    raise AssertionError(f"no start for {sid}; events: {seen}")


def test_one_application_over_oar_and_slurm_starts_once_on_both(site, slurm, oar) -> None:  # type: ignore[no-untyped-def]
    site.start()
    with BridgeClient(site.tcp, token=TOKEN, timeout=10) as client:
        infos = {info.name: info for info in client.clusters()}
        assert [(n, i.submission.kind) for n, i in infos.items()] == [
            ("alpha", "slurm"),
            ("gamma", "oar"),
        ]
        assert infos["gamma"].hosts == len(oar.nodes["beta"])
        sid = client.subscribe(Filter(clusters=("alpha", "gamma")), "coupled").session
        asked = time.time()
        client.request(sid, Request(nodes={"alpha": 2, "gamma": 3}, duration=300))
        start = follow_until(client, sid)
        print(f"request to start: {time.time() - asked:.1f} s")
        alpha, gamma = start.allocations["alpha"], start.allocations["gamma"]
        assert set(alpha.hosts) <= set(slurm.nodes["alpha"])
        assert len(alpha.hosts) == 2
        assert set(gamma.hosts) <= set(oar.nodes["beta"])
        assert len(gamma.hosts) == 3
        held = slurm_reservation(slurm, alpha.reservation)
        assert held is not None
        container = oar_container(oar, gamma.reservation)
        assert container is not None
        assert container["owner"] == oar.users[0]
        assert "container" in container["types"]
        # One start asked of both: Slurm's reservation and OAR's container (its command keeps
        # the start asked, OAR reporting a begun one from when it launched it), both begun
        # when the start is told: OAR runs the container.
        planned = oar.job(int(container["Job_Id"]))
        begins = utc(held["StartTime"])
        assert f"coorm-placeholder start={begins}" in planned["command"]
        assert planned["state"] == "Running"
        assert begins <= start.time <= begins + 11  # OAR launched it at a pass after its start
        assert utc(held["EndTime"]) >= start.end
        assert sorted(container["assigned_network_address"] or gamma.hosts) == sorted(gamma.hosts)

        client.done(sid)
        deadline = time.monotonic() + 60
        while slurm_reservation(slurm, alpha.reservation) or oar_container(oar, gamma.reservation):
            assert time.monotonic() < deadline, "a placeholder stayed"
            time.sleep(0.2)


@pytest.mark.mpi
def test_the_coupled_example_runs_across_oar_and_slurm(mpi, site, slurm, oar) -> None:  # type: ignore[no-untyped-def]
    """What coorm-launch does, with its own pieces: the session (a user's, by token), the rigid
    selection, the start, then one job per cluster through each kind's deployer, as the user
    (this test runs as root: runuser; Slurm's sbatch into a reservation for that user, OAR's
    oarsub -t inner, which root may not run) and the coupled
    example's ranks exchanging checked values across the two batch systems. Its components
    begin within OAR's scheduling latency of each other."""
    text = (EXAMPLE / "coupled.toml").read_text()
    text = text.replace('clusters = ["alpha", "beta"]', 'clusters = ["alpha", "gamma"]')
    text = text.replace("nodes = { alpha = 2, beta = 1 }", "nodes = { alpha = 2, gamma = 1 }")
    text = text.replace('clusters = ["beta"]', 'clusters = ["gamma"]')
    # The lab's OAR nodes are this machine, and oarsh (mpirun's way to them) needs cpusets the
    # lab turns off: the OAR component's ranks start on its job's first node.
    text = text.replace('mock = "local" }', 'mock = "local", oar = "local" }')
    user = oar.users[0]
    root = oar.workdir(user) / f"mixed-{time.monotonic_ns()}"
    root.mkdir()
    shutil.chown(root, user, user)
    open_mpi_session_dir(user)  # the Slurm part's mpirun and the OAR part's, both on this machine
    app = parse_app(text, base_dir=EXAMPLE)
    site.start()
    with BridgeClient(site.tcp, token=TOKEN, timeout=10) as client:
        infos = {info.name: info for info in client.clusters()}
        sid = client.subscribe(Filter(clusters=("alpha", "gamma")), "coupled").session
        client.request(sid, Request(nodes={"alpha": 2, "gamma": 1}, duration=app.duration))
        start = follow_until(client, sid)
        deployers = {
            "alpha": SlurmDeployer("alpha", infos["alpha"].submission, AsUser(user, slurm.conf)),
            "gamma": OarDeployer("gamma", infos["gamma"].submission, AsUser(user)),
        }
        kinds = {name: info.submission.kind for name, info in infos.items()}
        directory = prepare(
            app,
            sid,
            start,
            infos,
            kinds,
            address=lambda cluster, host: deployers[cluster].address(host),
            root=root,
        )
        for path in (directory.path, *directory.path.iterdir()):
            shutil.chown(path, user, user)
        run = Run(directory, deployers, PlainDisplay(io.StringIO(), io.StringIO()))
        run.submit(start)
        deadline = time.monotonic() + 300
        while not run.poll():
            assert time.monotonic() < deadline, f"still running: {run.statuses}"
            time.sleep(0.2)
        client.done(sid)
    folder = directory.path
    jobs = json.loads((folder / "jobs.json").read_text())
    said = {p.name: p.read_text()[-800:] for p in folder.iterdir() if p.suffix in (".out", ".err")}
    assert {c: (j["state"], j["exit_code"]) for c, j in jobs.items()} == {
        "alpha": ("completed", 0),
        "gamma": ("completed", 0),
    }, said
    solver = json.loads((folder / "solver.json").read_text())
    coupler = json.loads((folder / "coupler.json").read_text())
    assert (solver["ranks"], coupler["ranks"]) == (4, 2)
    assert solver["ok"]
    assert coupler["ok"]
    assert solver["received"] == coupler["sent"]
    apart = abs(solver["started"] - coupler["started"])
    print(f"Slurm's and OAR's components began {apart:.2f} s apart")
    assert apart <= 15  # within a pass of OAR's scheduler (asked for at once, see Beside OAR)
