"""The front end's worker in-process, on a virtual clock: what it does after a crash cut a step
short (never run a job twice), and when the batch system ends a job under its process.

Real processes (small Python commands in a temporary folder); each test kills what it started.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from coorm_bridge.adapters.frontend import FrontEnd, ProcessSpec
from coorm_bridge.adapters.mock.frontend import account
from coorm_bridge.core.batch import JobSpec, JobState, NodeState
from coorm_bridge.core.model import Filter
from coorm_bridge.core.states import AppState
from coorm_bridge.protocol import JobRequest
from coorm_bridge.store import JobRow
from tests import daemons, sites

T0 = sites.T0
#: The sessions' owner: the account this runs as, whose jobs a daemon runs whether it is root
#: (as that owner) or not (as itself).
OWNER = account()


class Site(sites.Site):
    """A bridge over a one-cluster mock platform with its front end, on a virtual clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.work = tmp_path / "work"
        self.work.mkdir()
        placement = {"attempts": 5, "hold_first": 1}  # the defaults
        super().__init__(
            tmp_path, {"c1": 8}, policy={"fair_start": 5}, placement=placement, jobs=True
        )
        self.jobs = tmp_path / "jobs"
        self.step(T0)

    @property
    def front(self) -> FrontEnd:
        front = self.adapter.front_end()
        assert front is not None
        return front

    def started(self) -> str:
        sid = self.bridge.subscribe(OWNER, Filter(), None).session
        self.bridge.put_request(OWNER, sid, {"c1": 2}, 3600)
        self.step(T0 + 1)
        assert self.store.session(sid).state is AppState.STARTED
        return sid

    def submit(self, sid: str, code: str, walltime: int = 600) -> JobRow:
        body = JobRequest(
            cluster="c1",
            name="solver",
            argv=(sys.executable, "-c", code),
            workdir=str(self.work),
            walltime=walltime,
            stdout=str(self.work / "out.txt"),
            stderr=str(self.work / "err.txt"),
        )
        answer = self.service.jobs.submit(OWNER, sid, body)
        job = self.store.job(answer.job)
        assert job is not None
        return job

    def run_until_ended(self, job_id: str, timeout: float = 30) -> JobRow:
        deadline = time.monotonic() + timeout
        while True:
            self.service.job_runner.run()
            job = self.store.job(job_id)
            assert job is not None
            if job.step == "ended":
                return job
            assert time.monotonic() < deadline, job
            time.sleep(0.05)

    def kill_all(self) -> None:
        daemons.end_jobs(self.jobs.glob("*"))


@pytest.fixture
def site(make_site):
    made = make_site(Site)
    yield made
    made.kill_all()


def spec(site: Site, job: JobRow) -> JobSpec:
    return JobSpec(
        name=job.name,
        user=OWNER,
        argv=job.command.argv,
        hosts=2,
        walltime=job.walltime,
        reservation=job.reservation,
    )


def test_a_submission_cut_short_is_not_made_again_and_what_it_left_is_cancelled(site):
    sid = site.started()
    job = site.submit(sid, "pass")
    # The daemon died after the batch system took the job, before it recorded its id.
    stray = site.front.submit("c1", spec(site, job))
    site.store.update_job(job.id, step="submitting")
    ended = site.run_until_ended(job.id)
    assert (ended.state, ended.batch_job) == ("failed", None)
    assert "not submitted again" in (ended.reason or "")
    assert site.adapter.job_state("c1", stray) is JobState.CANCELLED
    assert not site.jobs.exists() or not any(site.jobs.iterdir())  # no process either


def test_a_launch_cut_short_finds_its_process_or_never_starts_one(site):
    found = site.submit(site.started(), "import time; time.sleep(1)")
    lost = site.submit(site.started(), "pass")
    for job in (found, lost):
        batch = site.front.submit("c1", spec(site, job))
        site.store.update_job(job.id, step="queued", batch_job=batch)
    # ``found``'s process started before the daemon died; ``lost``'s never did.
    site.front.launch(
        found.id,
        ProcessSpec(
            argv=found.command.argv,
            environment={},
            workdir=str(site.work),
            stdout=str(site.work / "found.txt"),
            stderr=str(site.work / "found.txt"),
        ),
    )
    for job in (found, lost):
        site.store.update_job(job.id, step="launching", state="running")
    ended = site.run_until_ended(found.id)
    assert (ended.state, ended.exit_code) == ("completed", 0)
    assert ended.pid is not None
    gone = site.run_until_ended(lost.id)
    assert gone.state == "failed"
    assert "not started again" in (gone.reason or "")
    assert not (site.jobs / lost.id).exists()  # no process was started for it
    assert lost.batch_job is None
    assert site.adapter.job_state("c1", gone.batch_job or "") is JobState.FAILED


def test_a_host_going_down_under_a_job_stops_its_process(site):
    sid = site.started()
    job = site.submit(sid, "import time; open('ready', 'w').close(); time.sleep(600)")
    site.service.job_runner.run()
    deadline = time.monotonic() + 30
    while not (site.work / "ready").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    running = site.store.job(job.id)
    assert running is not None
    assert running.state == "running"
    site.adapter.set_node_state("c1", running.host_names[0], NodeState.DOWN)
    ended = site.run_until_ended(job.id)
    assert (ended.state, ended.signal) == ("failed", signal.SIGTERM)
    assert "the batch system ended it (failed)" in (ended.reason or "")
