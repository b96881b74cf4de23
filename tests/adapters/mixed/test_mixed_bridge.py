"""The bridge over a mixed site, in-process: co-allocation spans the batch systems, and jobs go
in as each cluster takes them. Two simulated platforms on the wall clock, one of them standing
in for a batch system that takes jobs itself (as Slurm does); the same with a real Slurm is
tests/slurm/test_slurm_mixed_site.py."""

from __future__ import annotations

import getpass
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.adapters.mixed.adapter import BatchSystem, MixedAdapter
from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.batchsim import WallClock, parse_platform
from coorm_bridge.core.messages import StartEvent
from coorm_bridge.core.model import ClusterInfo, Filter, Submission
from coorm_bridge.core.policy import PolicyConfig
from coorm_bridge.core.states import AppState
from coorm_bridge.protocol import JobRequest
from coorm_bridge.service.config import Config, LimitSettings, PlacementSettings
from coorm_bridge.service.errors import Conflict
from coorm_bridge.service.wiring import Service, assemble
from coorm_bridge.store import Store

USER = getpass.getuser()


class TakesJobsItself(MockAdapter):
    """The simulator as a batch system with commands of its own: launchers submit with sbatch
    there, not through the bridge."""

    def clusters(self) -> list[ClusterInfo]:
        slurm = Submission(kind="slurm", partition="batch")
        return [info.model_copy(update={"submission": slurm}) for info in super().clusters()]


def platform(name: str, hosts: int) -> str:
    return f'[[cluster]]\nname = "{name}"\nhosts = {hosts}\n'


@pytest.fixture
def service(tmp_path: Path):
    batch = TakesJobsItself(parse_platform(platform("alpha", 4)), WallClock())
    simulated = MockAdapter(
        parse_platform(platform("delta", 4)), WallClock(), jobs=tmp_path / "jobs", run_jobs=True
    )
    adapter = MixedAdapter([BatchSystem(0, "slurm", batch), BatchSystem(1, "mock", simulated)])
    config = Config(
        policy=PolicyConfig(interval=0.1, fair_start=5),
        placement=PlacementSettings(poll_interval=1.0),
        limits=LimitSettings(held_share=1.0),  # one user may hold every host (default: half)
    )
    store = Store(tmp_path / "bridge.sqlite")
    made = assemble(config, adapter, store)
    yield made
    made.close()
    adapter.close()
    store.close()


def started(service: Service, nodes: dict[str, int]) -> tuple[str, StartEvent]:
    sid = service.bridge.subscribe(USER, Filter(), "coupled").session
    service.bridge.put_request(USER, sid, nodes, 600)
    deadline = time.monotonic() + 20
    while (row := service.store.session(sid)) is None or row.state is not AppState.STARTED:
        assert time.monotonic() < deadline, service.store.events(sid)
        for cluster in ("alpha", "delta"):
            service.loop.poll(cluster)
        service.loop.tick()
        time.sleep(0.05)
    (start,) = [e for e in service.store.events(sid) if isinstance(e, StartEvent)]
    return sid, start


def test_an_application_over_two_systems_starts_once_in_a_placeholder_on_each(service):
    _, start = started(service, {"alpha": 3, "delta": 2})
    assert len(start.allocations["alpha"].hosts) == 3
    assert len(start.allocations["delta"].hosts) == 2
    batch, simulated = (system.adapter for system in service.adapter.systems)
    for system, cluster in ((batch, "alpha"), (simulated, "delta")):
        (held,) = system.snapshot([cluster]).clusters[cluster].reservations
        assert held.name == start.allocations[cluster].reservation
        assert (held.start, held.end) == (start.time, start.end)
        assert sorted(held.host_names) == sorted(start.allocations[cluster].hosts)
        assert held.users == (USER,)


def test_the_bridge_runs_jobs_on_the_simulated_platform_only(service, tmp_path):
    sid, start = started(service, {"alpha": 1, "delta": 2})
    work = tmp_path / "work"
    work.mkdir()
    body = {
        "name": "part",
        "argv": [sys.executable, "-c", "print('hello')"],
        "workdir": str(work),
        "walltime": 60,
        "stdout": str(work / "out.txt"),
        "stderr": str(work / "err.txt"),
    }
    with pytest.raises(Conflict) as refused:
        service.jobs.submit(USER, sid, JobRequest.model_validate({**body, "cluster": "alpha"}))
    reservation = start.allocations["alpha"].reservation
    assert str(refused.value) == (
        "this cluster's batch system takes jobs itself: submit with sbatch (kind slurm) into "
        f"reservation {reservation}"
    )
    answer = service.jobs.submit(USER, sid, JobRequest.model_validate({**body, "cluster": "delta"}))
    assert sorted(answer.hosts) == sorted(start.allocations["delta"].hosts)
    deadline = time.monotonic() + 30
    while (job := service.store.job(answer.job)) is not None and job.step != "ended":
        assert time.monotonic() < deadline, job
        service.job_runner.run()
        time.sleep(0.05)
    assert job is not None
    assert job.state == "completed", job
    assert (work / "out.txt").read_text() == "hello\n"
