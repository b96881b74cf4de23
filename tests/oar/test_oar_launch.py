"""coorm-launch's OAR deployment against a real OAR 2.5.9 (tests/oar/conftest.py's ``oar``).

Each test holds container placeholders as the bridge does (the adapter's own ``oarsub -r``
builder, run as the owner), then deploys into them the way ``coorm-launch`` does at a start:
``prepare`` writes the run directory, :class:`~coorm_bridge.launchers.deploy.run.Run` submits one
job per cluster through the OAR deployer and watches them. The deployer's commands run as the
test user (``runuser``), as they would for a user running the launcher. Every job a test made is
deleted at its end (only those: other sessions may share the OAR).

The lab's nodes are emulated: every node is this machine, and their names resolve nowhere but in
OAR's own ssh configuration. So a job "on" alpha-2 runs here, and what it ran on is what OAR
gave it (``$OAR_NODEFILE``, ``assigned_network_address``); the coupled example's rendezvous is
given as 127.0.0.1 and its MPI ranks all start on the job's first node (``mpirun`` cannot reach
the other emulated nodes: ``oarsh`` needs the cpusets the lab turns off).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.batch.runner import Completed, LocalRunner
from coorm_bridge.adapters.oar import commands
from coorm_bridge.adapters.oar.binding import OarBinding
from coorm_bridge.core.batch import ReservationSpec
from coorm_bridge.core.messages import Allocation, StartEvent
from coorm_bridge.core.model import ClusterInfo, Submission
from coorm_bridge.launchers.app import parse_app
from coorm_bridge.launchers.deploy.oar import SCHEDULING_MARGIN, OarDeployer
from coorm_bridge.launchers.deploy.run import Run
from coorm_bridge.launchers.display import PlainDisplay
from coorm_bridge.launchers.rundir import prepare
from tests.oar.lab import FINAL_STATES, SBIN_PATH, OarInstance, open_mpi_session_dir

pytestmark = pytest.mark.oar

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "coupled"
#: Each part writes the hosts OAR gave its job and when it began, then stays a little.
STAMP = (
    'sort -u "$OAR_NODEFILE" > "$COORM_RUN_DIR/$COORM_CLUSTER.nodes"; '
    'date +%s.%N > "$COORM_RUN_DIR/$COORM_CLUSTER.start"; sleep 2'
)
APP = f"""
duration = 600
[selector]
name = "rigid"
params = {{ nodes = {{ alpha = 2, beta = 1 }} }}
[deployment]
mpi = "none"
[[component]]
name = "solver"
command = ["sh", "-c", '{STAMP}; exit ALPHA_EXIT']
clusters = ["alpha"]
processes_per_host = 1
[[component]]
name = "coupler"
command = ["sh", "-c", '{STAMP}; exit BETA_EXIT']
clusters = ["beta"]
processes_per_host = 1
"""


def one_part(name: str, script: str) -> str:
    """An application of one component, a shell script on one host."""
    return (
        'duration = 600\n[selector]\nname = "rigid"\nparams = { nodes = { alpha = 1 } }\n'
        f'[deployment]\nmpi = "none"\n[[component]]\nname = "{name}"\n'
        f'command = ["sh", "-c", {json.dumps(script)}]\nprocesses_per_host = 1\n'
    )


class AsUser(LocalRunner):
    """The commands of a launcher that ``user`` runs (this test runs as root)."""

    def __init__(self, user: str, slurm_conf: Path | None = None) -> None:
        env = {"PATH": SBIN_PATH}
        if slurm_conf is not None:  # the same runner for Slurm's commands, on that controller
            env["SLURM_CONF"] = str(slurm_conf)
        super().__init__(env)
        self.user = user

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30
    ) -> Completed:
        return super().run(("runuser", "-u", self.user, "--", *argv), env=env, timeout=timeout)


@dataclass
class Lab:
    """Placeholders held for the test, and the jobs in them deleted at its end."""

    oar: OarInstance
    root: Path
    containers: list[tuple[str, str]] = field(default_factory=list)  # (owner, job id)

    def hold(
        self,
        cluster: str,
        hosts: Sequence[str],
        owner: str,
        seconds: int,
        granted: Sequence[str] = (),
    ) -> StartEvent:
        """A container placeholder on ``hosts`` from now for ``seconds``, as the bridge makes
        it; the start event of an allocation of its ``granted`` hosts (default: all). Not
        awaited: ``begun`` awaits every container held, so that their starts overlap."""
        name = f"coorm-t{os.getpid()}-{len(self.containers)}-{cluster}"
        now = int(time.time())
        spec = ReservationSpec(
            name=name, start=now, end=now + seconds, host_names=tuple(hosts), users=(owner,)
        )
        binding = OarBinding(name=cluster, value=cluster)
        done = LocalRunner({"PATH": SBIN_PATH}).run(
            commands.create_reservation(binding, spec, owner), env=commands.ENV
        )
        assert done.ok, done.stdout + done.stderr
        job = commands.created_job_id(done.stdout)
        self.containers.append((owner, job))
        allocation = Allocation(hosts=list(granted or hosts), reservation=name)
        return StartEvent(seq=1, time=now, end=spec.end, allocations={cluster: allocation})

    def begun(self) -> None:
        """Once OAR runs every container held (as the bridge's start event promises)."""
        for _, job in self.containers:
            self.oar.wait_job(int(job), {"Running"}, timeout=60)

    def container(self, start: StartEvent, cluster: str) -> str:
        name = start.allocations[cluster].reservation
        return next(job for _, job in self.containers if self.oar.job(int(job))["name"] == name)

    def clean(self) -> None:
        """Deletes the containers and every job in them, as their owners."""
        ours = {job for _, job in self.containers}
        for job_id, job in self.oar.active_jobs().items():
            if set(job["types"]) & {f"inner={c}" for c in ours}:
                self.oar.run("oardel", job_id, user=job["owner"])
        for owner, job in self.containers:
            self.oar.run("oardel", job, user=owner)
        for job in ours:
            self.oar.wait_job(int(job), FINAL_STATES, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def lab(oar: OarInstance) -> Iterator[Lab]:
    user = oar.users[0]
    root = oar.workdir(user) / f"coorm-launch-{os.getpid()}-{time.monotonic_ns()}"
    root.mkdir()
    shutil.chown(root, user, user)
    open_mpi_session_dir(user)
    held = Lab(oar, root)
    try:
        yield held
    finally:
        held.clean()


def merged(*starts: StartEvent) -> StartEvent:
    """One start of every cluster's allocation, ending with the earliest end."""
    allocations = {k: v for s in starts for k, v in s.allocations.items()}
    return StartEvent(
        seq=1,
        time=max(s.time for s in starts),
        end=min(s.end for s in starts),
        allocations=allocations,
    )


def deploy(
    lab: Lab,
    app_text: str,
    start: StartEvent,
    user: str,
    *,
    base: Path | None = None,
    address: Callable[[str, str], str] | None = None,
) -> tuple[Run, dict[str, OarDeployer]]:
    """What coorm-launch does at a start: the run directory (owned by the user who runs the
    launcher), one OAR job per cluster submitted together, watched until all ended."""
    app = parse_app(app_text, base_dir=base or lab.root)
    deployers = {
        name: OarDeployer(name, Submission(kind="oar", cluster=name), AsUser(user))
        for name in start.allocations
    }
    clusters = {name: ClusterInfo(name=name, hosts=8, cores_per_host=2) for name in deployers}
    directory = prepare(
        app,
        f"s{time.monotonic_ns()}",
        start,
        clusters,
        dict.fromkeys(deployers, "oar"),
        address=address or (lambda cluster, host: deployers[cluster].address(host)),
        root=lab.root,
    )
    for path in (directory.path, *directory.path.iterdir()):
        shutil.chown(path, user, user)
    run = Run(directory, deployers, PlainDisplay(io.StringIO(), io.StringIO()))
    run.submit(start)
    deadline = time.monotonic() + 240
    while not run.poll():
        if time.monotonic() > deadline:
            run.cancel()
            pytest.fail(f"still running after 240 s: {run.statuses}\n{outputs(run)}")
        time.sleep(0.2)
    return run, deployers


def outputs(run: Run) -> str:
    """The end of every job's output, for a failure's message."""
    said = []
    for plan in run.plans:
        for path in (plan.stdout, plan.stderr):
            text = path.read_text()[-1500:] if path.exists() else "(none)"
            said.append(f"--- {path.name}\n{text}")
    return "\n".join(said)


def records(run: Run) -> dict[str, tuple[str, int | None]]:
    jobs = json.loads((run.directory.path / "jobs.json").read_text())
    return {cluster: (job["state"], job["exit_code"]) for cluster, job in jobs.items()}


def oar_job(lab: Lab, run: Run, cluster: str) -> dict[str, Any]:
    return lab.oar.job(int(run.jobs[cluster]))


def test_one_job_per_cluster_on_exactly_the_granted_hosts(lab: Lab) -> None:
    user = lab.oar.users[0]
    # not the container's first hosts, which OAR would pick if the job named none
    alpha = lab.hold("alpha", ["alpha-1", "alpha-2", "alpha-3"], user, 600, ["alpha-2", "alpha-3"])
    beta = lab.hold("beta", ["beta-3", "beta-4"], user, 600, ["beta-4"])
    lab.begun()
    start = merged(alpha, beta)
    app = APP.replace("ALPHA_EXIT", "0").replace("BETA_EXIT", "0")
    run, deployers = deploy(lab, app, start, user)
    assert records(run) == {"alpha": ("completed", 0), "beta": ("completed", 0)}
    assert run.exit_status() == 0
    folder = run.directory.path
    for cluster, allocation in start.allocations.items():
        # what OAR gave the job, as the job saw it and as OAR says
        assert (folder / f"{cluster}.nodes").read_text().split() == allocation.hosts
        job = oar_job(lab, run, cluster)
        assert sorted(job["assigned_network_address"]) == allocation.hosts
        assert job["types"] == [f"inner={lab.container(start, cluster)}"]
        assert job["owner"] == user
        assert job["walltime"] <= start.end - job["submissionTime"]  # within the allocation
        waited = job["startTime"] - job["submissionTime"]
        print(f"{cluster}: job {job['Job_Id']} started {waited} s after its submission")
    begun = [float((folder / f"{c}.start").read_text()) for c in ("alpha", "beta")]
    assert abs(begun[0] - begun[1]) <= 2.0, begun  # submitted together, started together
    # OAR's address of a node (the lab's nodes are reached by their names)
    assert deployers["alpha"].address("alpha-2") == "alpha-2"


def test_a_failing_part_fails_the_run_and_the_other_is_cancelled(lab: Lab) -> None:
    user = lab.oar.users[0]
    start = merged(
        lab.hold("alpha", ["alpha-4", "alpha-5"], user, 600),
        lab.hold("beta", ["beta-5"], user, 600),
    )
    lab.begun()
    app = APP.replace("ALPHA_EXIT", "$(sleep 300; echo 0)").replace("BETA_EXIT", "3")
    run, _ = deploy(lab, app, start, user)
    # OAR's exit_code 768 (a wait status) is exit 3; the other part, deleted, is cancelled
    assert records(run) == {"alpha": ("cancelled", None), "beta": ("failed", 3)}
    assert run.exit_status() == 1
    alpha = oar_job(lab, run, "alpha")
    assert (alpha["state"], alpha["exit_code"]) == ("Error", None)
    assert oar_job(lab, run, "beta")["exit_code"] == 768


def test_a_job_takes_what_is_left_of_the_allocation_and_not_more(lab: Lab) -> None:
    """A start with two minutes left: the job asks for less (OAR places an inner job only
    where it fits whole), and runs; one asking for more than is left is never placed, and the
    deployer says why it waits."""
    user = lab.oar.users[0]
    start = lab.hold("alpha", ["alpha-6"], user, 120)
    lab.begun()
    run, deployers = deploy(lab, one_part("solver", "echo $OAR_JOB_WALLTIME_SECONDS"), start, user)
    assert records(run) == {"alpha": ("completed", 0)}
    job = oar_job(lab, run, "alpha")
    assert job["startTime"] + job["walltime"] <= start.end  # it ends within the allocation
    # what was left at the submission (to the second), less OAR's margin
    assert job["walltime"] >= start.end - SCHEDULING_MARGIN - job["submissionTime"] - 1

    plan = run.plans[0]
    deployer = deployers["alpha"]
    too_long = deployer.submit(plan, start.end - int(time.time()) + 60)
    deadline = time.monotonic() + 30
    while (status := deployer.status(too_long)).detail is None:
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status.state == "pending"
    assert "no room for it in its container" in str(status.detail)
    deployer.cancel(too_long)


def test_another_users_job_into_a_placeholder_is_accepted_by_oar(lab: Lab) -> None:
    """OAR 2.5.9 does not check who owns a container: any user who knows its id (oarstat shows
    every job's) may run inner jobs in it. The bridge's placeholders hold hosts against OAR's
    other jobs, not against other users' inner jobs."""
    owner, other = lab.oar.users[:2]
    start = lab.hold("alpha", ["alpha-7"], owner, 600)
    lab.begun()
    other_root = lab.oar.workdir(other) / lab.root.name
    other_root.mkdir()
    shutil.chown(other_root, other, other)
    try:
        theirs = Lab(lab.oar, other_root)
        run, _ = deploy(theirs, one_part("intruder", 'sort -u "$OAR_NODEFILE"'), start, other)
        assert records(run) == {"alpha": ("completed", 0)}
        assert (run.directory.path / "alpha.out").read_text() == "alpha-7\n"
    finally:
        shutil.rmtree(other_root, ignore_errors=True)
    job = oar_job(lab, run, "alpha")
    assert job["owner"] == other
    assert job["types"] == [f"inner={lab.container(start, 'alpha')}"]
    assert job["assigned_network_address"] == ["alpha-7"]


@pytest.mark.mpi
def test_the_coupled_example_runs_in_two_oar_placeholders(mpi: None, lab: Lab) -> None:
    """examples/coupled as shipped but for the lab's two differences (see the module's
    docstring): the ranks start on each job's first node, the rendezvous is 127.0.0.1."""
    user = lab.oar.users[0]
    start = merged(
        lab.hold("alpha", ["alpha-2", "alpha-3"], user, 600),
        lab.hold("beta", ["beta-6"], user, 600),
    )
    lab.begun()
    text = (EXAMPLE / "coupled.toml").read_text()
    assert 'mpi = { slurm = "mpirun", mock = "local" }' in text
    text = text.replace('mock = "local" }', 'mock = "local", oar = "local" }')
    run, _ = deploy(lab, text, start, user, base=EXAMPLE, address=lambda c, h: "127.0.0.1")
    folder = run.directory.path
    assert records(run) == {"alpha": ("completed", 0), "beta": ("completed", 0)}, outputs(run)
    solver = json.loads((folder / "solver.json").read_text())
    coupler = json.loads((folder / "coupler.json").read_text())
    assert (solver["ranks"], coupler["ranks"]) == (4, 2)
    assert solver["ok"]
    assert coupler["ok"]
    assert solver["received"] == coupler["sent"]
    started = abs(solver["started"] - coupler["started"])
    print(f"the two components started {started:.2f} s apart")
    assert started <= 2.0
