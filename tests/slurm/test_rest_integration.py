"""The slurmrestd back-end against a real Slurm 22.05 (tests/slurm/slurm-local.sh, REST=1).

The same state read through slurmrestd (its Unix socket, or TCP with a JWT) and through the
commands must give the same nodes, jobs and reservations.
"""

from __future__ import annotations

import getpass
import time

import pytest

from coorm_bridge.adapters.slurm.adapter import SlurmAdapter
from coorm_bridge.adapters.slurm.plugin import make_slurm_adapter
from coorm_bridge.adapters.slurm.rest_backend import RestBackend
from coorm_bridge.adapters.slurm.settings import RestSettings, SlurmCluster, SlurmSettings
from coorm_bridge.core.batch import JobSpec, JobState, ReservationSpec, Unavailable

pytestmark = pytest.mark.slurm

USER = getpass.getuser()


def make(slurm, backend: str = "cli", rest: RestSettings | None = None) -> SlurmAdapter:
    clusters = tuple(
        SlurmCluster(name=p, partition=p, slurm_conf=slurm.conf) for p in slurm.clusters
    )
    return make_slurm_adapter(SlurmSettings(backend=backend, rest=rest, clusters=clusters))


@pytest.fixture
def slurm(slurm_partitions):
    slurm_partitions.reset()
    yield slurm_partitions
    slurm_partitions.reset()


@pytest.fixture
def cli(slurm):
    adapter = make(slurm)
    yield adapter
    adapter.close()


@pytest.fixture
def rest(slurm):
    adapter = make(slurm, "rest", RestSettings(url=f"unix://{slurm.rest_socket()}"))
    yield adapter
    adapter.close()


def sleeper(hosts: int, walltime: int = 600) -> JobSpec:
    return JobSpec(
        name="sleeper", user=USER, argv=("sleep", "900"), hosts=hosts, walltime=walltime,
        workdir="/tmp",
    )  # fmt: skip


def wait(predicate, timeout: float = 60, step: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def contents(adapter: SlurmAdapter):
    """Each cluster's nodes, jobs and reservations, order aside."""
    shots = adapter.snapshot().clusters
    return {
        name: (frozenset(s.nodes), frozenset(s.jobs), frozenset(s.reservations))
        for name, s in shots.items()
    }


def same_view(cli: SlurmAdapter, rest: SlurmAdapter):
    """Both views when they agree (a read may fall between two scheduler passes: try again)."""
    deadline = time.monotonic() + 60  # a failsafe: a scheduler pass or two makes them agree
    seen, expected = contents(rest), contents(cli)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.5)
        seen, expected = contents(rest), contents(cli)
    assert seen == expected
    return seen


def test_the_unix_socket_gives_what_the_commands_give(slurm, cli, rest):
    assert isinstance(rest.backend, RestBackend)
    assert rest.backend.dialect().version == "v0.0.38"
    assert rest.clusters() == cli.clusters()
    alpha, beta, gamma = slurm.clusters[:3]
    running = rest.submit(alpha, sleeper(hosts=6, walltime=1200))
    waiting = rest.submit(alpha, sleeper(hosts=4))
    small = rest.submit(gamma, sleeper(hosts=2))
    wait(lambda: rest.job_state(alpha, running) is JobState.RUNNING)
    wait(lambda: rest.job_state(gamma, small) is JobState.RUNNING)
    assert rest.job_state(alpha, waiting) is JobState.PENDING
    now = rest.now()
    spec = ReservationSpec(name="coorm-rest-1", start=now + 600, end=now + 1800, hosts=3,
                           users=(USER,))  # fmt: skip
    handle = rest.create_reservation(beta, spec)  # written by scontrol, read back by slurmrestd
    assert (handle.start, handle.end, len(handle.host_names)) == (spec.start, spec.end, 3)

    def predicted():
        jobs = {job.id: job for job in rest.snapshot([alpha]).clusters[alpha].jobs}
        return waiting in jobs and jobs[waiting].start is not None

    wait(predicted)
    view = same_view(cli, rest)
    nodes, jobs, _ = view[alpha]
    assert len(nodes) == 8
    assert {job.id: job.state for job in jobs} == {
        running: JobState.RUNNING,
        waiting: JobState.PENDING,
    }
    assert {r.name for r in view[beta][2]} == {"coorm-rest-1"}
    assert {job.id for job in view[gamma][1]} == {small}

    rest.update_reservation(beta, spec.model_copy(update={"hosts": 4}))
    rest.cancel(gamma, small)
    wait(lambda: rest.job_state(gamma, small) is JobState.CANCELLED)
    assert len(same_view(cli, rest)[beta][2]) == 1
    rest.delete_reservation(beta, "coorm-rest-1")
    rest.delete_reservation(beta, "coorm-rest-1")  # idempotent
    assert same_view(cli, rest)[beta][2] == frozenset()


def test_tcp_with_a_jwt_reads_too(slurm, cli, tmp_path):
    token_file = tmp_path / "jwt"
    token_file.write_text(slurm.token(lifespan=600) + "\n")
    settings = RestSettings(url=slurm.rest_url(), token_file=token_file)
    rest = make(slurm, "rest", settings)
    try:
        alpha = slurm.clusters[0]
        job = cli.submit(alpha, sleeper(hosts=2))
        wait(lambda: rest.job_state(alpha, job) is JobState.RUNNING)
        assert rest.clusters() == cli.clusters()
        assert {j.id for j in same_view(cli, rest)[alpha][1]} == {job}
    finally:
        rest.close()


def test_a_bad_token_makes_the_cluster_unavailable(slurm, tmp_path):
    token_file = tmp_path / "jwt"
    token_file.write_text("not-a-token")
    rest = make(
        slurm, "rest", RestSettings(url=slurm.rest_url(), user="root", token_file=token_file)
    )
    try:
        with pytest.raises(Unavailable, match="JWT"):
            rest.snapshot()
    finally:
        rest.close()
