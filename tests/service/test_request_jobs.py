"""Jobs of an evolving application's requests (API v2) through the front end, in-process on a
virtual clock: where each runs (its request's reservation, its pre-allocation's for an update
inside one, none for preemptible work; on exactly its hosts or some of them), what is refused
and changes nothing, and the job stopped when its request ends or is killed past a preemption's
deadline.

Real processes (small Python commands in a temporary folder); each test kills what it started.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coorm_bridge.adapters.mock.adapter import MockAdapter
from coorm_bridge.adapters.mock.frontend import account
from coorm_bridge.core.batch import JobSpec, JobState
from coorm_bridge.core.model import ClusterInfo, Filter, Submission
from coorm_bridge.core.states import AppState
from coorm_bridge.core.typed import TypedRequest
from coorm_bridge.protocol import JobAnswer
from coorm_bridge.protocol_v2 import RequestInfo, RequestJobRequest
from coorm_bridge.service.errors import Conflict, Invalid, NotFound
from coorm_bridge.store import JobRow
from tests import daemons, sites
from tests.jobs import gone

T0 = sites.T0
#: The applications' owner: the account this runs as, whose jobs the front end runs as root
#: (as that owner) or not (as itself).
OWNER = account()


class Site(sites.Site):
    """A bridge over the mock platform (c1: 8 hosts, c2: 4) with its front end."""

    def __init__(self, tmp_path: Path, adapter: type[MockAdapter] = MockAdapter) -> None:
        self.work = tmp_path / "work"
        self.work.mkdir()
        super().__init__(tmp_path, adapter=adapter, jobs=True)
        self.jobs_folder = tmp_path / "jobs"
        self.step(T0)

    @property
    def evolving(self) -> Any:
        assert self.bridge.evolving is not None
        return self.bridge.evolving

    def application(self, user: str = OWNER) -> str:
        return str(self.evolving.subscribe(user, Filter(), None).session)

    def send(self, sid: str, user: str = OWNER, **fields: Any) -> RequestInfo:
        self.evolving.request(user, sid, TypedRequest.model_validate(fields))
        return self.info(sid, fields["id"], user)

    def info(self, sid: str, rid: str, user: str = OWNER) -> RequestInfo:
        found: RequestInfo = self.evolving.request_info(user, sid, rid)
        return found

    def body(self, code: str, *, cluster: str = "c1", **fields: Any) -> RequestJobRequest:
        given = {
            "cluster": cluster,
            "name": "task",
            "argv": [sys.executable, "-c", code],
            "workdir": str(self.work),
            "walltime": 600,
            "stdout": str(self.work / "out.txt"),
            "stderr": str(self.work / "err.txt"),
        }
        return RequestJobRequest.model_validate(given | fields)

    def submit(self, sid: str, rid: str, code: str, **fields: Any) -> JobAnswer:
        jobs = self.service.request_jobs
        answer: JobAnswer = jobs.submit(OWNER, sid, rid, self.body(code, **fields))
        return answer

    def row(self, job_id: str) -> JobRow:
        job = self.store.job(job_id)
        assert job is not None
        return job

    def run_until(self, job_id: str, done: Any, timeout: float = 30) -> JobRow:
        """The job runner's rounds until ``done(job)``; ``timeout`` only stops a test whose
        job never gets there."""
        deadline = time.monotonic() + timeout
        while not done(job := self.row(job_id)):
            assert time.monotonic() < deadline, job
            self.service.job_runner.run()
            time.sleep(0.05)
        return job

    def batch_job(self, job: JobRow) -> Any:
        (record,) = [r for r in self.adapter.schedulers[job.cluster].records()
                     if r.id == job.batch_job]  # fmt: skip
        return record

    def kill_all(self) -> None:
        daemons.end_jobs(self.jobs_folder.glob("*"))


@pytest.fixture
def site(make_site: Any) -> Any:
    made = make_site(Site)
    yield made
    made.kill_all()


WAIT = "import time; open('ready', 'w').close(); time.sleep(600)"


def ready(site: Site) -> None:
    deadline = time.monotonic() + 30
    while not (site.work / "ready").exists():
        assert time.monotonic() < deadline, "the job's process never started"
        site.service.job_runner.run()
        time.sleep(0.05)


def test_an_update_inside_a_pre_allocation_runs_its_job_in_that_reservation_on_its_hosts(
    site: Site,
) -> None:
    sid = site.application()
    site.send(sid, id="pa", cluster="c1", hosts=6, duration=3600, type="pre-allocation")
    site.step(T0 + 1)
    site.step(T0 + 2)
    pa = site.info(sid, "pa")
    assert pa.state is AppState.STARTED
    grow = site.send(sid, id="grow", cluster="c1", hosts=2, duration=600)
    assert grow.inside == "pa"
    code = "import os; print(os.environ['COORM_JOB_HOSTS'])"
    answer = site.submit(sid, "grow", code)
    assert set(answer.hosts) == set(grow.host_names)
    job = site.row(answer.job)
    assert job.reservation == pa.reservation  # the pre-allocation's
    ended = site.run_until(answer.job, lambda j: j.step == "ended")
    assert ended.state == "completed", ended
    assert set((site.work / "out.txt").read_text().strip().split(",")) == set(grow.host_names)
    record = site.batch_job(ended)
    assert (record.reservation, set(record.host_names)) == (pa.reservation, set(grow.host_names))
    # The pre-allocation's own jobs run on all of its hosts, or on the few they name.
    whole = site.submit(sid, "pa", "pass")
    assert set(whole.hosts) == set(pa.host_names)
    (one,) = site.submit(sid, "pa", "pass", hosts=[pa.host_names[-1]]).hosts
    assert one == pa.host_names[-1]
    listed = site.service.request_jobs.jobs(OWNER, sid, "pa")
    assert [j.hosts for j in listed] == [whole.hosts, (one,)]  # oldest first
    assert [j.job for j in site.service.request_jobs.jobs(OWNER, sid, "grow")] == [answer.job]


def test_a_job_on_some_of_a_preemptible_requests_hosts_runs_there_outside_reservations(
    site: Site,
) -> None:
    sid = site.application()
    site.send(sid, id="p", cluster="c2", hosts=4, duration=3600, type="preemptible")
    site.step(T0 + 1)
    pre = site.info(sid, "p")
    assert pre.state is AppState.STARTED
    assert pre.reservation is None
    chosen = [pre.host_names[3], pre.host_names[1]]
    answer = site.submit(sid, "p", "pass", cluster="c2", hosts=chosen)
    assert answer.hosts == tuple(chosen)
    ended = site.run_until(answer.job, lambda j: j.step == "ended")
    assert (ended.state, ended.reservation) == ("completed", None)
    record = site.batch_job(ended)
    assert (record.reservation, set(record.host_names)) == (None, set(chosen))


def test_what_a_request_cannot_run_is_refused_and_changes_nothing(site: Site) -> None:
    sid = site.application()
    site.send(sid, id="p", cluster="c2", hosts=2, duration=3600, type="preemptible")
    site.step(T0 + 1)
    pre = site.info(sid, "p")
    assert pre.state is AppState.STARTED
    jobs = site.service.request_jobs
    refusals: list[tuple[Any, type[Exception], str]] = [
        (lambda: site.submit(sid, "p", "pass"), Conflict, "is on cluster c2, not c1"),
        (
            lambda: site.submit(sid, "p", "pass", cluster="c2", hosts=["c2-9"]),
            Invalid,
            "does not hold c2-9",
        ),
        (
            lambda: site.submit(sid, "p", "pass", cluster="c2", walltime=3600),
            Conflict,
            "passes the end of request p",
        ),
        (
            lambda: jobs.submit("bob", sid, "p", site.body("pass", cluster="c2")),
            NotFound,
            "no session",
        ),
        (lambda: site.submit(sid, "nothing", "pass"), NotFound, "no request nothing"),
        (
            lambda: site.submit(
                sid,
                "p",
                "pass",
                cluster="c2",
                workdir="/nowhere",
                stdout="/nowhere/out",
                stderr="/nowhere/err",
            ),
            Invalid,
            "not a folder",
        ),
    ]
    # A request not started yet: all of c1 is someone else's for now.
    other = site.subscribe("bob")
    site.request(other, {"c1": 8}, 3600, user="bob")
    site.step(T0 + 2)
    site.step(T0 + 3)
    assert site.state(other) is AppState.STARTED
    waiting = site.send(sid, id="w", cluster="c1", hosts=8, duration=600)
    assert waiting.state is not AppState.STARTED
    refusals.append((lambda: site.submit(sid, "w", "pass"), Conflict, "not started"))
    v1 = site.subscribe(OWNER)
    refusals.append((lambda: site.submit(v1, "p", "pass"), Conflict, "is a v1 session"))
    for call, kind, words in refusals:
        with pytest.raises(kind, match=words):
            call()
    assert site.store.job_count(site.evolving.request_row(OWNER, sid, "p")[0].id) == 0
    assert jobs.jobs(OWNER, sid, "w") == []
    with pytest.raises(NotFound):
        jobs.cancel(OWNER, sid, "p", "no-such-job")


class TakesJobsItself(MockAdapter):
    """The simulator as a batch system with commands of its own (as Slurm is)."""

    def clusters(self) -> list[ClusterInfo]:
        slurm = Submission(kind="slurm", partition="batch")
        return [info.model_copy(update={"submission": slurm}) for info in super().clusters()]


def test_a_cluster_whose_batch_system_takes_jobs_itself_gets_none_through_the_bridge(
    make_site: Any,
) -> None:
    site = make_site(Site, TakesJobsItself)
    sid = site.application()
    site.send(sid, id="pa", cluster="c1", hosts=2, duration=600, type="pre-allocation")
    site.step(T0 + 1)
    site.step(T0 + 2)
    pa = site.info(sid, "pa")
    assert pa.state is AppState.STARTED
    with pytest.raises(Conflict) as refused:
        site.submit(sid, "pa", "pass")
    assert str(refused.value) == (
        "this cluster's batch system takes jobs itself: submit with sbatch (kind slurm) into "
        f"reservation {pa.reservation}"
    )


def test_a_job_of_a_request_ended_by_its_application_is_stopped(site: Site) -> None:
    sid = site.application()
    site.send(sid, id="p", cluster="c1", hosts=2, duration=3600, type="preemptible")
    site.step(T0 + 1)
    answer = site.submit(sid, "p", WAIT)
    ready(site)
    site.evolving.done(OWNER, sid, "p", None)
    ended = site.run_until(answer.job, lambda j: j.step == "ended")
    assert ended.state == "cancelled", ended
    assert "its request p ended (finished)" in (ended.reason or "")
    assert ended.pid is not None
    assert gone(ended.pid)
    assert site.adapter.job_state("c1", ended.batch_job or "") is JobState.CANCELLED
    # Cancelling it now is harmless: it stays as it ended.
    again = site.service.request_jobs.cancel(OWNER, sid, "p", answer.job)
    assert again.state == "cancelled"


def test_a_job_of_a_request_killed_past_its_preemption_deadline_is_stopped(site: Site) -> None:
    sid = site.application()
    site.send(sid, id="p", cluster="c1", hosts=8, duration=7200, type="preemptible")
    site.step(T0 + 1)
    pre = site.info(sid, "p")
    answer = site.submit(sid, "p", WAIT, hosts=list(pre.host_names[:2]))
    ready(site)
    running = site.row(answer.job)
    assert running.state == "running"
    # Someone needs the whole cluster: the request is preempted, does not answer, is killed.
    other = site.subscribe("bob")
    site.request(other, {"c1": 8}, 600, user="bob")
    site.step(T0 + 2)
    deadline = site.info(sid, "p").preempt_by
    assert deadline is not None
    site.step(deadline + 1)
    site.step(deadline + 2)
    assert site.info(sid, "p").state is AppState.FINISHED
    # The enactor cancelled the job in the batch system (it names the preempted hosts now),
    # and the worker stops its process.
    assert site.adapter.job_state("c1", running.batch_job or "") is JobState.CANCELLED
    ended = site.run_until(answer.job, lambda j: j.step == "ended")
    assert ended.state in ("cancelled", "failed"), ended
    assert "preempted" in (ended.reason or ""), ended
    assert running.pid is not None
    assert gone(running.pid)
    site.step(deadline + 3)
    assert site.state(other) is AppState.STARTED


def test_a_submission_outside_reservations_cut_short_leaves_nothing_running(site: Site) -> None:
    sid = site.application()
    site.send(sid, id="p", cluster="c2", hosts=4, duration=3600, type="preemptible")
    site.step(T0 + 1)
    hosts = site.info(sid, "p").host_names
    answer = site.submit(sid, "p", "pass", cluster="c2", hosts=[hosts[1]])
    job = site.row(answer.job)
    # The daemon died after the batch system took the job, before it recorded its id; a job
    # of someone else's is not that one.
    front = site.adapter.front_end()
    assert front is not None
    spec = JobSpec(
        name=job.name,
        user=OWNER,
        argv=job.command.argv,
        hosts=1,
        walltime=job.walltime,
        host_names=job.host_names,
    )
    stray = front.submit("c2", spec)
    others = front.submit("c2", spec.model_copy(update={"user": "bob", "host_names": (hosts[2],)}))
    site.store.update_job(job.id, step="submitting")
    ended = site.run_until(answer.job, lambda j: j.step == "ended")
    assert (ended.state, ended.batch_job) == ("failed", None)
    assert "not submitted again" in (ended.reason or "")
    assert site.adapter.job_state("c2", stray) is JobState.CANCELLED
    assert site.adapter.job_state("c2", others) is JobState.RUNNING
